"""The groupshift source's pure parts: its options, its offsets in Spark's checkpoint, and planning."""

from __future__ import annotations

import json

import pytest

from core.types import TopicPartition
from pipeline.spark.offsets import BadOffset, StreamOffset, decode, encode
from pipeline.spark.options import SourceOptionError, parse
from pipeline.spark.planning import DataLoss, plan
from pipeline.spark.sink import batch_offset

T0, T1, U0 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
BASE = {"zk": "zk:2181", "group": "g", "subscribe": "t"}


def test_the_read_limit_is_shared_across_partitions_in_order():
    got = plan([T1, T0], {T0: 0, T1: 5}, ends={T0: 10, T1: 50}, earliest={T0: 0, T1: 0}, budget=12)
    assert got.ranges == {T0: (0, 10), T1: (5, 7)}
    assert got.lag == 10 + 45


def test_available_now_targets_cap_the_ends():
    got = plan([T0], {T0: 4}, ends={T0: 100}, earliest={T0: 0}, targets={T0: 40})
    assert got.ranges == {T0: (4, 40)}


def test_a_committed_offset_below_the_earliest_fails_or_skips():
    with pytest.raises(DataLoss, match="failOnDataLoss=false"):
        plan([T0], {T0: 3}, ends={T0: 50}, earliest={T0: 20})
    got = plan([T0], {T0: 3}, ends={T0: 50}, earliest={T0: 20}, fail_on_data_loss=False)
    assert got.ranges == {T0: (20, 50)} and got.skipped == {T0: (3, 20)}


def test_offsets_round_trip_and_refuse_what_this_source_did_not_write():
    o = StreamOffset(
        member="m", generation=2, address="127.0.0.1:1", secret="s", ranges={T0: (1, 2), U0: (0, 9)}
    )
    assert decode(json.loads(json.dumps(encode(o)))) == o
    assert decode(None) == StreamOffset()
    with pytest.raises(BadOffset):
        decode({"0": 17})  # another source's offset: a checkpoint of some other query
    with pytest.raises(BadOffset):
        decode({"groupshift": 1, "ranges": {"t": {"0": "x"}}})


def test_the_writer_reads_the_batch_offset_from_sparks_offset_log(tmp_path):
    o = StreamOffset(member="m", generation=2, ranges={T0: (10, 20)})
    (tmp_path / "offsets").mkdir()
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1}'
    (tmp_path / "offsets" / "7").write_text(f"v1\n{meta}\n{json.dumps(encode(o))}")
    assert batch_offset(tmp_path, 7) == o
    (tmp_path / "offsets" / "8").write_text(f"v1\n{meta}\n{json.dumps(encode(o))}\n{json.dumps(encode(o))}")
    with pytest.raises(BadOffset, match="2 groupshift sources"):
        batch_offset(tmp_path, 8)
    with pytest.raises(BadOffset, match="checkpointLocation"):
        batch_offset(tmp_path, 9)


@pytest.mark.parametrize(
    "options,message",
    [
        ({"Colour": "red"}, "unknown option 'colour'"),
        ({"incremental": "true"}, "use it with rebalancer=server"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss must be true or false"),
        ({"startingOffsets": '{"v": {"0": 1}}'}, "names topic 'v'"),
        ({"startingOffsets": "middle"}, "startingOffsets must be earliest, latest or JSON"),
        ({"maxOffsetsPerTrigger": "-5"}, "maxOffsetsPerTrigger must be a whole number"),
        ({"subscribe": "t,t"}, "distinct topics"),
        ({"watchGroup": "yes"}, "watchGroup must be true or false"),
    ],
)
def test_bad_options_are_refused_with_one_line(options, message):
    with pytest.raises(SourceOptionError, match=message) as info:
        parse({**BASE, **options})
    assert "\n" not in str(info.value)


def test_options_are_read_case_insensitively_and_set_the_member():
    o = parse({**BASE, "REBALANCER": "server", "Incremental": "TRUE", "startingoffsets": '{"t": {"1": -1}}'})
    assert o.incremental and o.starting == "json" and o.starting_offsets == {T1: -1}
    assert parse({**BASE, "rebalanceBackoffMs": "200"}).consumer_options()["membership_options"] == {
        "fence_commits": True,
        "rebalance_backoff_ms": 200,
        "rebalance_max_retries": 50,
    }
    # Schemes two and three watch their group (WatchGroup) unless told not to.
    assert parse({**BASE, "rebalancer": "coordinator"}).consumer_options()["membership_options"] == {
        "watch_group": True
    }
    server = parse({**BASE, "rebalancer": "server", "watchGroup": "false"})
    assert server.consumer_options()["membership_options"] == {"watch_group": False}
