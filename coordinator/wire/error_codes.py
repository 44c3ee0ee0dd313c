"""Kafka's numeric error codes used by the group coordinator, and how storage failures map onto them.

The codes are Kafka's (docs/protocol.md, Error codes); responses carry them in their `error_code` fields.
The two `map_*_write_error` functions are the translation Kafka applies when a write of group
metadata or of offsets fails: the caller of the core reports the raw storage error and
the core decides what the client sees.
"""

from __future__ import annotations

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
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
KAFKA_STORAGE_ERROR = 56
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86
UNSTABLE_OFFSET_COMMIT = 88
FENCED_MEMBER_EPOCH = 110
UNSUPPORTED_ASSIGNOR = 112
STALE_MEMBER_EPOCH = 113
INVALID_FETCH_SIZE = 4
# The data plane's codes (the Kafka listener's Fetch and Produce, docs/kafka-listener.md).
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
INVALID_PRODUCER_ID_MAPPING = 49
UNKNOWN_PRODUCER_ID = 59
INVALID_RECORD = 87
# groupshift's own codes (from 1000, outside Kafka's numbering).
UNKNOWN_PARTITIONING_STRATEGY = 1000  # scheme two: the coordinator has no assignor of that name
# NOT_LEADER_OR_FOLLOWER shares code 6 with the old NOT_LEADER_FOR_PARTITION.
NOT_LEADER_OR_FOLLOWER = 6

NAMES: dict[int, str] = {
    code: name for name, code in list(globals().items()) if name.isupper() and isinstance(code, int)
}


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
