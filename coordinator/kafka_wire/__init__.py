"""The Kafka-protocol listener: unmodified Kafka clients as members and admins of the node's groups.

`codec` maps Kafka's binary requests onto the structs of `coordinator/wire/schema.py` (group
APIs) and `messages` (data-plane APIs), `records` converts between the Parquet log's rows and
Kafka record batches, `data` serves Metadata, ListOffsets, Fetch and Produce from the log, and
`listener` is the node's second TCP server (docs/kafka-listener.md).
"""
