"""Kafka's binary protocol for the node's Kafka listener: pure, no I/O (docs/kafka-listener.md).

`codec` maps Kafka's binary requests onto the structs of `coordinator/wire/schema.py` (group
APIs) and `messages` (data-plane APIs) and back; `records` converts between the Parquet log's
rows and Kafka record batches. The listener itself is `coordinator.node.kafka_listener`, its
data plane `coordinator.node.kafka_data`.
"""
