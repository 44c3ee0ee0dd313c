"""Bounds of the Spark consumers' settings, importable without pyspark, pyarrow or the fetcher
(`groupshift consume --help` shows them as ranges)."""

from __future__ import annotations

# the groupshift source's maxOffsetsPerTrigger (consume --max-records-per-batch)
MAX_RECORDS_PER_BATCH = 10_000_000
