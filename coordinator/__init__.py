"""Scheme three: Kafka's group coordinator on ZooKeeper, in rooms (docs/coordinator.md lists them all).

* `wire` — the contract: typed requests/responses, the codec, error codes;
* `group` — the pure state machine (no I/O);
* `layout` — every /groupshift znode path and payload, pure (the node's store and the tools use it);
* `node` — the server process: connections, shard placement, ZooKeeper store, metrics;
* `member` — the consumer side: the group member client and its connection;
* `assignors` — partition assignors (range, roundrobin, sticky, cooperative-sticky, plug-ins).

Dependencies point downwards: `node` → `layout` → `group` → `wire`; `member` → `wire`, `assignors`.
"""
