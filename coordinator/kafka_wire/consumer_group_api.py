"""kafka-python message classes for KIP-848's ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

Declared from the schemas in `kafka_wire/schemas` (kafka-python takes the class name as the file
stem), so they encode and decode exactly as kafka-python's own classes do: compact strings and
arrays, tagged fields, UUIDs, the nullable `Assignment` struct.

    ConsumerGroupHeartbeatRequest.decode(body, version=1)
    ConsumerGroupHeartbeatResponse(version=1, error_code=0, ...).encode(version=1)
"""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from coordinator.kafka_wire import schemas


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=schemas):
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=schemas):
    pass


class ConsumerGroupDescribeRequest(ApiMessage, load_json=schemas):
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json=schemas):
    pass
