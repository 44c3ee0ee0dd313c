"""The coordinator node: the process that serves groups over TCP around the pure core.

`server` (lifecycle, timers, the ZooKeeper session; `state`: the node's states), `dispatch`
(serving one request), `outputs` (carrying out the core's outputs), `connection`, `shards`
(shard placement and leadership), `store` with `group_store` and `zk_async` (registration, shard
claims, groups and offsets in ZooKeeper, fenced by shard epochs), `metrics` (Prometheus text),
`kafka_listener`, `kafka_data` and `offsets_mirror` (the Kafka-protocol listener), `process`
(nodes as child processes, for tests, benchmarks and experiments). docs/coordinator.md and
docs/recovery.md describe it.
"""
