"""Exactly once into files: the `foreachBatch` writer for `groupshift` streams.

    query = (df.writeStream
             .foreachBatch(ExactlyOnceWriter("/data/out", checkpoint="/data/ck/billing"))
             .option("checkpointLocation", "/data/ck/billing")
             .start())

or `write_exactly_once(df, out, checkpoint)`, which does both. Per micro-batch it learns the
batch's ranges and generation from Spark's checkpoint (`<checkpoint>/offsets/<batchId>`, written
before the batch runs), then:

1. **recover** each partition's earlier outputs (`pipeline.spark.output.recover`: publish what
   was committed but not published, remove what was never committed);
2. **stage**: the batch (after `transform`, which keeps the `topic` and `partition` columns) in
   one write split by topic and partition, each range's files then moved to a staging directory
   of its own;
3. **commit** through the member that planned the batch (`pipeline.spark.commit_service`),
   fenced by the generation it planned under;
4. **publish** (committed: the staging directories get their final names) or **discard** (the
   group moved on: the records go to the partitions' owner, which writes them again) — per
   partition, as scheme one may refuse some partitions of a commit and write the others. Not known
   (the member could not answer): the staging output stays for `recover` to decide.

A batch replayed after a restart, whose planner is gone, writes nothing: its records are planned
again from the group's offsets. So several queries in one group — joining, leaving, killed,
restarted from their checkpoints — publish every record exactly once.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.types import TopicPartition
from pipeline.spark.commit_service import Outcome, Settled, planned_by_live_reader, request_commit
from pipeline.spark.offsets import BadOffset, StreamOffset, decode
from pipeline.spark.output import publish, recover, staging_dir

log = logging.getLogger(__name__)


def batch_offset(checkpoint: str | Path, batch_id: int) -> StreamOffset:
    """The groupshift source's end offset of `batch_id`, from Spark's offset log (its last lines are
    one offset per source of the query, in JSON)."""
    import json

    path = Path(checkpoint) / "offsets" / str(batch_id)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise BadOffset(
            f"cannot read batch {batch_id}'s offsets at {path}: {exc.strerror} — pass the query's "
            "checkpointLocation as the writer's checkpoint"
        ) from None
    found = []
    for line in lines[2:]:
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and "groupshift" in data:
            found.append(data)
    if len(found) != 1:
        raise BadOffset(
            f"batch {batch_id} at {path} has {len(found)} groupshift sources; the exactly-once writer "
            "takes a query reading exactly one groupshift stream"
        )
    return decode(found[0])


class ExactlyOnceWriter:
    """`foreachBatch` writer; see the module docstring. `transform`: DataFrame -> DataFrame."""

    def __init__(
        self,
        out: str | Path,
        checkpoint: str | Path,
        transform: Callable[[Any], Any] | None = None,
        on_batch: Callable[[int, StreamOffset, Settled], None] | None = None,
    ):
        self.out = Path(out)
        self.checkpoint = Path(checkpoint)
        self.transform = transform
        self.on_batch = on_batch

    def __call__(self, df: Any, batch_id: int) -> None:
        offset = batch_offset(self.checkpoint, batch_id)
        if not offset.ranges:
            return
        if not planned_by_live_reader(offset):
            log.info("batch %d: a replay of a batch planned by a reader that is gone; skipped", batch_id)
            self._report(batch_id, offset, Settled(Outcome.NOT_PLANNER))
            return
        for tp, (start, _) in offset.ranges.items():
            recover(self.out / tp.topic / f"partition={tp.partition}", start)
        staged = self._stage(df, offset)
        settled = request_commit(offset)
        if settled.outcome is not Outcome.UNKNOWN:
            for tp, path in staged.items():
                if settled.committed(tp):
                    publish(path)
                else:
                    shutil.rmtree(path, ignore_errors=True)
        log.info("batch %d: %d records, %s", batch_id, offset.records, settled.outcome.value)
        self._report(batch_id, offset, settled)

    def _report(self, batch_id: int, offset: StreamOffset, settled: Settled) -> None:
        if self.on_batch is not None:
            self.on_batch(batch_id, offset, settled)

    def _stage(self, df: Any, offset: StreamOffset) -> dict[TopicPartition, Path]:
        """Write the batch once, split by topic and partition, then give each range's files a
        staging directory of its own (one Spark job, whatever the number of ranges)."""
        if self.transform is not None:
            df = self.transform(df)
        # Under the query's own checkpoint: only this query writes there, so what a crash left is
        # removed here, before the write.
        batch_dir = self.checkpoint / "groupshift-staging"
        shutil.rmtree(batch_dir, ignore_errors=True)
        staged: dict[TopicPartition, Path] = {}
        try:
            df.write.partitionBy("topic", "partition").parquet(str(batch_dir))
            for tp, (start, end) in sorted(offset.ranges.items()):
                path = staging_dir(self.out, tp.topic, tp.partition, start, end)
                path.parent.mkdir(parents=True, exist_ok=True)
                written = batch_dir / f"topic={tp.topic}" / f"partition={tp.partition}"
                if written.is_dir():  # a transformation may have filtered a range to nothing
                    shutil.move(written, path)  # a rename, or a copy when out is another filesystem
                else:
                    path.mkdir()
                staged[tp] = path
        except BaseException:
            for path in staged.values():
                shutil.rmtree(path, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(batch_dir, ignore_errors=True)
        return staged


def write_exactly_once(
    stream: Any,
    out: str | Path,
    checkpoint: str | Path,
    *,
    transform: Callable[[Any], Any] | None = None,
    trigger: dict | None = None,
    query_name: str | None = None,
    on_batch: Callable[[int, StreamOffset, Settled], None] | None = None,
) -> Any:
    """Start `stream` (a `groupshift` DataFrame) into `out` exactly once; returns the query.
    `trigger`: `DataStreamWriter.trigger`'s keywords, e.g. `{"availableNow": True}`."""
    writer = stream.writeStream.foreachBatch(ExactlyOnceWriter(out, checkpoint, transform, on_batch))
    writer = writer.option("checkpointLocation", str(checkpoint))
    if trigger:
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)
    return writer.start()
