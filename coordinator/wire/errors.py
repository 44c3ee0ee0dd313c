"""Kafka's numeric error codes, the one table of what each means to a client, and how storage
failures map onto them.

The codes are Kafka's (docs/protocol.md, Error codes); responses carry them in their `error_code`
fields, and `E.UNKNOWN_MEMBER_ID` etc. name them (`from coordinator.wire import errors as E`).
`TABLE` is the one place that says, per code, its name and how a client reacts to it — Kafka's
`Errors` enum and exception classes:

* `retriable` — the same request may succeed later unchanged (Kafka's `RetriableException`);
* `fences_member` — the member's generation (or epoch) is gone: its partitions may be someone
  else's already, so it reports them lost and rejoins (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
  FENCED_MEMBER_EPOCH);
* `coordinator_moved` — the node asked is not (or no longer) the group's coordinator: look it up
  again with FindCoordinator (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE).

Ask through `retriable(code)`, `fences_member(code)` and `coordinator_moved(code)` rather than
listing codes at the call site.

>>> fences_member(ILLEGAL_GENERATION), coordinator_moved(NOT_COORDINATOR), retriable(REBALANCE_IN_PROGRESS)
(True, True, False)
>>> TABLE[NOT_COORDINATOR].name
'NOT_COORDINATOR'

The two `map_*_write_error` functions are the translation Kafka applies when a write of group
metadata or of offsets fails: the caller of the core reports the raw storage error and
the core decides what the client sees.
"""

from __future__ import annotations

from dataclasses import dataclass

NONE = 0
UNKNOWN_SERVER_ERROR = -1
UNKNOWN_TOPIC_OR_PARTITION = 3
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
OFFSET_METADATA_TOO_LARGE = 12
NETWORK_EXCEPTION = 13
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
RECORD_LIST_TOO_LARGE = 18
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
INVALID_COMMIT_OFFSET_SIZE = 28
GROUP_AUTHORIZATION_FAILED = 30
UNSUPPORTED_SASL_MECHANISM = 33  # SaslHandshake named a mechanism the listener does not enable
ILLEGAL_SASL_STATE = 34  # a SASL request out of order (docs/security.md, "SASL")
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
KAFKA_STORAGE_ERROR = 56
SASL_AUTHENTICATION_FAILED = 58
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86
UNSTABLE_OFFSET_COMMIT = 88
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
UNSUPPORTED_ASSIGNOR = 112
STALE_MEMBER_EPOCH = 113
INVALID_REGULAR_EXPRESSION = 128
INVALID_FETCH_SIZE = 4
# The data plane's codes (the Kafka listener's Fetch and Produce, docs/kafka-listener.md).
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
INVALID_PRODUCER_ID_MAPPING = 49
UNKNOWN_PRODUCER_ID = 59
INVALID_RECORD = 87
UNKNOWN_TOPIC_ID = 100  # Metadata v10+: a topic asked for by an id no topic has
# groupshift's own codes (from 1000, outside Kafka's numbering).
UNKNOWN_PARTITIONING_STRATEGY = 1000  # scheme two: the coordinator has no assignor of that name
# NOT_LEADER_OR_FOLLOWER shares code 6 with the old NOT_LEADER_FOR_PARTITION.
NOT_LEADER_OR_FOLLOWER = 6

NAMES: dict[int, str] = {
    code: name for name, code in list(globals().items()) if name.isupper() and isinstance(code, int)
}


@dataclass(frozen=True)
class ErrorInfo:
    """One row of `TABLE`: a code, its name, and how a client reacts to it."""

    code: int
    name: str
    retriable: bool = False  # the same request may succeed later (Kafka's RetriableException)
    fences_member: bool = False  # the member's generation or epoch is gone: report lost, rejoin
    coordinator_moved: bool = False  # not the group's coordinator (any more): FindCoordinator again


_RETRIABLE, _FENCES, _MOVED = "retriable", "fences_member", "coordinator_moved"

#: code -> how a client reacts to it; a code not listed here has every flag False.
_REACTIONS: dict[int, tuple[str, ...]] = {
    CORRUPT_MESSAGE: (_RETRIABLE,),
    UNKNOWN_TOPIC_OR_PARTITION: (_RETRIABLE,),
    NOT_LEADER_OR_FOLLOWER: (_RETRIABLE,),
    REQUEST_TIMED_OUT: (_RETRIABLE,),
    NETWORK_EXCEPTION: (_RETRIABLE,),
    COORDINATOR_LOAD_IN_PROGRESS: (_RETRIABLE,),
    COORDINATOR_NOT_AVAILABLE: (_RETRIABLE, _MOVED),
    NOT_COORDINATOR: (_RETRIABLE, _MOVED),
    NOT_ENOUGH_REPLICAS: (_RETRIABLE,),
    NOT_ENOUGH_REPLICAS_AFTER_APPEND: (_RETRIABLE,),
    KAFKA_STORAGE_ERROR: (_RETRIABLE,),
    UNSTABLE_OFFSET_COMMIT: (_RETRIABLE,),
    ILLEGAL_GENERATION: (_FENCES,),
    UNKNOWN_MEMBER_ID: (_FENCES,),
    FENCED_MEMBER_EPOCH: (_FENCES,),
}

#: The one table: every code above -> its `ErrorInfo`.
TABLE: dict[int, ErrorInfo] = {
    code: ErrorInfo(code, name, **dict.fromkeys(_REACTIONS.get(code, ()), True))
    for code, name in NAMES.items()
}


def _info(code: int) -> ErrorInfo:
    return TABLE.get(code) or ErrorInfo(code, str(code))


def retriable(code: int) -> bool:
    """The same request may succeed later unchanged (Kafka's `RetriableException`)."""
    return _info(code).retriable


def fences_member(code: int) -> bool:
    """The member's generation or epoch is gone: it reports its partitions lost and rejoins."""
    return _info(code).fences_member


def coordinator_moved(code: int) -> bool:
    """The node is not the group's coordinator (any more): look the coordinator up again."""
    return _info(code).coordinator_moved


def map_group_write_error(error: int) -> int:
    """What a client sees when persisting group metadata failed with `error`."""
    if error in (UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND):
        return COORDINATOR_NOT_AVAILABLE
    if error in (NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR):
        return NOT_COORDINATOR
    if error == REQUEST_TIMED_OUT:
        return REBALANCE_IN_PROGRESS
    if error in (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_FETCH_SIZE):
        return UNKNOWN_SERVER_ERROR
    return error


def map_offset_write_error(error: int) -> int:
    """What a client sees for each partition when persisting an offset commit failed with `error`."""
    if error in (UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND):
        return COORDINATOR_NOT_AVAILABLE
    if error in (NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR):
        return NOT_COORDINATOR
    if error in (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_FETCH_SIZE):
        return INVALID_COMMIT_OFFSET_SIZE
    if error == NETWORK_EXCEPTION:
        return COORDINATOR_LOAD_IN_PROGRESS
    return error
