"""TLS to ZooKeeper's `secureClientPort` (`--zk-tls-ca/--zk-tls-cert/--zk-tls-key`), with a
credential, on a real ZooKeeper of the module's own started with a secure port that requires a
client certificate (`ssl.clientAuth=need`); the certificates are made here (`testing.certs`).

* the CLI (root options), a coordinator node process and a scheme-one consumer (the
  environment) work over TLS, and what they write carries the credential's ACL;
* a wrong CA, a certificate that does not match its key, an expired server certificate, an
  unreadable key and a plaintext port are each one line, and nothing is written.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from kazoo.client import KazooClient

from coordinator.node.process import NodeProcess
from core.errors import ZooKeeperUnavailable
from core.zk import connect
from core.zk_auth import ENV_AUTH_FILE, ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY, ZK_SECURITY_ENV, digest_id
from testing.certs import CertificateAuthority
from testing.zookeeper import SUPER_AUTH, ServerTls, ZkServer
from tests.inspect_helpers import REPO, legacy_consumer
from tests.namespaces import chroot_for, remove_namespace
from tests.snapshots import zk_tree
from topics.log import Log

# The module's tests share its servers: they run on one worker, which starts them once.
pytestmark = pytest.mark.xdist_group("test_zk_tls")

HOSTS = ("127.0.0.1", "localhost")  # the server certificate's names; tests connect to 127.0.0.1


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("zk-tls")
    ca, other_ca = CertificateAuthority.new(), CertificateAuthority.new("another CA")
    server = ca.issue("zookeeper", hosts=HOSTS)
    zk = ZkServer.start_single(tls=ServerTls(server.key + server.cert, ca.pem, client_auth="need"))
    try:
        files = {
            "ca": ca.write(tmp / "ca.pem"),
            "other_ca": other_ca.write(tmp / "other-ca.pem"),
            **{f"client_{k}": v for k, v in ca.issue("groupshift").write(tmp / "client").items()},
            **{f"stranger_{k}": v for k, v in ca.issue("stranger").write(tmp / "stranger").items()},
        }
        auth = tmp / "gs.auth"
        auth.write_text("digest:gs:tls-secret\n")
        auth.chmod(0o600)
        files["auth"] = auth
        yield zk, files, tmp
    finally:
        zk.remove()


@pytest.fixture
def secure(tls, request):
    """`127.0.0.1:<secure port>/<fresh chroot>`, removed (over the plaintext port) afterwards."""
    zk, files, tmp = tls
    chroot = chroot_for(request.node.name)
    yield f"127.0.0.1:{zk.secure_port}/{chroot}", files
    remove_namespace(f"{zk.connect_string}/{chroot}")


def _env(files, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ZK_SECURITY_ENV and k != "GROUPSHIFT_ZK"}
    env.update(PYTHONPATH=str(REPO), **extra)
    return env


def _cli(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )


def _tls_options(files, ca="ca", cert="client_cert", key="client_key") -> list[str]:
    return ["--zk-tls-ca", str(files[ca]), "--zk-tls-cert", str(files[cert]), "--zk-tls-key", str(files[key])]


def test_cli_node_and_consumer_over_tls_with_a_credential(secure, tmp_path, monkeypatch, tls):
    zk, files = secure
    data = tmp_path / "data"
    env = _env(files, GROUPSHIFT_DATA=str(data))
    opts = ["--zk-auth-file", str(files["auth"]), *_tls_options(files)]
    for args in (
        ["topics", "create", "clicks", "-p", "2", "--zk", zk],
        ["topics", "produce", "clicks", "-n", "20"],
    ):
        done = _cli(env, *opts, *args)
        assert done.returncode == 0, done.stderr
    for var, value in (
        (ENV_AUTH_FILE, files["auth"]),
        (ENV_TLS_CA, files["ca"]),
        (ENV_TLS_CERT, files["client_cert"]),
        (ENV_TLS_KEY, files["client_key"]),
    ):
        monkeypatch.setenv(var, str(value))
    node = NodeProcess.start(zk, 1, "--data", str(data), log_path=tmp_path / "node.log")
    try:
        consumer = legacy_consumer("g1", ["clicks"], zk, Log(data))
        try:
            got, deadline = 0, time.monotonic() + 30
            while got < 20:
                assert time.monotonic() < deadline, f"consumed {got} of 20 over TLS"
                got += sum(len(v) for v in consumer.poll(timeout_ms=100).values())
            consumer.commit()
        finally:
            consumer.close()
    finally:
        node.stop()
    # what they wrote carries the credential's ACL (read as the server's super user, plaintext)
    server = tls[0]
    admin = KazooClient(hosts=server.connect_string, auth_data=SUPER_AUTH)
    admin.start(timeout=10)
    try:
        chroot = "/" + zk.split("/", 1)[1]
        for path in (chroot, chroot + "/brokers/topics/clicks", chroot + "/consumers/g1/offsets/clicks/0"):
            acl = admin.get_acls(path)[0]
            assert [(a.id.scheme, a.id.id) for a in acl] == [("digest", digest_id("gs", "tls-secret"))], path
    finally:
        admin.stop()
        admin.close()


@pytest.mark.parametrize(
    "case, says",
    [
        ("wrong-ca", "the TLS handshake with ZooKeeper failed (127.0.0.1:"),
        ("mismatched-key", "cannot be used together"),
        ("unreadable-key", "cannot read the ZooKeeper TLS client key"),
        ("cert-without-key", "go together"),
        ("plaintext-port", "TLS handshake"),
    ],
)
def test_bad_tls_settings_are_one_line_and_change_nothing(secure, tls, case, says):
    zk, files = secure
    files = dict(files, missing=files["ca"].parent / "missing.key")
    server = tls[0]
    options = {
        "wrong-ca": _tls_options(files, ca="other_ca"),
        "mismatched-key": _tls_options(files, key="stranger_key"),
        "unreadable-key": _tls_options(files, key="missing"),
        "cert-without-key": ["--zk-tls-ca", str(files["ca"]), "--zk-tls-cert", str(files["client_cert"])],
        "plaintext-port": _tls_options(files),
    }[case]
    target = f"{server.connect_string}/x" if case == "plaintext-port" else zk
    before = zk_tree(f"{server.connect_string}/{zk.split('/', 1)[1]}")
    t0 = time.monotonic()
    args = [
        "--zk-auth-file",
        str(files["auth"]),
        *options,
        "topics",
        "create",
        "t",
        "-p",
        "1",
        "--zk",
        target,
    ]
    done = _cli(_env(files), *args)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and says in lines[0], done.stderr
    assert time.monotonic() - t0 < 8  # said at once, not after the connect timeout
    assert zk_tree(f"{server.connect_string}/{zk.split('/', 1)[1]}") == before


def test_an_expired_server_certificate_is_refused(tmp_path):
    ca = CertificateAuthority.new()
    server = ca.issue("zookeeper", hosts=HOSTS, valid_days=-1)
    zk = ZkServer.start_single(tls=ServerTls(server.key + server.cert, ca.pem))
    try:
        with pytest.raises(ZooKeeperUnavailable, match="certificate has expired"):
            _connect_tls(f"127.0.0.1:{zk.secure_port}", ca.write(tmp_path / "ca.pem"))
    finally:
        zk.remove()


def _connect_tls(hosts, ca):
    os.environ[ENV_TLS_CA] = str(ca)
    try:
        return connect(hosts)
    finally:
        os.environ.pop(ENV_TLS_CA)


def test_a_client_without_the_required_certificate_is_refused(secure):
    zk, files = secure
    with pytest.raises(ZooKeeperUnavailable, match="HANDSHAKE_FAILURE.*--zk-tls-cert/--zk-tls-key"):
        _connect_tls(zk.split("/")[0], files["ca"])
