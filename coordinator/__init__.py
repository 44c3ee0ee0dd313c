"""Scheme three: Kafka's group coordinator on ZooKeeper, in five rooms.

* `wire` — the contract: typed requests/responses, the codec, error codes;
* `group` — the pure state machine (no I/O);
* `node` — the server process: connections, shard placement, ZooKeeper store, metrics;
* `member` — the consumer side: the group member client and its connection;
* `assignors` — partition assignors (range, roundrobin, sticky, cooperative-sticky, plug-ins).

Dependencies point downwards: `node` → `group` → `wire`; `member` → `wire`, `assignors`.
"""
