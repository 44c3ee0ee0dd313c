"""`groupshift offsets export|import|reset|delete` on real ZooKeeper, both schemes, and the bad-input suite.

Every bad input must print one line on stderr, exit non-zero, and leave the whole ZooKeeper tree
(read from the server's root) and the data directory byte-identical.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from coordinator.node.process import CoordinatorNodes
from core.types import TopicPartition as TP
from tests.fixtures.kafka08_tree import STATIC, write_tree
from tests.inspect_helpers import as_json, make_topic, ok, run
from tests.snapshots import dir_tree, zk_tree
from topics.log import Log

GROUP = "offsets-only"  # from the 0.8 fixture: views:1 -> 4, views:2 -> 0, no consumers


@pytest.fixture
def env(zk, zk_connect, tmp_path):
    """The 0.8 tree, with logs: clicks 2 x 10 records, views 3 x 8 (views' first 4 records an hour old)."""
    write_tree(zk)
    log = Log(tmp_path / "data")
    log.create("clicks", 2)
    log.create("views", 3)
    old = int(time.time() * 1000) - 3_600_000
    for p in range(2):
        log.produce("clicks", [(b"k", b"v")] * 10, partition=p)
    for p in range(3):
        log.produce("views", [(b"k", b"v", old + i) for i in range(4)], partition=p)
        log.produce("views", [(b"k", b"v")] * 4, partition=p)
    return zk, zk_connect, log


def committed(zk_connect, group, scheme=None):
    args = ["offsets", "export", group, "--format", "json"] + (["--scheme", scheme] if scheme else [])
    import json

    body = json.loads(ok(*args, zk=zk_connect))
    return {TP(o["topic"], o["partition"]): o["offset"] for o in body["offsets"]}


def test_export_formats(env):
    _, zk_connect, _ = env
    assert ok("offsets", "export", GROUP, zk=zk_connect) == "views,1,4\nviews,2,0\n"
    assert ok("offsets", "export", GROUP, "--format", "zk-export", zk=zk_connect) == (
        "/consumers/offsets-only/offsets/views/1:4\n/consumers/offsets-only/offsets/views/2:0\n"
    )


@pytest.mark.parametrize("fmt", ["csv", "zk-export"])
def test_export_import_round_trip(env, tmp_path, fmt):
    zk, zk_connect, log = env
    exported = ok("offsets", "export", STATIC, "--format", fmt, zk=zk_connect)
    f = tmp_path / "offs"
    f.write_text(exported.replace("static-grp", "copy"))
    # a new group needs its scheme; the dry run (default) writes nothing
    before = zk_tree(zk_connect)
    r = run(
        "offsets", "import", "copy", "--from-file", str(f), "--scheme", "zk", zk=zk_connect, data=log.root
    )
    assert r.returncode == 0 and "dry run" in r.stderr
    assert zk_tree(zk_connect) == before
    ok(
        "offsets",
        "import",
        "copy",
        "--from-file",
        str(f),
        "--scheme",
        "zk",
        "--execute",
        zk=zk_connect,
        data=log.root,
    )
    assert committed(zk_connect, "copy") == committed(zk_connect, STATIC)
    assert zk.get("/consumers/copy/offsets/clicks/0")[0] == b"5"  # 0.8's decimal string
    # and into scheme three (no coordinator node running: written in ZooKeeper, fenced by the shard epoch)
    ok(
        "offsets",
        "import",
        "copy",
        "--from-file",
        str(f),
        "--scheme",
        "coordinator",
        "--execute",
        zk=zk_connect,
        data=log.root,
    )
    assert committed(zk_connect, "copy", "coordinator") == committed(zk_connect, STATIC)


def expected(scenario_args, log):
    ends = {TP("views", p): log.latest(TP("views", p)) for p in (1, 2)}
    return scenario_args, ends


@pytest.mark.parametrize(
    "args,want",
    [
        (["--to-earliest"], {1: 0, 2: 0}),
        (["--to-latest"], {1: 8, 2: 8}),
        (["--to-current"], {1: 4, 2: 0}),
        (["--to-offset", "6"], {1: 6, 2: 6}),
        (["--to-offset", "100"], {1: 8, 2: 8}),  # clamped, with a warning
        (["--shift-by", "3"], {1: 7, 2: 3}),
        (["--shift-by", "-10"], {1: 0, 2: 0}),
        (["--by-duration", "PT30M"], {1: 4, 2: 4}),  # the first record of the last half hour
        (["--to-datetime", "2000-01-01T00:00:00.000+05:30"], {1: 0, 2: 0}),
    ],
)
def test_reset_scenarios_dry_run_then_execute(env, args, want):
    _, zk_connect, log = env
    scope = ["--topic", "views:1,2"]
    before = zk_tree(zk_connect)
    plan = as_json("offsets", "reset", GROUP, *scope, *args, zk=zk_connect, data=log.root)
    assert {r["partition"]: r["new"] for r in plan} == want
    assert {r["partition"]: r["current"] for r in plan} == {1: 4, 2: 0}
    assert all(r["lag_after"] == 8 - r["new"] for r in plan)
    assert zk_tree(zk_connect) == before  # dry run by default
    r = run("offsets", "reset", GROUP, *scope, *args, "--execute", zk=zk_connect, data=log.root)
    assert r.returncode == 0, r.stderr
    assert ("above the log end" in r.stderr) == (args == ["--to-offset", "100"])
    assert committed(zk_connect, GROUP) == {TP("views", p): o for p, o in want.items()}


def test_reset_to_datetime_with_zone_and_in_the_future(env):
    _, zk_connect, log = env
    recent = datetime.fromtimestamp(time.time() - 1800, UTC)
    local = recent.astimezone().strftime("%Y-%m-%dT%H:%M:%S.000%z")
    plan = as_json(
        "offsets", "reset", GROUP, "--topic", "views:1", "--to-datetime", local, zk=zk_connect, data=log.root
    )
    assert plan[0]["new"] == 4
    r = run(
        "offsets",
        "reset",
        GROUP,
        "--topic",
        "views:1",
        "--to-datetime",
        "2999-01-01T00:00:00",
        zk=zk_connect,
        data=log.root,
    )
    assert r.returncode == 0 and "in the future" in r.stderr and "no record at or after" in r.stderr


def test_reset_all_topics_and_from_file(env, tmp_path):
    _, zk_connect, log = env
    plan = as_json("offsets", "reset", GROUP, "--all-topics", "--to-latest", zk=zk_connect, data=log.root)
    assert {(r["topic"], r["partition"]) for r in plan} == {("views", 1), ("views", 2)}
    f = tmp_path / "plan.csv"
    f.write_text("views,0,2\nviews,2,50\n")
    r = run("offsets", "reset", GROUP, "--from-file", str(f), "--execute", zk=zk_connect, data=log.root)
    assert r.returncode == 0 and "above the log end" in r.stderr
    assert committed(zk_connect, GROUP) == {TP("views", 0): 2, TP("views", 1): 4, TP("views", 2): 8}


def test_delete_offsets_of_a_topic(env):
    zk, zk_connect, log = env
    ok("offsets", "delete", STATIC.replace("static-grp", GROUP), "--topic", "views", zk=zk_connect)
    assert zk.exists("/consumers/offsets-only/offsets/views") is None
    assert zk.exists("/consumers/offsets-only") is not None


def test_coordinator_offsets_through_the_node(zk, zk_connect, tmp_path):
    log = Log(tmp_path / "data")
    make_topic(zk, log, "t", 2, 5)
    f = tmp_path / "in.csv"
    f.write_text("t,0,1\nt,1,2\n")
    with CoordinatorNodes(zk_connect, count=1):
        r = run(
            "offsets",
            "import",
            "cg",
            "--from-file",
            str(f),
            "--scheme",
            "coordinator",
            "--execute",
            zk=zk_connect,
            data=log.root,
        )
        assert r.returncode == 0 and "through coordinator node 1" in r.stderr, r.stderr
        ok(
            "offsets",
            "reset",
            "cg",
            "--topic",
            "t",
            "--shift-by",
            "2",
            "--execute",
            zk=zk_connect,
            data=log.root,
        )
        assert committed(zk_connect, "cg") == {TP("t", 0): 3, TP("t", 1): 4}
        [out] = as_json("groups", "describe", "cg", zk=zk_connect)
        assert out["summary"]["state"] == "Empty"
        ok("offsets", "delete", "cg", "--topic", "t", zk=zk_connect)
        # an Empty group without offsets is removed by its coordinator, as Kafka does
        assert run("offsets", "export", "cg", zk=zk_connect).returncode == 1
    # the node is gone (released its shards): written in ZooKeeper under the shard's fencing
    r = run(
        "offsets",
        "import",
        "cg",
        "--from-file",
        str(f),
        "--scheme",
        "coordinator",
        "--execute",
        zk=zk_connect,
        data=log.root,
    )
    assert r.returncode == 0 and "fenced by shard" in r.stderr, r.stderr
    assert committed(zk_connect, "cg") == {TP("t", 0): 1, TP("t", 1): 2}


# -- bad input: one line, non-zero, nothing changed ------------------------------------------------


def _file(tmp_path, name, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


BAD = [
    # (name, args builder(tmp_path) -> args, stderr must contain)
    ("unknown group describe", lambda t: ["groups", "describe", "nope"], "does not exist"),
    ("unknown group export", lambda t: ["offsets", "export", "nope"], "does not exist"),
    ("unknown group delete", lambda t: ["groups", "delete", "nope"], "does not exist"),
    ("empty group name", lambda t: ["groups", "describe", ""], "not a group id"),
    ("group with NUL", lambda t: ["groups", "describe", "a\x01b"], "does not exist"),
    ("group 300 chars", lambda t: ["groups", "describe", "g" * 300], "not a group id"),
    ("group with slash", lambda t: ["offsets", "export", "a/b"], "does not exist"),
    ("delete live group", lambda t: ["groups", "delete", STATIC], "live consumer"),
    (
        "reset live group",
        lambda t: ["offsets", "reset", STATIC, "--all-topics", "--to-earliest"],
        "live consumer",
    ),
    (
        "import into live group",
        lambda t: ["offsets", "import", STATIC, "--from-file", _file(t, "f", b"clicks,0,1\n")],
        "live consumer",
    ),
    (
        "unknown topic",
        lambda t: ["offsets", "reset", GROUP, "--topic", "nosuch", "--to-earliest"],
        "not registered",
    ),
    (
        "unknown partition",
        lambda t: ["offsets", "reset", GROUP, "--topic", "views:7", "--to-earliest"],
        "partition 7",
    ),
    (
        "import unknown partition",
        lambda t: ["offsets", "import", GROUP, "--from-file", _file(t, "f", b"views,9,1\n")],
        "partition 9",
    ),
    (
        "import unknown topic",
        lambda t: ["offsets", "import", GROUP, "--from-file", _file(t, "f", b"zz,0,1\n")],
        "not registered",
    ),
    (
        "negative --to-offset",
        lambda t: ["offsets", "reset", GROUP, "--all-topics", "--to-offset", "-1"],
        "negative",
    ),
    (
        "negative offset in file",
        lambda t: ["offsets", "import", GROUP, "--from-file", _file(t, "f", b"views,0,-1\n")],
        "negative",
    ),
    (
        "offset past log end",
        lambda t: ["offsets", "import", GROUP, "--from-file", _file(t, "f", b"views,0,9\n"), "--execute"],
        "past the log end",
    ),
    (
        "wrong column count",
        lambda t: ["offsets", "import", GROUP, "--from-file", _file(t, "f", b"views,0\n")],
        "columns",
    ),
    (
        "non-numeric offset",
        lambda t: ["offsets", "import", GROUP, "--from-file", _file(t, "f", b"views,0,x\n")],
        "not a number",
    ),
    (
        "duplicate line",
        lambda t: ["offsets", "import", GROUP, "--from-file", _file(t, "f", b"views,0,1\nviews,0,2\n")],
        "repeats",
    ),
    (
        "BOM",
        lambda t: ["offsets", "import", GROUP, "--from-file", _file(t, "f", b"\xef\xbb\xbfviews,0,1\n")],
        "byte order mark",
    ),
    (
        "CRLF",
        lambda t: ["offsets", "import", GROUP, "--from-file", _file(t, "f", b"views,0,1\r\n")],
        "carriage return",
    ),
    (
        "other group's zk-export",
        lambda t: [
            "offsets",
            "import",
            GROUP,
            "--from-file",
            _file(t, "f", b"/consumers/x/offsets/views/0:1\n"),
        ],
        "not 'offsets-only'",
    ),
    ("file is a directory", lambda t: ["offsets", "import", GROUP, "--from-file", str(t)], "is a directory"),
    ("missing file", lambda t: ["offsets", "import", GROUP, "--from-file", str(t / "absent")], "cannot read"),
    (
        "dry-run and execute",
        lambda t: ["offsets", "reset", GROUP, "--all-topics", "--to-earliest", "--dry-run", "--execute"],
        "contradict",
    ),
    (
        "two scenarios",
        lambda t: ["offsets", "reset", GROUP, "--all-topics", "--to-earliest", "--to-latest"],
        "exactly one",
    ),
    ("no scenario", lambda t: ["offsets", "reset", GROUP, "--all-topics"], "exactly one"),
    ("no scope", lambda t: ["offsets", "reset", GROUP, "--to-earliest"], "--topic"),
    (
        "topic and all-topics",
        lambda t: ["offsets", "reset", GROUP, "--topic", "views", "--all-topics", "--to-earliest"],
        "--topic",
    ),
    (
        "from-file with topic",
        lambda t: [
            "offsets",
            "reset",
            GROUP,
            "--topic",
            "views",
            "--from-file",
            _file(t, "f", b"views,0,1\n"),
        ],
        "drop --topic",
    ),
    (
        "bad datetime",
        lambda t: ["offsets", "reset", GROUP, "--all-topics", "--to-datetime", "yesterday"],
        "ISO 8601",
    ),
    (
        "bad duration",
        lambda t: ["offsets", "reset", GROUP, "--all-topics", "--by-duration", "30m"],
        "ISO 8601",
    ),
    (
        "bad partition list",
        lambda t: ["offsets", "reset", GROUP, "--topic", "views:a", "--to-earliest"],
        "partitions must be",
    ),
    (
        "shift without committed offset",
        lambda t: ["offsets", "reset", GROUP, "--topic", "views:0", "--shift-by", "1"],
        "no committed offset",
    ),
    (
        "new group without scheme",
        lambda t: ["offsets", "import", "newgroup", "--from-file", _file(t, "f", b"views,0,1\n")],
        "does not exist",
    ),
    (
        "offsets delete unknown topic",
        lambda t: ["offsets", "delete", GROUP, "--topic", "clicks"],
        "no offsets for topic",
    ),
    ("watch interval zero", lambda t: ["groups", "watch", GROUP, "--interval", "0"], "out of range"),
    (
        "watch samples is a directory",
        lambda t: ["groups", "watch", GROUP, "--count", "1", "--samples", str(t)],
        "is a directory",
    ),
    ("unknown state filter", lambda t: ["groups", "list", "--state", "Sleeping"], "unknown state"),
    (
        "no log for partition",
        lambda t: [
            "offsets",
            "reset",
            GROUP,
            "--topic",
            "views",
            "--to-earliest",
            "--data",
            str(t / "nodata"),
        ],
        "no log",
    ),
]


@pytest.mark.parametrize("name,build,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_changes_nothing(env, tmp_path, name, build, message):
    _, zk_connect, log = env
    args = build(tmp_path)
    data = None if "--data" in args else log.root
    before = zk_tree(zk_connect), dir_tree(log.root), dir_tree(tmp_path / "home")
    r = run(
        *args,
        zk=zk_connect,
        data=data if args[0] == "offsets" and args[1] in ("reset", "import") else None,
        home=tmp_path / "home",
    )
    assert r.returncode != 0, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr
    assert (zk_tree(zk_connect), dir_tree(log.root), dir_tree(tmp_path / "home")) == before


@pytest.mark.parametrize(
    "args,message",
    [
        (["groups", "list"], "chroot /nochroot does not exist"),
        (["offsets", "export", GROUP], "chroot /nochroot does not exist"),
        (["groups", "delete", GROUP], "chroot /nochroot does not exist"),
    ],
)
def test_missing_chroot_is_refused_and_not_created(env, zk_server, zk_connect, args, message):
    before = zk_tree(zk_connect)
    r = run(*args, zk=zk_server.connect_string + "/nochroot")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert lines[0].startswith(f"error: ZooKeeper {message} on {zk_server.connect_string};"), r.stderr
    assert zk_tree(zk_connect) == before


def test_zookeeper_down_is_one_line(tmp_path):
    r = run("groups", "list", zk="127.0.0.1:1")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert "nothing accepts connections at ZooKeeper address 127.0.0.1:1" in lines[0]


def test_coordinator_down_is_refused(zk, zk_connect, zk_server, tmp_path):
    """A node leads the group's shard but does not answer (SIGSTOP): writes are refused, nothing changes."""
    import signal

    log = Log(tmp_path / "data")
    make_topic(zk, log, "t", 1, 3)
    f = tmp_path / "in.csv"
    f.write_text("t,0,1\n")
    # a long session, so the stopped node still leads its shards while the command runs
    with CoordinatorNodes(zk_connect, count=1, zk_session_timeout_ms=60_000) as nodes:
        ok(
            "offsets",
            "import",
            "cg",
            "--from-file",
            str(f),
            "--scheme",
            "coordinator",
            "--execute",
            zk=zk_connect,
            data=log.root,
        )
        proc = nodes.nodes[1].proc
        proc.send_signal(signal.SIGSTOP)
        try:
            before = zk_tree(zk_connect)
            r = run(
                "offsets",
                "reset",
                "cg",
                "--all-topics",
                "--to-latest",
                "--execute",
                zk=zk_connect,
                data=log.root,
            )
            assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
            assert "does not answer" in r.stderr
            assert zk_tree(zk_connect) == before
        finally:
            proc.send_signal(signal.SIGCONT)
