"""Spark consumers: PySpark jobs that are members of a consumer group under any scheme."""

from pipeline.spark.session import load_transform, spark_session, with_value_length

__all__ = ["load_transform", "spark_session", "with_value_length"]
