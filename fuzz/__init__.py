"""Fuzzing a coordinator node: bad frames beside a live group, then is the node well?

* `fuzz.frames` — the frame generator (`FrameFuzzer`), reproducible from a seed;
* `fuzz.run` — sends them to a real node beside a live group and checks the node afterwards
  (`python -m fuzz`, on demand; the tests run a smaller batch).
"""
