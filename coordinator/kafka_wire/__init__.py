"""Kafka's binary protocol for the node's Kafka listener: pure, no I/O (docs/kafka-listener.md).

`codec` maps Kafka's binary requests onto the structs of `coordinator/wire/schema.py` (group
APIs) and `messages` (data-plane APIs) and back; `records` converts between the Parquet log's
rows and Kafka record batches. The listener itself is `coordinator.node.kafka_listener`, its
data plane `coordinator.node.kafka_data`.

kafka-python's package `__init__` imports its whole client stack (admin client, consumer, producer,
their network layer), which the node never uses: about a quarter of a second of every node start
and of every process that imports this package. `_protocol_only` registers the `kafka` package
without running that `__init__`, so `kafka.protocol`, `kafka.record` and `kafka.errors` import
alone; the first read of anything else the package binds (`kafka.KafkaConsumer`,
`from kafka import KafkaAdminClient`, `kafka.__version__`) runs the real `__init__` then, once.
"""

from __future__ import annotations

import importlib.util
import logging
import sys


def _protocol_only() -> None:
    if "kafka" in sys.modules:
        return
    spec = importlib.util.find_spec("kafka")
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return  # not installed as a package: the import below says so
    package = importlib.util.module_from_spec(spec)

    def complete(name: str):
        # The package's own __init__, run once into the same module object; then the name again.
        del package.__dict__["__getattr__"]
        spec.loader.exec_module(package)
        return getattr(package, name)

    package.__getattr__ = complete
    logging.getLogger("kafka").addHandler(logging.NullHandler())  # what that __init__ does first
    sys.modules["kafka"] = package


_protocol_only()
