"""KIP-848's online upgrade and downgrade (docs/scheme-two.md, "Online upgrade and downgrade"): a
classic group of protocol type `consumer` becomes a consumer-protocol group when a member of that
protocol joins it, its classic members stay with JoinGroup/SyncGroup/Heartbeat, and the group turns
classic again when the last consumer-protocol member goes — each as the node's migration policy
allows."""

from __future__ import annotations

import pytest

from coordinator.assignors.payloads import decode_assignment
from coordinator.group.messages import OffsetRecord
from coordinator.group.state import PREPARING_REBALANCE
from coordinator.server_side.group_conversion import MigrationPolicy
from coordinator.wire import errors as E
from core.types import TopicPartition as TP
from tests.unit.coordinator.incremental_core import SESSION_MS, Core, owners, partitions

T = [TP("t", p) for p in range(4)]


def upgraded(policy=MigrationPolicy.BIDIRECTIONAL):
    """A classic group of two (a: t-0, t-1; b: t-2, t-3, generation 5) and a consumer-protocol
    member joining it."""
    c = Core(migration_policy=policy)
    c.sizes(t=4)
    c.load_classic(5, {"a": {T[0], T[1]}, "b": {T[2], T[3]}})
    joiner = c.heartbeat("new", 0)
    return c, joiner


def assigned(sync) -> set[TP]:
    return set(decode_assignment(sync.assignment).partitions)


def test_a_consumer_protocol_join_converts_the_classic_group_keeping_every_partition_where_it_is():
    c, joiner = upgraded()
    assert joiner.error_code == 0 and joiner.member_epoch == 6 and partitions(joiner) == set()
    group = c.group()
    assert (group.epoch, group.members["a"].epoch, group.members["b"].epoch) == (6, 5, 5)
    assert group.members["a"].assigned == {T[0], T[1]} and group.members["a"].classic is not None
    assert c.records["g"].protocol_type == "consumer-incremental"
    assert [m.protocol_type for m in c.records["g"].members] == [
        "consumer",
        "consumer",
        "consumer-incremental",
    ]
    assert c.core.inner.core.stats()["g"][1] == 0  # the classic core keeps only the offsets
    assert all(len(o) == 1 for o in owners(c).values())


def test_classic_members_rejoin_and_give_up_what_the_joiner_gets_before_it_gets_it():
    c, joiner = upgraded()
    target = c.group().target
    assert len(target[joiner.member_id]) == 1  # the sticky uniform assignor moves one partition
    giver = next(m for m in "ab" if target[m] != c.group().members[m].assigned)
    keeper = "b" if giver == "a" else "a"
    assert c.classic_beat(keeper, 5) == E.REBALANCE_IN_PROGRESS  # behind the group epoch
    c.classic_join(keeper)  # nothing to give up: the new epoch at once, the same partitions
    assert assigned(c.classic_sync(keeper, 6)) == target[keeper] and c.classic_beat(keeper, 6) == 0
    assert partitions(c.ack(joiner)) == set()  # the giver has not let go yet
    assert c.classic_beat(giver, 5) == E.REBALANCE_IN_PROGRESS
    # An eager member revoked everything before rejoining (owned: none): it has let go.
    join = c.classic_join(giver, owned=())
    assert (join.generation_id, join.leader, join.members, join.protocol_name) == (6, "", [], "range")
    assert assigned(c.classic_sync(giver, 6)) == target[giver]
    assert c.classic_beat(giver, 6) == 0
    got = c.ack(joiner)
    assert partitions(got) == target[joiner.member_id]
    c.ack(got)
    assert c.group().state == "Stable"
    assert all(len(o) == 1 for o in owners(c).values())


def test_a_cooperative_member_that_still_owns_the_partition_keeps_its_epoch_until_it_lets_go():
    c, joiner = upgraded()
    target = c.group().target
    giver = next(m for m in "ab" if target[m] != c.group().members[m].assigned)
    held = c.group().members[giver].assigned
    join = c.classic_join(giver, owned=held)  # cooperative: it lists what it holds
    assert join.generation_id == 5  # the old epoch: something to revoke first
    assert assigned(c.classic_sync(giver, 5)) == target[giver]
    assert c.classic_beat(giver, 5) == E.REBALANCE_IN_PROGRESS  # partitions to let go
    assert partitions(c.ack(joiner)) == set()  # not free yet
    assert c.classic_join(giver, owned=target[giver]).generation_id == 6
    assert partitions(c.ack(joiner)) == target[joiner.member_id]


def test_parked_classic_joins_get_rebalance_in_progress_on_upgrade():
    c = Core()
    c.sizes(t=4)
    c.load_classic(5, {"a": {T[0], T[1]}, "b": {T[2], T[3]}})
    assert c.classic_join("a", token="parked") is None  # the leader rejoins: a rebalance starts
    c.heartbeat("new", 0)
    assert c.answers["parked"].error_code == E.REBALANCE_IN_PROGRESS
    assert c.classic_join("a").generation_id == 6  # and its next JoinGroup enters the new group


@pytest.mark.parametrize("policy", [MigrationPolicy.DOWNGRADE, MigrationPolicy.DISABLED])
def test_a_policy_without_upgrades_answers_group_id_not_found(policy):
    c, joiner = upgraded(policy)
    assert joiner.error_code == E.GROUP_ID_NOT_FOUND and "migration.policy" in joiner.error_message
    assert c.core.inner.core.stats()["g"][1] == 2 and "g" not in c.core.groups


