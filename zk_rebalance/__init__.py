"""Scheme one: the Kafka 0.8 ZooKeeper-watch consumer rebalancer (faithful, instrumented)."""
