"""The `groupshift` streaming source: `spark.readStream.format("groupshift")`.

    register(spark)                      # spark_session() does it for you
    df = (spark.readStream.format("groupshift")
          .option("zk", "zk1:2181").option("group", "billing").option("subscribe", "clicks,views")
          .option("rebalancer", "coordinator")          # zk | server | coordinator
          .load())                                      # key, value, topic, partition, offset, timestamp

Options (`pipeline.spark.options`) are checked, and the topics looked up in ZooKeeper, when
`load()` builds the stream: a bad one fails there with one line, before any query starts.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource

from core.errors import GroupshiftError
from pipeline.spark.options import SourceOptions, parse
from pipeline.spark.segments import STREAM_SCHEMA

NAME = "groupshift"


class GroupshiftSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        check_topics(parse(self.options))
        return STREAM_SCHEMA

    def streamReader(self, schema: Any):
        from pipeline.spark.reader import GroupStreamReader

        return GroupStreamReader(parse(self.options))

    def reader(self, schema: Any):
        raise GroupshiftError(
            "the groupshift source is a stream: use spark.readStream.format('groupshift'), not spark.read"
        )


def check_topics(options: SourceOptions) -> None:
    """Every subscribed topic is registered in ZooKeeper and present in the log root."""
    from pathlib import Path

    from core.zk import connect
    from topics.registry import UnknownTopic, describe
    from topics.root import default_root

    zk = connect(options.zk, create_chroot=False, require_chroot=False, connect_timeout=10.0)
    try:
        for topic in options.topics:
            try:
                describe(zk, topic)
            except UnknownTopic as exc:
                raise GroupshiftError(str(exc)) from None
    finally:
        zk.stop()
        zk.close()
    root = Path(options.log_root) if options.log_root else default_root()
    missing = [t for t in options.topics if not (root / t).is_dir()]
    if missing:
        raise GroupshiftError(
            f"topic {missing[0]!r} has no log under {root} (option logRoot: the log root every Spark "
            "process reads)"
        )


def register(spark: Any) -> None:
    """Make `format("groupshift")` known to this SparkSession."""
    spark.dataSource.register(GroupshiftSource)
