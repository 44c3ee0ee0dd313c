"""Bad frames for a coordinator node, reproducibly from a seed: the generator `fuzz.run` sends.

    fuzzer = FrameFuzzer(seed=1, target=Target(group="live", topic="live-topic"))
    for frame in fuzzer.frames(1000):        # Frame(kind, data, alone, rid, expect, expect_text)
        ...

Frames are built at the byte level (MessagePack via msgspec, and raw bytes; nothing from the
node's own codec); never one that could change the live group `target` names. Their kinds are
listed in `fuzz.run`'s docstring (`python -m fuzz --help`). `control_frame` is the well-formed
OffsetFetch of the live group that must succeed wherever it is sent.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

MAX_FRAME_BYTES = 1 << 20  # the node's default --max-frame-bytes

# API keys (docs/protocol.md).
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, API_VERSIONS, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 18, 42, 47
# Error codes (docs/protocol.md).
UNSUPPORTED_VERSION, INVALID_REQUEST = 35, 42
INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID, INVALID_SESSION_TIMEOUT = 23, 25, 26
NON_EMPTY_GROUP, GROUP_SUBSCRIBED_TO_TOPIC = 68, 86

_encode = msgspec.msgpack.Encoder().encode


def framed(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def request(api: int, rid: int, body: Any, client_id: str = "fuzz", v: int = 0) -> dict[str, Any]:
    return {"api": api, "v": v, "id": rid, "client_id": client_id, "body": body}


@dataclass(frozen=True)
class Frame:
    """One frame to send: `data` holds exactly the bytes (length prefix included)."""

    kind: str
    data: bytes
    alone: bool = False  # its own connection: it may leave a partial frame or desync the stream
    rid: int | None = None  # the correlation id the answer must carry, when known
    expect: Callable[[dict[str, Any]], bool] | None = None  # what the answer's body must satisfy
    expect_text: str = ""


@dataclass(frozen=True)
class Target:
    """The live group the fuzzer must not disturb, and what it may say about it."""

    group: str
    topic: str


# ---------------------------------------------------------------------------------------------
# The generator


class FrameFuzzer:
    """Bad frames, reproducibly from a seed; never a request that could change the live group.

    Mutated requests go to throw-away groups (`fz-0`..`fz-15`) with made-up member ids and no
    `group_instance_id`: a flipped byte cannot turn nil into a string, so no static member (which
    would park JoinGroups for its rebalance timeout) is ever created.
    """

    WEIGHTS = {
        "random": 8,
        "random_msgpack": 10,
        "flipped": 30,
        "wrong_type": 20,
        "deep_nesting": 5,
        "huge_declared": 7,
        "invalid_state": 12,
        "truncated": 5,
        "huge_length": 3,
    }

    def __init__(self, seed: int, target: Target):
        self.rng = random.Random(seed)
        self.target = target
        self.ids = 1_000_000
        self._kinds = list(self.WEIGHTS)
        self._weights = list(self.WEIGHTS.values())

    def frames(self, n: int) -> Iterator[Frame]:
        for _ in range(n):
            kind = self.rng.choices(self._kinds, self._weights)[0]
            yield getattr(self, "_" + kind)()

    def _rid(self) -> int:
        self.ids += 1
        return self.ids

    # -- well-formed templates, to throw-away groups ---------------------------------------------

    def template(self) -> dict[str, Any]:
        r = self.rng
        g = f"fz-{r.randrange(16)}"
        m = f"fuzz-{uuid.UUID(int=r.getrandbits(128))}"
        gen = r.choice([0, 7, 987_654])
        api, body = r.choice(
            [
                (
                    JOIN_GROUP,
                    {
                        "group_id": g,
                        "session_timeout_ms": 10_000,
                        "rebalance_timeout_ms": 10_000,
                        "member_id": "",
                        "group_instance_id": None,
                        "protocol_type": "consumer",
                        "protocols": [{"name": "range", "metadata": b"\x80"}],
                        "reason": None,
                    },
                ),
                (
                    SYNC_GROUP,
                    {
                        "group_id": g,
                        "generation_id": gen,
                        "member_id": m,
                        "group_instance_id": None,
                        "protocol_type": "consumer",
                        "protocol_name": "range",
                        "assignments": [{"member_id": m, "assignment": b""}],
                    },
                ),
                (HEARTBEAT, {"group_id": g, "generation_id": gen, "member_id": m, "group_instance_id": None}),
                (
                    LEAVE_GROUP,
                    {"group_id": g, "members": [{"member_id": m, "group_instance_id": None, "reason": None}]},
                ),
                (
                    OFFSET_COMMIT,
                    {
                        "group_id": g,
                        "generation_id": r.choice([-1, gen]),
                        "member_id": r.choice(["", m]),
                        "group_instance_id": None,
                        "topics": [
                            {
                                "name": "fz-topic",
                                "partitions": [
                                    {"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}
                                ],
                            }
                        ],
                    },
                ),
                (
                    OFFSET_FETCH,
                    {
                        "group_id": g,
                        "topics": r.choice([None, [{"name": "fz-topic", "partition_indexes": [0]}]]),
                    },
                ),
                (DESCRIBE_GROUPS, {"groups": [g]}),
                (LIST_GROUPS, {"states_filter": []}),
                (FIND_COORDINATOR, {"key": g, "key_type": 0}),
                (API_VERSIONS, {}),
                (DELETE_GROUPS, {"groups_names": [g]}),
                (
                    OFFSET_DELETE,
                    {"group_id": g, "topics": [{"name": "fz-topic", "partitions": [{"partition_index": 0}]}]},
                ),
            ]
        )
        return request(api, self._rid(), body)

    # -- the kinds -------------------------------------------------------------------------------

    def _random(self) -> Frame:
        n = self.rng.choice([0, 1, 2, 5, 16, 64, 512])
        return Frame("random", framed(self.rng.randbytes(n)))

    def _random_msgpack(self) -> Frame:
        value = self.random_value(3)
        if self.rng.random() < 0.5:  # a map with some of the envelope's keys, random values
            value = {
                k: self.random_value(2)
                for k in ("api", "v", "id", "client_id", "body")
                if self.rng.random() < 0.8
            }
        return Frame("random_msgpack", framed(_encode(value)))

    def random_value(self, depth: int) -> Any:
        r = self.rng
        pick = r.randrange(12 if depth > 0 else 9)
        if pick == 0:
            return None
        if pick == 1:
            return r.random() < 0.5
        if pick == 2:
            return r.choice(
                [0, -1, 1, 127, 128, 255, 2**15, 2**31 - 1, 2**31, -(2**31) - 1, 2**63, -(2**63), 2**64 - 1]
            )
        if pick == 3:
            return r.randint(-(2**40), 2**40)
        if pick == 4:
            return r.choice([0.0, -1.5, float("inf"), float("nan"), 1e308])
        if pick == 5:
            return "".join(
                chr(r.choice([r.randrange(32, 127), r.randrange(0x80, 0xD800)]))
                for _ in range(r.randrange(12))
            )
        if pick == 6:
            return r.randbytes(r.randrange(16))
        if pick == 7:
            return r.choice(["", "api", "body", "id", "group_id", "member_id"])
        if pick == 8:
            return msgspec.msgpack.Ext(r.randrange(-128, 128), r.randbytes(r.randrange(9)))
        if pick in (9, 10):
            return {self._random_key(): self.random_value(depth - 1) for _ in range(r.randrange(5))}
        return [self.random_value(depth - 1) for _ in range(r.randrange(5))]

    def _random_key(self) -> Any:
        r = self.rng
        return r.choice(["api", "v", "id", "client_id", "body", "group_id", "topics", "x", "", "\u00e9"])

    def _flipped(self) -> Frame:
        payload = bytearray(_encode(self.template()))
        for _ in range(self.rng.randint(1, 4)):
            i = self.rng.randrange(len(payload))
            payload[i] ^= self.rng.randrange(1, 256)
        return Frame("flipped", framed(bytes(payload)))

    WRONG = (None, True, -1, 2**31, 2**63, -(2**63), 1.5, "x", b"x", [], {}, [1, "a"], {"k": 1})

    def _wrong_type(self) -> Frame:
        r = self.rng
        req = self.template()
        where = r.choice(["envelope", "body", "body", "nested"])
        if where == "envelope":
            key = r.choice(["api", "v", "id", "client_id", "body"])
            container = req
        elif where == "nested" and any(
            isinstance(v, list) and v and isinstance(v[0], dict) for v in req["body"].values()
        ):
            lists = [v for v in req["body"].values() if isinstance(v, list) and v and isinstance(v[0], dict)]
            container = r.choice(lists)[0]
            key = r.choice(list(container))
        else:
            container = req["body"]
            if not container:
                container = req
            key = r.choice(list(container))
        if r.random() < 0.2:
            del container[key]  # a missing key: INVALID_REQUEST
        elif r.random() < 0.1:
            container["zz_unknown"] = self.random_value(1)  # an unknown key: ignored
        else:
            old = container[key]
            container[key] = r.choice([w for w in self.WRONG if type(w) is not type(old) or w != old])
        rid = req.get("id") if type(req.get("id")) is int and -(2**31) <= req["id"] < 2**31 else None
        return Frame("wrong_type", framed(_encode(req)), rid=rid)

    def _deep_nesting(self) -> Frame:
        r = self.rng
        depth = r.choice([64, 1_000, 10_000, 200_000])
        if r.random() < 0.5:
            nest = b"\x91" * depth + b"\xc0"  # [[[...[nil]...]]]
        else:
            nest = b"\x81\xa1k" * depth + b"\xc0"  # {"k": {"k": ...}}
        rid = self._rid()
        where = r.choice(["frame", "body", "field"])
        if where == "frame":
            payload = nest
            rid = None
        elif where == "body":
            head = _encode(request(HEARTBEAT, rid, None))
            payload = head[:-1] + nest  # the encoded body (nil, the last byte) replaced
        else:
            body = {"group_id": "fz-0", "topics": None}
            head = _encode(request(OFFSET_FETCH, rid, body))
            payload = head[:-1] + nest  # the `topics` value (nil, the last byte) replaced
        return Frame("deep_nesting", framed(payload), rid=rid)

    def _huge_declared(self) -> Frame:
        r = self.rng
        rid = self._rid()
        n = r.choice([2**16, 2**31, 2**32 - 1]).to_bytes(4, "big")
        declared = r.choice(
            [b"\xdb" + n + b"abc", b"\xc6" + n + b"\x00", b"\xdd" + n + b"\x01\x02", b"\xdf" + n + b"\xa1k"]
        )
        where = r.choice(["frame", "body", "field"])
        if where == "frame":
            payload = declared
            rid = None
        elif where == "body":
            payload = _encode(request(HEARTBEAT, rid, None))[:-1] + declared
        else:
            payload = (
                _encode(request(OFFSET_FETCH, rid, {"group_id": "fz-0", "topics": None}))[:-1] + declared
            )
        return Frame("huge_declared", framed(payload), rid=rid)

    def _truncated(self) -> Frame:
        r = self.rng
        payload = _encode(self.template())
        how = r.choice(["short", "long", "header"])
        if how == "short":  # fewer bytes than the prefix promises: the node waits, then times out
            data = framed(payload)[: 4 + r.randrange(len(payload))]
        elif how == "long":  # more bytes than promised: the rest is read as the next frame
            data = r.randrange(len(payload)).to_bytes(4, "big") + payload
        else:  # part of a length prefix
            data = framed(payload)[: r.randint(1, 3)]
        return Frame("truncated", data, alone=True)

    def _huge_length(self) -> Frame:
        n = self.rng.choice([MAX_FRAME_BYTES + 1, 2**31, 2**32 - 1])
        return Frame(
            "huge_length", n.to_bytes(4, "big") + self.rng.randbytes(self.rng.randrange(64)), alone=True
        )

    def _invalid_state(self) -> Frame:
        """A well-formed request the node must refuse, with the code docs/protocol.md gives."""
        r = self.rng
        g, t = self.target.group, self.target.topic
        fake = f"fuzz-{uuid.UUID(int=r.getrandbits(128))}"
        rid = self._rid()

        def code(expected: int) -> Callable[[dict[str, Any]], bool]:
            return lambda body: body.get("error_code") == expected

        join = {
            "group_id": g,
            "session_timeout_ms": 10_000,
            "rebalance_timeout_ms": 10_000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
            "reason": None,
        }
        cases = [
            (
                request(
                    HEARTBEAT,
                    rid,
                    {"group_id": g, "generation_id": 1, "member_id": fake, "group_instance_id": None},
                ),
                code(UNKNOWN_MEMBER_ID),
                "25",
            ),
            (
                request(
                    SYNC_GROUP,
                    rid,
                    {
                        "group_id": g,
                        "generation_id": 1,
                        "member_id": fake,
                        "group_instance_id": None,
                        "protocol_type": None,
                        "protocol_name": None,
                        "assignments": [],
                    },
                ),
                code(UNKNOWN_MEMBER_ID),
                "25",
            ),
            (
                request(
                    OFFSET_COMMIT,
                    rid,
                    {
                        "group_id": g,
                        "generation_id": 1,
                        "member_id": fake,
                        "group_instance_id": None,
                        "topics": [
                            {
                                "name": t,
                                "partitions": [
                                    {"partition_index": 0, "committed_offset": 0, "committed_metadata": None}
                                ],
                            }
                        ],
                    },
                ),
                lambda b: (
                    [p["error_code"] for tt in b.get("topics", []) for p in tt["partitions"]]
                    == [UNKNOWN_MEMBER_ID]
                ),
                "partition error 25",
            ),
            (
                request(
                    OFFSET_COMMIT,
                    rid,
                    {
                        "group_id": g,
                        "generation_id": -1,
                        "member_id": "",
                        "group_instance_id": None,
                        "topics": [
                            {
                                "name": t,
                                "partitions": [
                                    {"partition_index": 0, "committed_offset": 0, "committed_metadata": None}
                                ],
                            }
                        ],
                    },
                ),
                lambda b: (
                    [p["error_code"] for tt in b.get("topics", []) for p in tt["partitions"]] not in ([], [0])
                ),
                "a partition error (the group has members)",
            ),
            (
                request(
                    LEAVE_GROUP,
                    rid,
                    {
                        "group_id": g,
                        "members": [{"member_id": fake, "group_instance_id": None, "reason": None}],
                    },
                ),
                lambda b: (
                    b.get("error_code") == 0
                    and [m["error_code"] for m in b["members"]] == [UNKNOWN_MEMBER_ID]
                ),
                "member error 25",
            ),
            (
                request(JOIN_GROUP, rid, {**join, "protocol_type": "connect"}),
                code(INCONSISTENT_GROUP_PROTOCOL),
                "23",
            ),
            (
                request(JOIN_GROUP, rid, {**join, "session_timeout_ms": 1}),
                code(INVALID_SESSION_TIMEOUT),
                "26",
            ),
            (
                request(DELETE_GROUPS, rid, {"groups_names": [g]}),
                lambda b: [x["error_code"] for x in b["results"]] == [NON_EMPTY_GROUP],
                "68",
            ),
            (
                request(
                    OFFSET_DELETE,
                    rid,
                    {"group_id": g, "topics": [{"name": t, "partitions": [{"partition_index": 0}]}]},
                ),
                lambda b: (
                    [p["error_code"] for tt in b.get("topics", []) for p in tt["partitions"]]
                    == [GROUP_SUBSCRIBED_TO_TOPIC]
                ),
                "86",
            ),
            (request(r.choice([1, 3, 19, 99, 999, -5]), rid, {}), code(UNSUPPORTED_VERSION), "35"),
            (
                request(
                    HEARTBEAT,
                    rid,
                    {"group_id": g, "generation_id": 1, "member_id": fake, "group_instance_id": None},
                    v=r.choice([1, 9, -1]),
                ),
                code(UNSUPPORTED_VERSION),
                "35",
            ),
            (request(FIND_COORDINATOR, rid, {"key": g, "key_type": 1}), code(INVALID_REQUEST), "42"),
        ]
        req, expect, text = r.choice(cases)
        return Frame("invalid_state", framed(_encode(req)), rid=rid, expect=expect, expect_text=text)


def control_frame(rid: int, target: Target) -> Frame:
    """A well-formed OffsetFetch of the live group: must answer error 0 wherever it is pipelined."""
    body = {"group_id": target.group, "topics": [{"name": target.topic, "partition_indexes": [0]}]}
    return Frame(
        "control",
        framed(_encode(request(OFFSET_FETCH, rid, body, client_id="fuzz-control"))),
        rid=rid,
        expect=lambda b: b.get("error_code") == 0,
        expect_text="0",
    )
