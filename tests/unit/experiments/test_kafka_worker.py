"""The librdkafka member's settings, as librdkafka 2.16 itself accepts them: each scheme's group
protocol, the run's session only under the classic protocol (KIP-848's is the coordinator's), and
the generation read from the client's consumer-group metadata (-1 before it joined)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer

from core.errors import GroupshiftError
from core.scheme import Scheme
from experiments.kafka_worker import config, generation
from experiments.worker import parse_args


def args(scheme: str):
    return parse_args(
        ["--scheme", scheme, "--zk", "127.0.0.1:1/x", "--data", "/nonexistent", "--group", "g"]
        + ["--topic", "t", "--member", "m0", "--log", "/dev/null", "--bootstrap", "127.0.0.1:1"]
        + ["--session-ms", "2000", "--heartbeat-ms", "200"]
    )


@pytest.mark.parametrize("name", ["kafka-classic", "kafka-consumer"])
def test_librdkafka_accepts_each_schemes_settings_and_reports_no_generation_before_joining(name):
    conf = config(args(name))
    assert conf["group.id"] == "g" and conf["client.id"] == "m0" and conf["enable.auto.commit"] is False
    if name == "kafka-classic":
        assert conf["partition.assignment.strategy"] == "cooperative-sticky"
        assert (conf["session.timeout.ms"], conf["heartbeat.interval.ms"]) == (2000, 200)
    else:
        assert conf["group.protocol"] == "consumer" and conf["group.remote.assignor"] == "uniform"
        assert "session.timeout.ms" not in conf and "partition.assignment.strategy" not in conf
    consumer = Consumer({**conf, "log_level": 0})  # refuses settings its protocol does not take
    try:
        assert generation(consumer) == -1
    finally:
        consumer.close()


def test_groupshifts_own_schemes_have_no_librdkafka_settings_and_the_kafka_ones_no_consumer_options():
    assert [s.value for s in Scheme if s.kafka] == ["kafka-classic", "kafka-consumer"]
    with pytest.raises(GroupshiftError, match="groupshift's own members"):
        Scheme.THREE_COOPERATIVE.kafka_config()
    with pytest.raises(GroupshiftError, match="librdkafka members"):
        Scheme.KAFKA_CLASSIC.consumer_options()
