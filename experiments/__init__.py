"""Comparison experiments on real ZooKeeper: clusters, faults, scenarios, metrics, report."""
