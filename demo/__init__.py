"""The demos: the README's main job (`groupshift demo`) and `groupshift demo --compare`.

* `demo.main_job` — Spark consumers migrated live from scheme one to scheme three;
* `demo.compare` — the same consumer code under each rebalancer, side by side;
* `demo.namespace` — the ZooKeeper chroot and log directory each runs in, deleted at the end.
"""
