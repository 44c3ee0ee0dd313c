"""The coordinator node: the process that serves groups over TCP around the pure core.

`server` (connections, dispatch, shard placement, timers), `store` (groups and offsets in
ZooKeeper, fenced by shard epochs), `metrics` (Prometheus text), `process` (nodes as child
processes, for tests, benchmarks and experiments). docs/coordinator.md and docs/recovery.md
describe it.
"""
