"""ZooKeeper for tests, benches and experiments, as `kazoo.testing` is for kazoo: real servers in Docker.

* `testing.zookeeper` — one ZooKeeper container (`ZkServer`) from the local image, with faults
  (pause, stop, cut clients off);
* `testing.ensemble` — three servers on their own Docker network (`ZkEnsemble`), with partitions;
* `testing.leftovers` — removing the containers and networks whose owner process is gone.

They need the `experiments` extra (testcontainers), imported only when a container is made
(through `core.extras.require`), so importing these modules costs nothing without it.
"""
