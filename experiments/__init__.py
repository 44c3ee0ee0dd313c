"""Comparison experiments on real ZooKeeper (servers from `testing`): faults, scenarios, metrics, report."""
