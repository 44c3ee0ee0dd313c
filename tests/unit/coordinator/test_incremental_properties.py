"""Scheme two's incremental form, property: whatever members join, heartbeat, leave (-1 or, static,
-2), restart, time out or subscribe by regex while topics come and grow, no partition ever has two
owners — neither in the coordinator's books nor among the live members' own views."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.coordinator.incremental_core import SESSION_MS, Core, owners, partitions

CLIENTS = ("m0", "m1", "m2", "m3")
ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["join", "beat", "beat", "beat", "leave", "static-leave", "time", "topics", "grow"]),
        st.sampled_from(CLIENTS),
        st.integers(0, 3),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ACTIONS)
def test_never_two_owners(actions):
    c = Core()
    c.listed("t", "r1")
    c.sizes(t=4, r1=2)
    topics = ["t", "r1"]
    clients: dict[str, dict] = {}  # name -> {member_id, epoch, held}: what a live client believes
    for action, name, n in actions:
        me = clients.get(name)
        instance = f"i-{name}" if name in ("m0", "m1") else None  # two static members, two dynamic
        if action == "join" and me is None:
            regex = "r[0-9]+" if name == "m2" else None
            answer = c.heartbeat(f"id-{name}-{n}", 0, instance=instance, regex=regex)
            if answer.error_code == 0:
                clients[name] = {
                    "id": answer.member_id,
                    "epoch": answer.member_epoch,
                    "held": partitions(answer),
                }
        elif action == "beat" and me is not None:
            answer = c.heartbeat(me["id"], me["epoch"], owned=me["held"], topics=None, instance=instance)
            if answer.error_code:
                del clients[name]  # fenced: it drops its partitions (lost) and may rejoin
            else:
                me.update(epoch=answer.member_epoch, held=partitions(answer))
        elif action in ("leave", "static-leave") and me is not None:
            c.heartbeat(me["id"], -2 if action == "static-leave" else -1, topics=None, instance=instance)
            del clients[name]
        elif action == "time":
            c.advance(SESSION_MS // 3 * (n + 1))
        elif action == "topics":
            topics.append(f"r{len(topics)}")
            c.listed(*topics)
            c.sizes(**{topics[-1]: n + 1})
        elif action == "grow":
            c.sizes(t=4 + n)
        group = c.core.groups.get("g")
        if group is None:
            continue
        assert all(len(ms) == 1 for ms in owners(c).values()), owners(c)
        live = [
            m["held"]
            for m in clients.values()
            if m["id"] in group.members and not group.members[m["id"]].left
        ]
        assert sum(map(len, live)) == len(set().union(*live)), live
