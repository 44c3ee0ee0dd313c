"""The coordinator's ZooKeeper store against real ZooKeeper: leadership, fencing, offsets, loading."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from coordinator.group.messages import GroupRecord, MemberRecord, OffsetRecord, ProtocolRecord
from coordinator.layout import (
    BROKERS,
    COORDINATORS,
    group_path,
    name_from_znode,
    offset_path,
    shard_of,
    znode_name,
)
from coordinator.node.store import CoordinatorStore
from coordinator.node.zk_async import Fenced, NodeIdInUse
from core.types import TopicPartition
from core.zk import connect
from testing.zookeeper import expire_session

SHARDS = 4


def run(coro):
    return asyncio.run(coro)


def _record(group_id: str, generation: int) -> GroupRecord:
    member = MemberRecord(
        "m-1", None, "c", "/127.0.0.1", 6000, 6000, "consumer", [ProtocolRecord("range", b"\x01")], b"\x02"
    )
    return GroupRecord(group_id, "consumer", "range", generation, "m-1", 1, [member])


@pytest.mark.parametrize("name", ["g", "", ".", "..", "a/b", "ünï code", "%", "x%2Fy", "a.b-c_d"])
def test_znode_names_round_trip(name):
    z = znode_name(name)
    assert "/" not in z and z not in ("", ".", "..")
    assert name_from_znode(z) == name


def test_registration_writes_the_08_broker_json(zk, zk_connect):
    async def main():
        client = connect(zk_connect, session_timeout=4.0)
        store = CoordinatorStore(client, node_id=3, shards=SHARDS)
        await store.start()
        await store.register("127.0.0.1", 9093)
        data, stat = zk.get(f"{BROKERS}/3")
        assert stat.ephemeralOwner == client.client_id[0]
        broker = json.loads(data)
        assert list(broker) == ["version", "host", "port", "jmx_port", "timestamp"]
        assert broker["version"] == 1 and broker["host"] == "127.0.0.1" and broker["port"] == 9093
        assert isinstance(broker["timestamp"], str) and broker["jmx_port"] == -1
        coord = json.loads(zk.get(f"{COORDINATORS}/3")[0])
        assert coord["host"] == "127.0.0.1" and coord["port"] == 9093
        # A second live node with the same id is refused (after waiting for the znode to vanish).
        other = connect(zk_connect, session_timeout=4.0)
        try:
            second = CoordinatorStore(other, node_id=3, shards=SHARDS)
            await second.start()
            with pytest.raises(NodeIdInUse):
                await second.register("127.0.0.1", 9094, wait_s=0.5)
        finally:
            other.stop()
            other.close()
        client.stop()
        client.close()
        assert not zk.exists(f"{BROKERS}/3")

    run(main())


def _timeless(registration: dict) -> dict:
    return {k: v for k, v in registration.items() if k not in ("timestamp", "started")}


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_the_broker_registration_names_the_kafka_listeners_security_protocol(
    zk, zk_connect, zk_server, protocol
):
    """`/brokers/ids/<n>` is Kafka 0.10's version 4 with the listener's real protocol, and still is
    after a new ZooKeeper session (the node registers again as it did at start)."""
    plain = protocol == "PLAINTEXT"

    def registered() -> tuple[dict, dict]:
        return json.loads(zk.get(f"{BROKERS}/4")[0]), json.loads(zk.get(f"{COORDINATORS}/4")[0])

    async def main():
        client = connect(zk_connect, session_timeout=4.0)
        store = CoordinatorStore(client, node_id=4, shards=SHARDS)
        await store.start()
        native = "PLAINTEXT" if plain else "TLS"
        await store.register(
            "127.0.0.1", 9092, kafka=("127.0.0.1", 9093), protocol=native, kafka_protocol=protocol
        )
        broker, coord = registered()
        assert broker["endpoints"] == [f"{protocol}://127.0.0.1:9093"]
        assert broker["listener_security_protocol_map"] == {protocol: protocol}
        assert (broker["host"], broker["port"]) == (("127.0.0.1", 9093) if plain else (None, -1))
        assert (
            coord.get("kafka_protocol", "PLAINTEXT") == protocol
            and coord.get("protocol", "PLAINTEXT") == native
        )

        session = client.client_id[0]
        await asyncio.to_thread(expire_session, zk_server.connect_string, client)
        deadline = time.monotonic() + 30
        while not (client.connected and client.client_id[0] != session):
            assert time.monotonic() < deadline, "no new session"
            await asyncio.sleep(0.05)
        assert not zk.exists(f"{BROKERS}/4")  # gone with the old session
        await store.register_again()
        assert [_timeless(r) for r in registered()] == [_timeless(broker), _timeless(coord)]
        client.stop()
        client.close()

    run(main())


def test_claim_fences_the_previous_leader_and_loading_sees_its_writes(zk, zk_connect):
    async def main():
        a_zk = connect(zk_connect, session_timeout=2.0)
        b_zk = connect(zk_connect, session_timeout=2.0)
        a = CoordinatorStore(a_zk, node_id=1, shards=SHARDS)
        b = CoordinatorStore(b_zk, node_id=2, shards=SHARDS)
        await a.start()
        await b.start()
        g = "group-x"
        s = shard_of(g, SHARDS)
        epoch_a = await a.claim_shard(s, "h", 1)
        assert epoch_a is not None
        assert await b.claim_shard(s, "h", 2) is None  # a leads it
        await a.write_group(s, epoch_a, _record(g, 1))
        await a.commit_offsets(
            s, epoch_a, g, [OffsetRecord("t", 0, 10, "m", 5), OffsetRecord("t/x", 1, 11, "", 5)], 1
        )
        await a.commit_offsets(s, epoch_a, g, [OffsetRecord("t", 0, 12, "m2", 6)], 1)  # set, not create
        assert json.loads(zk.get(offset_path(g, "t", 0))[0])["offset"] == 12
        assert json.loads(zk.get(offset_path(g, "t", 0))[0])["generation"] == 1

        # a's session dies (as when its process is killed): b takes the shard with a higher epoch.
        a_zk.stop()
        a_zk.close()
        for _ in range(100):
            epoch_b = await b.claim_shard(s, "h", 2)
            if epoch_b is not None:
                break
            await asyncio.sleep(0.1)
        assert epoch_b == epoch_a + 1
        loaded = {snap.group_id: snap for snap in await b.load_shard(s)}
        snap = loaded[g]
        assert snap.group == _record(g, 1)
        assert {(o.topic, o.partition): o.offset for o in snap.offsets} == {("t", 0): 12, ("t/x", 1): 11}

        # A stale leader (a revived with its old epoch) is fenced: nothing it writes lands.
        a2_zk = connect(zk_connect, session_timeout=2.0)
        a2 = CoordinatorStore(a2_zk, node_id=1, shards=SHARDS)
        await a2.start()
        with pytest.raises(Fenced):
            await a2.commit_offsets(s, epoch_a, g, [OffsetRecord("t", 0, 99, "", 7)], 1)
        with pytest.raises(Fenced):
            await a2.write_group(s, epoch_a, _record(g, 9))
        assert json.loads(zk.get(offset_path(g, "t", 0))[0])["offset"] == 12

        await b.delete_offsets(s, epoch_b, g, [TopicPartition("t/x", 1)])
        assert not zk.exists(offset_path(g, "t/x", 1))
        await b.delete_group(s, epoch_b, g)
        assert not zk.exists(group_path(g))
        await b.release_shard(s, epoch_b)
        assert not zk.exists(f"/groupshift/shards/{s}/leader")
        for c in (a2_zk, b_zk):
            c.stop()
            c.close()

    run(main())


def test_two_first_writes_of_a_new_group_in_flight_at_once_both_land(zk, zk_connect):
    """Members joining a new group at once can put two metadata writes in flight before the first
    created the znode: the second one's create fails, and its retry must set instead (it used to
    create again, fail, and cost the group its coordinator)."""

    async def main():
        client = connect(zk_connect, session_timeout=6.0)
        store = CoordinatorStore(client, node_id=1, shards=SHARDS)
        await store.start()
        try:
            g = "group-at-once"
            s = shard_of(g, SHARDS)
            epoch = await store.claim_shard(s, "h", 1)
            assert epoch is not None
            await asyncio.gather(*(store.write_group(s, epoch, _record(g, n)) for n in (1, 2, 3)))
            stored = (await store.read_group(g)).group
            assert stored.generation_id in (1, 2, 3)
        finally:
            client.stop()
            client.close()

    run(main())


def test_a_start_step_is_retried_while_zookeeper_does_not_answer_then_gives_up():
    """A node starting while its ZooKeeper server restarts retries what the reset cut off."""
    from kazoo.exceptions import ConnectionLoss

    from coordinator.node.zk_async import _retrying

    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionLoss()
        return "done"

    assert asyncio.run(_retrying("step", flaky)) == "done" and len(calls) == 3

    async def down() -> None:
        raise ConnectionLoss()

    with pytest.raises(ConnectionLoss):
        asyncio.run(_retrying("step", down, within=0.3))

    async def refused() -> None:
        calls.append(1)
        raise ValueError("not transient")

    calls.clear()
    with pytest.raises(ValueError):
        asyncio.run(_retrying("step", refused))
    assert len(calls) == 1
