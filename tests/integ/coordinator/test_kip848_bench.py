"""Keeps `bench/kip848.py` runnable: both parts at toy sizes, against a node of its own."""

from __future__ import annotations

from bench.kip848 import main

TINY = ["--sizes", "2", "--repeat", "1", "--heartbeat-ms", "200", "--timeout", "60"]
TINY += ["--members", "6", "--groups", "2", "--connections", "2", "--seconds", "0.3", "--rounds", "1"]


def test_benchmark_runs_at_toy_sizes(zk_connect, capsys):
    code = main(["--zk", zk_connect, *TINY])
    out = capsys.readouterr().out
    assert code in (0, 1), out  # 1: a target missed, which toy sizes say nothing about
    for protocol in ("consumer", "classic"):
        assert f"N=2 {protocol}" in out and "time to stable after one join" in out, out
    assert "errors {}" in out, out  # every steady heartbeat answered without error, on both listeners
    assert out.splitlines()[-1] in ("targets: met", "targets: MISSED")
