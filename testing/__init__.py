"""ZooKeeper for tests, benches and experiments, as `kazoo.testing` is for kazoo: real servers in Docker.

* `testing.zookeeper` — one ZooKeeper container (`ZkServer`) from the local image, with faults
  (pause, stop, cut clients off);
* `testing.ensemble` — three servers on their own Docker network (`ZkEnsemble`), with partitions;
* `testing.leftovers` — removing the containers and networks whose owner process is gone;
* `testing.certs` — a certificate authority of its own: CA, node and client certificates (expired,
  not yet valid, mismatched, of another CA too) as PEM files, for the TLS tests and benchmarks;
* `testing.spark_cluster` — Spark's standalone cluster manager on loopback (`SparkCluster`): a
  master and workers from pyspark's own distribution, stopped with every executor they started.

The ZooKeeper modules need the `experiments` extra (testcontainers), imported only when a container
is made (through `core.extras.require`), so importing these modules costs nothing without it; the
Spark cluster needs the `spark` extra and a Java runtime, checked when it starts.
"""
