"""Bad TLS input to `groupshift coordinator serve`: one line on stderr, a non-zero exit, nothing registered.

Every case is a real `python -m cli coordinator serve` process on the test's ZooKeeper chroot with
certificates from `testing.certs`; the processes run side by side, and the namespace (and the
names around it) is compared before and after: a node that got as far as ZooKeeper would have
created `/groupshift` and registered itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from testing.certs import make_certs
from tests.snapshots import zk_tree

REPO = Path(__file__).resolve().parents[3]


def _cases(c, tmp: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (arguments after `serve --node-id 7`, what the one line must say)."""
    tls = ["--listen", "TLS://127.0.0.1:0"]
    ssl = ["--kafka-listen", "SSL://127.0.0.1:0", "--data", str(tmp / "data")]
    (tmp / "a-directory").mkdir()
    shared = tmp / "shared.key"
    shared.write_bytes(Path(c.server_key).read_bytes())
    shared.chmod(0o644)
    not_a_key = tmp / "not-a.key"
    not_a_key.write_bytes(Path(c.server_cert).read_bytes())
    not_a_key.chmod(0o600)
    pair = ["--tls-cert", c.server_cert, "--tls-key", c.server_key]
    return {
        "key missing": (
            [*tls, "--tls-cert", c.server_cert, "--tls-key", str(tmp / "none.key")],
            "cannot read --tls-key",
        ),
        "key is a directory": (
            [*tls, "--tls-cert", c.server_cert, "--tls-key", str(tmp / "a-directory")],
            "is not a file",
        ),
        "key is a certificate": (
            [*tls, "--tls-cert", c.server_cert, "--tls-key", str(not_a_key)],
            "holds no PEM private key",
        ),
        "key readable by everyone": (
            [*tls, "--tls-cert", c.server_cert, "--tls-key", str(shared)],
            "chmod o-rw",
        ),
        "certificate and key do not match": (
            [*tls, "--tls-cert", c.server_cert, "--tls-key", c.other_key],
            "does not match the key",
        ),
        "expired certificate": (
            [*ssl, "--tls-cert", c.expired_cert, "--tls-key", c.expired_key],
            "expired on",
        ),
        "certificate not valid yet": (
            [*tls, "--tls-cert", c.future_cert, "--tls-key", c.future_key],
            "not valid before",
        ),
        "CA is not PEM": ([*tls, *pair, "--tls-ca", c.server_key], "--tls-ca"),
        "client auth without a CA": ([*tls, *pair, "--tls-client-auth", "required"], "needs --tls-ca"),
        "unknown client auth": ([*tls, *pair, "--tls-client-auth", "want"], "'--tls-client-auth'"),
        "SSL without --tls-cert": (ssl, "needs the node's certificate and key"),
        "TLS settings with no TLS listener": (pair, "no listener uses TLS"),
        "unknown protocol": (["--kafka-listen", "FOO://127.0.0.1:0"], "unknown security protocol 'FOO'"),
        "Kafka's name on the native listener": (
            ["--listen", "SSL://127.0.0.1:0"],
            "the kafka listener's name",
        ),
        "SASL_SSL without --tls-cert": (
            ["--kafka-listen", "SASL_SSL://127.0.0.1:0", "--data", str(tmp / "data")],
            "--kafka-listen SASL_SSL://127.0.0.1:0 needs the node's certificate and key",
        ),
    }


def test_bad_tls_input_is_one_line_and_registers_nothing(zk_connect, tmp_path):
    certs = make_certs(tmp_path / "tls")
    cases = _cases(certs, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUPSHIFT_")}
    env.update(PYTHONPATH=str(REPO), GROUPSHIFT_HOME=str(tmp_path / "home"))
    before = zk_tree(zk_connect)
    base = [sys.executable, "-m", "cli", "coordinator", "serve", "--zk", zk_connect, "--node-id", "7"]
    procs = {
        name: subprocess.Popen(
            [*base, *args], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for name, (args, _) in cases.items()
    }
    failures = []
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        lines = err.splitlines()
        expected = cases[name][1]
        if (
            proc.returncode == 0
            or out
            or len(lines) != 1
            or not lines[0].startswith("error: ")
            or expected not in err
        ):
            failures.append(f"{name}: exit {proc.returncode}, stdout {out!r}, stderr {err!r}")
    assert not failures, "\n".join(failures)
    assert zk_tree(zk_connect) == before
    assert not (tmp_path / "data").exists()  # nothing created on disk either
