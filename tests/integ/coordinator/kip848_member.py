"""A librdkafka consumer-protocol member as a process of its own, for tests that kill it.

    python -m tests.integ.coordinator.kip848_member BOOTSTRAP GROUP TOPIC

Prints `assigned P,P` / `revoked P,P` lines as its assignment changes and commits every batch
it read; it runs until it is killed.
"""

from __future__ import annotations

import sys

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CKTopicPartition


def main(bootstrap: str, group: str, topic: str) -> None:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 200,
        }
    )

    def report(kind: str, tps) -> None:
        print(kind, ",".join(str(tp.partition) for tp in tps), flush=True)

    c.subscribe(
        [topic],
        on_assign=lambda _, tps: report("assigned", tps),
        on_revoke=lambda _, tps: report("revoked", tps),
    )
    while True:
        positions = {}
        for m in c.consume(num_messages=200, timeout=0.1):
            if not m.error():
                positions[m.partition()] = m.offset() + 1
        if positions:
            c.commit(
                offsets=[CKTopicPartition(topic, p, o) for p, o in positions.items()], asynchronous=False
            )


if __name__ == "__main__":
    main(*sys.argv[1:4])
