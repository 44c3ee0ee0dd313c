"""The warm-up a Spark driver runs to write its class-data-sharing archive (`pipeline.spark.cds`):

    python -m pipeline.spark.cds_warm_up ARCHIVE WORK_DIR

It starts a driver with `-XX:ArchiveClassesAtExit=ARCHIVE`, loads the classes a `groupshift
consume` loads (a batch query, Parquet out and in, a Python data source's stream into
`foreachBatch`), and waits for its JVM to exit, which writes the archive.
"""

from __future__ import annotations

import sys

from pipeline.spark.cds import BUILD_TIMEOUT_S


def warm_up(archive: str, work: str) -> None:
    """In a driver started with `-XX:ArchiveClassesAtExit`: load the classes a consume loads."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    from pipeline.spark.session import DRIVER_JAVA_OPTIONS, spark_session

    class Reader(DataSourceStreamReader):
        def initialOffset(self):
            return {"n": 0}

        def latestOffset(self):
            return {"n": 2}

        def partitions(self, start, end):
            return [InputPartition(i) for i in range(start["n"], end["n"])]

        def read(self, partition):
            yield (partition.value, "v")

        def commit(self, end):
            pass

    class Source(DataSource):
        @classmethod
        def name(cls):
            return "groupshift-warm-up"

        def schema(self):
            return "n int, v string"

        def streamReader(self, schema):
            return Reader()

    options = " ".join((*DRIVER_JAVA_OPTIONS, f"-XX:ArchiveClassesAtExit={archive}", "-Xlog:cds=off"))
    spark = spark_session("groupshift-cds", **{"spark.driver.extraJavaOptions": options})
    spark.dataSource.register(Source)
    spark.range(1000).selectExpr("id % 7 AS k").groupBy("k").count().write.parquet(f"{work}/batch")
    spark.read.parquet(f"{work}/batch").collect()

    def write(df, batch_id):
        df.write.mode("append").parquet(f"{work}/stream")

    query = (
        spark.readStream.format("groupshift-warm-up")
        .load()
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", f"{work}/checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    jvm = spark.sparkContext._gateway.proc  # the driver's JVM: it dumps the archive as it exits
    spark.stop()
    jvm.stdin.close()  # the gateway exits on end of input; wait for the dump to be written whole
    jvm.wait(BUILD_TIMEOUT_S)


if __name__ == "__main__":
    warm_up(sys.argv[1], sys.argv[2])
