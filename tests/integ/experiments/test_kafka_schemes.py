"""The librdkafka schemes in the experiments: `groupshift experiment run scale-up,hard-kill,
rolling-restart --quick` with `kafka-classic` and `kafka-consumer` beside groupshift's cooperative
scheme three — real ZooKeeper in a container of the run's own (its own namespace), real node
processes with Kafka listeners, and each member a worker process driving a confluent_kafka.Consumer.
Each test asserts what the protocol promises, not a timing. Were the nodes' Kafka listener not to
serve ConsumerGroupHeartbeat, the run would report `kafka-consumer` skipped with that reason, and
that is what would be checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.kafka_worker import unsupported
from tests.integ.experiments.test_experiments import groupshift, scheme

pytestmark = pytest.mark.experiments  # the experiments lane: containers, nodes, workers of their own

SCENARIOS = ("scale-up", "hard-kill", "rolling-restart")
KAFKA = ("kafka-classic", "kafka-consumer")


@pytest.fixture(scope="module")
def kafka_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("kafka-schemes") / "out"
    schemes = ",".join(("three-cooperative", *KAFKA))
    run = ("experiment", "run", ",".join(SCENARIOS), "--quick")
    proc = groupshift(*run, "--scheme", schemes, "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads((out / "results.json").read_text())


def _runnable(name: str) -> None:
    if why := unsupported(name):
        pytest.skip(why)


@pytest.mark.parametrize("name", KAFKA)
def test_librdkafka_members_scale_up_without_watches_or_stopping_kept_partitions(kafka_run, name):
    """Both protocols are incremental: a join never stops a partition a member keeps (H4 = 0), and a
    join into a coordinator group costs ZooKeeper no watch notification whatever N (a group's first
    KIP-848 members may cost one: Metadata v12 writes the topic's id into its znode once)."""
    _, results = kafka_run
    _runnable(name)
    scale = results["scenarios"]["scale-up"]["schemes"][name]
    for mode in ("one_by_one", "all_at_once"):
        rows = {row["n"]: row for row in scale[mode]}
        assert set(rows) == {4, 8}, (mode, rows)
        for n, row in rows.items():
            assert "error" not in row, (mode, n, row["error"])
            assert row["time_to_stable_ms"] > 0 and row["watch_notifications"] <= 1, (mode, row)
    for row in scale["one_by_one"]:
        assert 2 <= row["fanout"] <= row["n"] and row["client_zk_requests"] == 0, row
        assert row["watch_notifications"] == 0, row
        assert len(row["pauses_ms"]) == row["n"] - 1 and row["max_pause_ms"] == 0, row


@pytest.mark.parametrize("name", KAFKA)
@pytest.mark.parametrize("scenario", ["hard-kill", "rolling-restart"])
def test_librdkafka_members_lose_nothing_and_never_commit_twice(kafka_run, scenario, name):
    out, results = kafka_run
    _runnable(name)
    f = scheme(results, scenario, name)
    assert f["settled"] and f["drained"], f
    assert f["lost"] == 0 and f["duplicate_committed"] == 0, f
    assert f["max_owners_at_commit"] == 1 and f["generation_conflicts"] == 0, f
    assert f["commits"] > 0 and f["time_to_stable_s"] > 0, f
    # the figures come from the members' own callbacks: every member logged a generation it joined
    logs = Path(out) / "logs" / scenario / name
    members = [p for p in logs.glob("m*.jsonl") if not p.name.endswith(".zk.jsonl")]
    assert len(members) >= 2
    for log in members:
        events = [json.loads(line) for line in log.read_text().splitlines()]
        assert events[0]["ev"] == "start" and events[0]["scheme"] == name
        assert any(e["ev"] == "assigned" and e["gen"] >= 1 for e in events), log.name


def test_the_report_shows_the_librdkafka_schemes_beside_groupshifts(kafka_run):
    out, results = kafka_run
    report = (out / "REPORT.md").read_text()
    for scenario in SCENARIOS:
        assert f"## {scenario}" in report
        assert "error" not in results["scenarios"][scenario], results["scenarios"][scenario]
        schemes = results["scenarios"][scenario]["schemes"]
        assert set(schemes) == {"three-cooperative", *KAFKA}
    assert "librdkafka, classic (cooperative-sticky)" in report and "three, cooperative" in report
    assert "librdkafka, consumer (KIP-848)" in report
    assert results["versions"]["confluent-kafka"] == "2.16.1"
    if why := unsupported("kafka-consumer"):  # said in the report, for every scenario
        assert report.count(f"skipped: {why}") == len(SCENARIOS)
