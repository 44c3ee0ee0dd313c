"""One Consumer API over both rebalancers, and the Spark consumers built on it."""
