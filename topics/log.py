"""Transitional: `topics/log.py` is being split by job (the next commit); its code is in `topics/log_writer.py` for now."""

from topics.log_writer import (  # noqa: F401
    PARTITION_PREFIX,
    Log,
    OffsetAndTimestamp,
    ProduceResult,
    ReadResult,
    default_root,
)