def test_a_classic_group_of_another_protocol_type_is_not_upgraded():
    c = Core()
    c.sizes(t=4)
    assert c.classic_join("", protocol_type="connect").error_code == E.MEMBER_ID_REQUIRED
    mid = c.answers["join"].member_id
    c.classic_join(mid, protocol_type="connect")
    answer = c.heartbeat("new", 0)
    assert answer.error_code == E.GROUP_ID_NOT_FOUND and "'connect'" in answer.error_message


def test_an_empty_classic_group_is_replaced_and_keeps_its_offsets():
    c = Core()
    c.sizes(t=4)
    c.load_classic(3, {}, offsets=[OffsetRecord("t", 0, 42, "", c.now)])
    joined = c.heartbeat("new", 0)
    assert joined.error_code == 0 and partitions(c.ack(joined)) == set(T)
    fetched = c.core.inner.snapshot("g").offsets
    assert [(o.partition, o.offset) for o in fetched] == [(0, 42)]


def test_classic_member_errors_generation_protocols_unknown_ids_and_commits():
    c, joiner = upgraded()
    assert c.classic_beat("a", 4) == E.ILLEGAL_GENERATION
    assert c.classic_sync("a", 4).error_code == E.ILLEGAL_GENERATION
    assert c.commit("a", 4) == E.ILLEGAL_GENERATION
    assert c.commit("a", 5) == E.NONE
    assert c.classic_beat("nobody", 5) == E.UNKNOWN_MEMBER_ID
    assert c.classic_beat(joiner.member_id, 6) == E.UNKNOWN_MEMBER_ID  # it heartbeats with 68
    assert c.classic_join("a", protocols=("roundrobin",)).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert c.classic_join("a", protocol_type="connect").error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert c.heartbeat("a", 5, topics=None).error_code == E.UNKNOWN_MEMBER_ID  # a classic member
    # A new classic member gets its id first, then joins as any member.
    assert c.classic_join("").error_code == E.MEMBER_ID_REQUIRED
    mid = c.answers["join"].member_id
    assert c.classic_join(mid).error_code == 0 and c.group().members[mid].classic is not None


def test_classic_members_time_out_on_their_own_session():
    c, joiner = upgraded()
    c.advance(SESSION_MS // 2)
    assert c.classic_beat("a", 5) in (0, E.REBALANCE_IN_PROGRESS)
    c.ack(joiner)
    c.advance(SESSION_MS // 2 + 10)
    assert set(c.group().members) == {"a", joiner.member_id}  # b is gone, a heartbeated
    c.ack(joiner)


def test_a_classic_leave_removes_the_member_and_its_partitions_move():
    c, joiner = upgraded()
    assert c.classic_leave("b") == E.NONE
    assert "b" not in c.group().members and c.group().epoch == 7


def test_the_last_consumer_protocol_member_leaving_turns_the_group_classic_and_it_rebalances():
    c, joiner = upgraded()
    c.classic_join("a")
    c.heartbeat(joiner.member_id, -1, topics=None)
    assert "g" not in c.core.groups
    # Generation: a's epoch, the group's before the leave, so a in step commits until it rejoins.
    assert c.records["g"].protocol_type == "consumer" and c.records["g"].generation_id == 6
    assert c.core.inner.core.group_state("g") is PREPARING_REBALANCE
    assert c.commit("a", 6) == E.NONE
    # The classic core from here: heartbeats say rejoin (or the old generation is refused).
    assert c.classic_beat("a", 6) == E.REBALANCE_IN_PROGRESS
    assert c.classic_beat("b", 5) == E.ILLEGAL_GENERATION
    c.classic_join("a", token="ja")
    c.classic_join("b", token="jb")
    leader = next(c.answers[t] for t in ("ja", "jb") if c.answers[t].members)
    assert leader.generation_id == 7
    other = "b" if leader.member_id == "a" else "a"
    c.classic_sync(other, 7, token="s-other")
    mine = c.classic_sync(leader.member_id, 7, {leader.member_id: T[:2], other: T[2:]})
    assert assigned(mine) == set(T[:2]) and assigned(c.answers["s-other"]) == set(T[2:])


def test_a_session_timeout_of_the_last_consumer_protocol_member_downgrades_too():
    c, joiner = upgraded()
    for _ in range(4):
        c.advance(SESSION_MS // 3)
        c.classic_beat("a", 5)
        c.classic_beat("b", 5)
    assert "g" not in c.core.groups and c.core.inner.core.stats()["g"][1] == 2


def test_the_upgrade_policy_keeps_the_group_a_consumer_group():
    c, joiner = upgraded(MigrationPolicy.UPGRADE)
    c.heartbeat(joiner.member_id, -1, topics=None)
    assert set(c.group().members) == {"a", "b"}


def test_a_classic_join_to_an_empty_consumer_group_makes_it_classic():
    c = Core()
    c.sizes(t=4)
    joined = c.heartbeat("x", 0)
    c.heartbeat(joined.member_id, -1, topics=None)
    assert c.classic_join("").error_code == E.MEMBER_ID_REQUIRED
    assert "g" not in c.core.groups and c.core.inner.core.stats()["g"][0].value == "Empty"


def test_a_node_taking_the_group_over_mid_migration_continues():
    c, joiner = upgraded()
    c.classic_join("a")
    other = c.taken_over()
    other.sizes(t=4)
    group = other.group()
    assert {m: bool(group.members[m].classic) for m in group.members} == {
        "a": True,
        "b": True,
        joiner.member_id: False,
    }
    assert group.members["a"].session_timeout_ms == SESSION_MS
    assert other.classic_beat("a", 6) == 0 and other.classic_beat("b", 5) == E.REBALANCE_IN_PROGRESS
