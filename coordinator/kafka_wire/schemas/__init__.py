"""KIP-848's consumer-group APIs as message schemas in the JSON form kafka-python 3.0.12 loads.

kafka-python generates its request and response classes from Kafka's message schemas and ships
every API the Kafka listener serves except ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe
(69). These four files describe those two APIs the same way — field names, types, versions,
nullability and flexible versions as Kafka puts them on the wire — and `kafka_wire.consumer_group_api`
declares the classes from them. A comment block at the top of a file is kept by the loader as its
documentation.
"""
