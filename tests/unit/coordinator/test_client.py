"""Pure parts of the coordinator client: payloads, the rebalance protocol, cooperative changes, the leader."""

from __future__ import annotations

import pytest

from coordinator.assignors.consumer_protocol import (
    COOPERATIVE,
    EAGER,
    cooperative_changes,
    join_protocols,
    perform_assignment,
    rebalance_protocol,
)
from coordinator.assignors.payloads import decode_assignment, decode_subscription
from coordinator.wire.schema import JoinGroupMember
from core.types import TopicPartition as TP


@pytest.mark.parametrize(
    ("assignors", "protocol"),
    [
        (["range"], EAGER),
        (["cooperative-sticky"], COOPERATIVE),
        (["cooperative-sticky", "range"], EAGER),  # Kafka: the common protocol of all assignors
        (["sticky", "roundrobin"], EAGER),
    ],
)
def test_rebalance_protocol_is_cooperative_only_when_every_assignor_supports_it(assignors, protocol):
    assert rebalance_protocol(assignors) == protocol


def test_cooperative_changes_revoke_only_what_moves():
    owned = {TP("t", 0), TP("t", 1), TP("t", 2)}
    assigned = {TP("t", 1), TP("t", 2), TP("t", 3)}
    assert cooperative_changes(owned, assigned) == ({TP("t", 0)}, {TP("t", 3)})
    assert cooperative_changes(owned, owned) == (set(), set())


def test_join_protocols_list_every_assignor_in_preference_order_with_owned_partitions():
    protocols = join_protocols(["cooperative-sticky", "range"], ["t"], {TP("t", 1), TP("t", 0)}, 7)
    assert [p.name for p in protocols] == ["cooperative-sticky", "range"]
    sub = decode_subscription(protocols[0].metadata)
    assert sub.topics == ("t",)
    assert sub.owned_partitions == (TP("t", 0), TP("t", 1))
    assert sub.generation == 7
    assert sub.user_data  # cooperative-sticky carries its generation in user data too


def test_leader_runs_the_selected_assignor_over_every_member():
    members = [
        JoinGroupMember(
            member_id=m,
            group_instance_id=None,
            metadata=join_protocols(["range"], ["t0", "t1"], (), -1)[0].metadata,
        )
        for m in ("C0", "C1")
    ]
    per_member, counts = perform_assignment("range", members, {"t0": 3, "t1": 3, "other": 5}.get)
    assert counts == {"t0": 3, "t1": 3}
    got = {m: decode_assignment(b).partitions for m, b in per_member.items()}
    # The classic RangeAssignor example with three partitions per topic
    assert got == {
        "C0": [TP("t0", 0), TP("t0", 1), TP("t1", 0), TP("t1", 1)],
        "C1": [TP("t0", 2), TP("t1", 2)],
    }


def test_leader_skips_unknown_topics():
    members = [
        JoinGroupMember(
            member_id="C0",
            group_instance_id=None,
            metadata=join_protocols(["roundrobin"], ["t", "missing"], (), -1)[0].metadata,
        )
    ]
    per_member, counts = perform_assignment("roundrobin", members, {"t": 2}.get)
    assert counts == {"t": 2}
    assert decode_assignment(per_member["C0"]).partitions == [TP("t", 0), TP("t", 1)]


def test_cooperative_sticky_leader_withholds_partitions_still_owned_by_another_member():
    # consumer1 owns t-0..2 at generation 1; consumer2 joins (the cooperative-sticky example of
    # docs/assignors.md)
    c1 = join_protocols(["cooperative-sticky"], ["t"], {TP("t", 0), TP("t", 1), TP("t", 2)}, 1)[0]
    c2 = join_protocols(["cooperative-sticky"], ["t"], (), -1)[0]
    members = [
        JoinGroupMember(member_id="consumer1", group_instance_id=None, metadata=c1.metadata),
        JoinGroupMember(member_id="consumer2", group_instance_id=None, metadata=c2.metadata),
    ]
    per_member, _ = perform_assignment("cooperative-sticky", members, {"t": 3}.get)
    got = {m: set(decode_assignment(b).partitions) for m, b in per_member.items()}
    assert got["consumer2"] == set()
    assert len(got["consumer1"]) == 2


def test_eager_sticky_remembers_the_last_assignment_after_revoking_everything():
    from coordinator.assignors.payloads import decode_sticky_user_data

    previous = {TP("t", 0), TP("t", 2)}
    sub = decode_subscription(join_protocols(["sticky"], ["t"], (), 3, previous=previous)[0].metadata)
    assert sub.owned_partitions == ()  # eager: revoked before joining
    assert decode_sticky_user_data(sub.user_data) == ([TP("t", 0), TP("t", 2)], 3)


def test_a_member_state_changes_only_along_its_table():
    from coordinator.member.state import ENTERED_FROM, IllegalMemberTransition, MemberState

    assert set(ENTERED_FROM) == set(MemberState)  # no initial state: a member starts UNJOINED, re-enters it
    assert not any(MemberState.CLOSED in old for old in ENTERED_FROM.values())  # terminal
    assert ENTERED_FROM[MemberState.CLOSED] == set(MemberState) - {MemberState.CLOSED}  # any state closes
    MemberState.STABLE.check_transition_to(MemberState.STABLE, "g")  # staying put is no transition
    with pytest.raises(IllegalMemberTransition, match="from closed to unjoined"):
        MemberState.CLOSED.check_transition_to(MemberState.UNJOINED, "g")
    with pytest.raises(IllegalMemberTransition):
        MemberState.STABLE.check_transition_to(MemberState.COMPLETING_REBALANCE, "g")


def test_the_error_table_answers_what_the_member_used_to_list():
    from coordinator.wire import errors as E

    codes = set(E.NAMES)
    assert {c for c in codes if E.coordinator_moved(c)} == {E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE}
    assert {c for c in codes if E.fences_member(c)} == {
        E.UNKNOWN_MEMBER_ID,
        E.ILLEGAL_GENERATION,
        E.FENCED_MEMBER_EPOCH,
    }
    assert E.retriable(E.COORDINATOR_LOAD_IN_PROGRESS) and not E.retriable(E.REBALANCE_IN_PROGRESS)
    assert not E.fences_member(E.FENCED_INSTANCE_ID)  # fatal for a static member, not a rejoin
    assert E.TABLE[E.NOT_COORDINATOR].name == "NOT_COORDINATOR" and not E.retriable(12345)


def test_each_schemes_member_fills_in_hooks_and_overrides_no_private_method():
    from coordinator.member.consumer_member import CoordinatorMember, ServerAssignedMember
    from coordinator.member.incremental_member import IncrementalMember

    for cls in (CoordinatorMember, ServerAssignedMember, IncrementalMember):
        for i, c in enumerate(cls.__mro__):
            for name, value in vars(c).items():
                if callable(value) and name.startswith("_") and not name.startswith("__"):
                    assert not any(name in vars(base) for base in cls.__mro__[i + 1 :]), (c, name)
    member = CoordinatorMember("g", ["t"], bootstrap="127.0.0.1:1", server_assigned=True)
    assert type(member) is ServerAssignedMember and member.server_assigned
