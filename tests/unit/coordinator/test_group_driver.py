"""A fake driver for the coordinator core (injected clock, synchronous store), and its own tests.

The other `test_group_*` modules import `Driver` from here. Defaults follow Kafka's
`GroupCoordinatorTest` fixture: min session 10, max session 600000, max size 4, initial
delay 50; members use session 500 and rebalance 500. Member ids are deterministic
(`<client_id or instance id>-<n>`).
"""

from __future__ import annotations

import itertools
from typing import Any

import msgspec

from coordinator.group.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.group.messages import Discarded, Respond, StateChanged, Write
from coordinator.wire import error_codes as E
from coordinator.wire.schema import (
    APIS,
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    GROUP_APIS,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
)

GROUP = "group"
PROTOCOLS = [{"name": "range", "metadata": b"m"}]

KAFKA_TEST_CONFIG = dict(
    group_min_session_timeout_ms=10,
    group_max_session_timeout_ms=600_000,
    group_max_size=4,
    group_initial_rebalance_delay_ms=50,
)


class Driver:
    """Feeds requests to a `GroupCoordinator` and records what comes out.

    Writes succeed at once unless `auto_persist` is False; then they queue in `writes`
    until `complete(token, ok, error)`.
    """

    def __init__(self, auto_persist: bool = True, **config: Any) -> None:
        cfg = {**KAFKA_TEST_CONFIG, **config}
        counter = itertools.count(1)
        self.core = GroupCoordinator(
            CoordinatorConfig(**cfg), member_id_factory=lambda p: f"{p}-{next(counter)}"
        )
        self.now = 0
        self.auto_persist = auto_persist
        self.responses: dict[int, dict[str, Any]] = {}
        self.writes: list[Write] = []
        self.all_writes: list[Write] = []
        self.states: list[StateChanged] = []
        self.discarded: list[Any] = []
        self._tokens = itertools.count(1)

    # ------------------------------------------------------------ plumbing

    def absorb(self, outputs: list) -> None:
        for o in outputs:
            if isinstance(o, Respond):
                assert o.request_token not in self.responses, f"request {o.request_token} answered twice"
                # As the client reads it off the wire: a map with the response's field names.
                self.responses[o.request_token] = msgspec.to_builtins(o.body, builtin_types=(bytes,))
            elif isinstance(o, Write):
                self.all_writes.append(o)
                if o.token is not None:
                    self.writes.append(o)
            elif isinstance(o, StateChanged):
                self.states.append(o)
            elif isinstance(o, Discarded):
                self.discarded.append(o.request_token)
            else:  # pragma: no cover
                raise AssertionError(o)
        while self.auto_persist and self.writes:
            w = self.writes.pop(0)
            self.absorb(self.core.persisted(w.token, True, self.now))

    def complete(self, token: int, ok: bool = True, error: int = E.COORDINATOR_NOT_AVAILABLE) -> None:
        self.writes = [w for w in self.writes if w.token != token]
        self.absorb(self.core.persisted(token, ok, self.now, error))

    def send(self, api: int, body: Any, **kw: Any) -> int:
        token = next(self._tokens)
        kw.setdefault("client_id", "client")
        kw.setdefault("client_host", "/127.0.0.1")
        req = body
        if api in GROUP_APIS and not isinstance(body, msgspec.Struct):
            # The request struct built from the map, as a codec would (schema defaults apply).
            try:
                req = msgspec.convert(body, APIS[api].request, builtin_types=(bytes,))
            except msgspec.ValidationError as e:
                self.responses[token] = {"error_code": E.INVALID_REQUEST, "error_message": str(e)}
                return token
        self.absorb(self.core.handle(api, req, self.now, request_token=token, **kw))
        return token

    def response(self, token: int) -> dict[str, Any] | None:
        return self.responses.get(token)

    def call(self, api: int, body: Any, **kw: Any) -> dict[str, Any]:
        """Send and require an immediate answer."""
        token = self.send(api, body, **kw)
        assert token in self.responses, "expected an immediate response"
        return self.responses[token]

    def advance(self, ms: int) -> None:
        self.now += ms
        self.absorb(self.core.tick(self.now))

    def state(self, group: str = GROUP) -> str | None:
        s = self.core.group_state(group)
        return None if s is None else s.value

    def group(self, group: str = GROUP):
        return self.core._groups[group]

    # ------------------------------------------------------------ requests

    def join(
        self,
        member_id: str = "",
        *,
        group: str = GROUP,
        instance: str | None = None,
        protocols: list | None = None,
        protocol_type: str = "consumer",
        session: int = 500,
        rebalance: int = 500,
        client_id: str = "client",
        **kw: Any,
    ) -> int:
        body = {
            "group_id": group,
            "session_timeout_ms": session,
            "rebalance_timeout_ms": rebalance,
            "member_id": member_id,
            "group_instance_id": instance,
            "protocol_type": protocol_type,
            "protocols": PROTOCOLS if protocols is None else protocols,
            "reason": None,
        }
        return self.send(JOIN_GROUP, body, client_id=client_id, **kw)

    def join_new(self, **kw: Any) -> str:
        """Dynamic member's first JoinGroup: MEMBER_ID_REQUIRED, returns the id to join with."""
        r = self.call_join(**kw)
        assert r["error_code"] == E.MEMBER_ID_REQUIRED, r
        return r["member_id"]

    def call_join(self, member_id: str = "", **kw: Any) -> dict[str, Any]:
        token = self.join(member_id, **kw)
        assert token in self.responses, "expected an immediate JoinGroup response"
        return self.responses[token]

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        group: str = GROUP,
        instance: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> int:
        body = {
            "group_id": group,
            "generation_id": generation,
            "member_id": member_id,
            "group_instance_id": instance,
            "protocol_type": protocol_type,
            "protocol_name": protocol_name,
            "assignments": [{"member_id": k, "assignment": v} for k, v in (assignments or {}).items()],
        }
        return self.send(SYNC_GROUP, body)

    def heartbeat(
        self, member_id: str, generation: int, *, group: str = GROUP, instance: str | None = None, **kw: Any
    ) -> int:
        body = {
            "group_id": group,
            "generation_id": generation,
            "member_id": member_id,
            "group_instance_id": instance,
        }
        return self.call(HEARTBEAT, body, **kw)["error_code"]

    def leave(self, *members: tuple[str, str | None], group: str = GROUP, **kw: Any) -> dict[str, Any]:
        body = {
            "group_id": group,
            "members": [{"member_id": m, "group_instance_id": i, "reason": None} for m, i in members],
        }
        return self.call(LEAVE_GROUP, body, **kw)

    def commit(
        self,
        offsets: dict[tuple[str, int], int],
        *,
        generation: int = -1,
        member_id: str = "",
        instance: str | None = None,
        group: str = GROUP,
        metadata: str | None = "",
        **kw: Any,
    ) -> int:
        topics: dict[str, list] = {}
        for (topic, p), off in offsets.items():
            topics.setdefault(topic, []).append(
                {"partition_index": p, "committed_offset": off, "committed_metadata": metadata}
            )
        body = {
            "group_id": group,
            "generation_id": generation,
            "member_id": member_id,
            "group_instance_id": instance,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }
        return self.send(OFFSET_COMMIT, body, **kw)

    def commit_errors(self, token: int) -> dict[tuple[str, int], int]:
        body = self.responses[token]
        return {
            (t["name"], p["partition_index"]): p["error_code"]
            for t in body["topics"]
            for p in t["partitions"]
        }

    def call_commit(self, offsets: dict[tuple[str, int], int], **kw: Any) -> dict[tuple[str, int], int]:
        token = self.commit(offsets, **kw)
        assert token in self.responses
        return self.commit_errors(token)

    def fetch(
        self, partitions: list[tuple[str, int]] | None = None, *, group: str = GROUP, **kw: Any
    ) -> dict[str, Any]:
        if partitions is None:
            topics = None
        else:
            by: dict[str, list[int]] = {}
            for t, p in partitions:
                by.setdefault(t, []).append(p)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in by.items()]
        return self.call(OFFSET_FETCH, {"group_id": group, "topics": topics, **kw})

    def fetched(
        self, partitions: list[tuple[str, int]] | None = None, **kw: Any
    ) -> dict[tuple[str, int], tuple]:
        body = self.fetch(partitions, **kw)
        assert body["error_code"] == E.NONE, body
        return {
            (t["name"], p["partition_index"]): (p["committed_offset"], p["metadata"], p["error_code"])
            for t in body["topics"]
            for p in t["partitions"]
        }

    def describe(self, *groups: str | None, **kw: Any) -> list[dict[str, Any]]:
        return self.call(DESCRIBE_GROUPS, {"groups": list(groups or [GROUP])}, **kw)["groups"]

    def list_groups(self, states: list[str] | None = None, **extra: Any) -> dict[str, Any]:
        return self.call(LIST_GROUPS, {"states_filter": states or [], **extra})

    def delete_groups(self, *groups: str | None, **kw: Any) -> dict[str | None, int]:
        body = self.call(DELETE_GROUPS, {"groups_names": list(groups)}, **kw)
        return {r["group_id"]: r["error_code"] for r in body["results"]}

    def offset_delete(
        self, partitions: list[tuple[str, int]], *, group: str = GROUP, **kw: Any
    ) -> dict[str, Any]:
        by: dict[str, list] = {}
        for t, p in partitions:
            by.setdefault(t, []).append({"partition_index": p})
        body = {"group_id": group, "topics": [{"name": t, "partitions": ps} for t, ps in by.items()]}
        return self.call(OFFSET_DELETE, body, **kw)

    # ------------------------------------------------------------ scenarios

    def stable_group(
        self,
        n: int = 1,
        *,
        group: str = GROUP,
        protocols: list | None = None,
        session: int = 500,
        rebalance: int = 500,
    ) -> tuple[list[str], int]:
        """Form a Stable group of `n` dynamic members (join, wait out the initial delay, sync).

        Returns (member ids, leader first; generation)."""
        ids = [self.join_new(group=group, client_id=f"c{i}") for i in range(n)]
        tokens = [
            self.join(mid, group=group, protocols=protocols, session=session, rebalance=rebalance)
            for mid in ids
        ]
        while not all(t in self.responses for t in tokens):
            self.advance(self.core.config.group_initial_rebalance_delay_ms + 1)
        bodies = [self.responses[t] for t in tokens]
        assert all(b["error_code"] == E.NONE for b in bodies), bodies
        generation = bodies[0]["generation_id"]
        leader = bodies[0]["leader"]
        st = [
            self.sync(mid, generation, {m: m.encode() for m in ids} if mid == leader else None, group=group)
            for mid in ids
        ]
        assert all(self.responses[t]["error_code"] == E.NONE for t in st)
        assert self.state(group) == "Stable"
        return [leader] + [m for m in ids if m != leader], generation


def test_driver_forms_a_stable_group():
    d = Driver()
    (leader, *followers), generation = d.stable_group(3)
    assert generation == 1
    assert len(followers) == 2
    assert d.heartbeat(leader, 1) == E.NONE
