"""Vocabulary and shared plumbing: TopicPartition, offsets, errors, clock, ZooKeeper factory, event log."""
