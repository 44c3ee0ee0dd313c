"""The data plane: a partitioned, offset-addressed log of Parquet segments, its producer and fetcher."""
