"""Online upgrade and downgrade, property: classic members (eager, as kafka-python's and
librdkafka's default assignors are) and consumer-protocol members join, heartbeat, leave and time
out in any order, turning one group classic -> consumer -> classic and again; no partition ever has
two owners, in the coordinator's books or among the live members' own views."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.assignors.payloads import decode_assignment
from coordinator.wire import errors as E
from core.types import TopicPartition as TP
from tests.unit.coordinator.incremental_core import SESSION_MS, Core, owners, partitions

CLASSIC, CONSUMER = ("c0", "c1", "c2"), ("k0", "k1")
ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["join", "beat", "beat", "beat", "leave", "time"]),
        st.sampled_from(CLASSIC + CONSUMER),
        st.integers(0, 2),
    ),
    max_size=60,
)


class Classic:
    """An eager classic client: one request at a time; it drops every partition before it rejoins."""

    def __init__(self, name: str):
        self.name, self.id, self.generation, self.held = name, "", -1, frozenset()
        self.waiting: tuple[str, str] | None = None  # (kind, token) of a parked request
        self.n = 0

    def token(self, kind: str) -> str:
        self.n += 1
        return f"{self.name}-{kind}-{self.n}"

    def rejoin(self, c: Core) -> None:
        self.held = frozenset()
        token = self.token("join")
        c.classic_join(self.id, token=token)
        self.waiting = ("join", token)

    def progress(self, c: Core) -> None:
        while self.waiting and self.waiting[1] in c.answers:
            kind, token = self.waiting
            self.waiting = None
            answer = c.answers.pop(token)
            if kind == "join":
                if answer.error_code == E.MEMBER_ID_REQUIRED:
                    self.id = answer.member_id
                    self.rejoin(c)
                elif answer.error_code == E.UNKNOWN_MEMBER_ID:
                    self.id = ""
                elif answer.error_code:
                    self.rejoin(c)
                else:
                    self.generation = answer.generation_id
                    plan = {}
                    if answer.members:  # the leader of a classic group assigns, round robin
                        ids = [m.member_id for m in answer.members]
                        plan = {
                            mid: [TP("t", p) for p in range(4) if p % len(ids) == i]
                            for i, mid in enumerate(ids)
                        }
                    token = self.token("sync")
                    c.classic_sync(self.id, self.generation, plan, token=token)
                    self.waiting = ("sync", token)
            elif answer.error_code:
                self.rejoin(c)
            else:
                self.held = frozenset(decode_assignment(answer.assignment).partitions)

    def beat(self, c: Core) -> None:
        if self.waiting or not self.id:
            return
        code = c.classic_beat(self.id, self.generation)
        if code == E.UNKNOWN_MEMBER_ID:
            self.id, self.held = "", frozenset()
        elif code:
            self.rejoin(c)


def members(c: Core) -> set[str]:
    if "g" in c.core.groups:
        return set(c.group().members)
    return set(c.core.inner.core._groups["g"].members) if "g" in c.core.inner.core._groups else set()


def classic_books(c: Core) -> dict[TP, int]:
    group = c.core.inner.core._groups.get("g")
    counts: dict[TP, int] = {}
    for m in group.members.values() if group else ():
        for tp in decode_assignment(m.assignment).partitions:
            counts[tp] = counts.get(tp, 0) + 1
    return counts


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ACTIONS)
def test_never_two_owners_through_upgrades_and_downgrades(actions):
    c = Core()
    c.sizes(t=4)
    classic = {name: Classic(name) for name in CLASSIC}
    consumers: dict[str, dict] = {}
    for client in classic.values():  # the group starts classic, all three joined
        client.rejoin(c)
    for _ in range(4):
        for client in classic.values():
            client.progress(c)
        for client in classic.values():
            client.beat(c)
    for action, name, n in actions:
        if name in classic:
            me = classic[name]
            if action == "join" and not me.id and not me.waiting:
                me.rejoin(c)
            elif action == "beat":
                me.beat(c)
            elif action == "leave" and me.id and not me.waiting:
                c.classic_leave(me.id)
                me.id, me.held = "", frozenset()
        else:
            me = consumers.get(name)
            if action == "join" and me is None:
                answer = c.heartbeat(f"id-{name}-{n}", 0)
                if answer.error_code == 0:
                    consumers[name] = {
                        "id": answer.member_id,
                        "epoch": answer.member_epoch,
                        "held": partitions(answer),
                    }
            elif action == "beat" and me is not None:
                answer = c.heartbeat(me["id"], me["epoch"], owned=me["held"], topics=None)
                if answer.error_code:
                    del consumers[name]
                else:
                    me.update(epoch=answer.member_epoch, held=partitions(answer))
            elif action == "leave" and me is not None:
                c.heartbeat(me["id"], -1, topics=None)
                del consumers[name]
        if action == "time":
            c.advance(SESSION_MS // 3 * (n + 1))
        for client in classic.values():
            client.progress(c)
        if "g" in c.core.groups:
            assert all(len(o) == 1 for o in owners(c).values()), owners(c)
        else:
            assert all(n == 1 for n in classic_books(c).values()), classic_books(c)
        alive = members(c)
        live = [m.held for m in classic.values() if m.id in alive]
        live += [m["held"] for m in consumers.values() if m["id"] in alive]
        assert sum(map(len, live)) == len(set().union(*live)), live
