"""`groupshift migrate`: move a group and its offsets from one store to another.

`record` is the migration's state machine (stored in `/groupshift/migrations/<g>`), `offline` the
engine that drives it (lock, checkpoints, copy, verify, rollback), `live` the live mode and
`bridge` the coordinator members that join a scheme-one group while it is migrated; `to_kafka`
migrates to a Kafka-protocol group, which `kafka_target` reads and writes.
"""
