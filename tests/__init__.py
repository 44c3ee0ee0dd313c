"""The test suite, laid out like the source tree (issue 28):

* `tests/unit/<package>/`: pure tests — no ZooKeeper, no child process, no container, no network;
  `tests/unit/repo/` checks the repository as a whole (import layers, docs, extras).
* `tests/integ/<package>/`: against real ZooKeeper (tests/conftest.py's fixtures) and real processes.
  A file that needs either for one test sits here whole.
* `tests/` itself: conftest.py and the helpers every test imports as `tests.<module>`
  (snapshots, namespaces, ports, inspect_helpers, ...), and `tests/fixtures/`.

Every folder is a package, so test modules with the same name in two folders do not collide.
"""
