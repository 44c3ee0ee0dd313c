"""Each store's groups, read and written: the one room that knows the ZooKeeper layouts.

`zk_store` reads and writes scheme one's groups (Kafka 0.8's `/consumers/<g>`), `coordinator_store`
the coordinator's (`/groupshift/groups/<g>`, schemes two and three); both give a `GroupView`
(`model`). `zkio` pipelines their reads; `writes` commits and deletes offsets and groups in either
store (through the leading coordinator node when there is one). Which store: `core.scheme.STORES`.
"""
