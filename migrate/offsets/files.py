"""Offset files, pure: export in three formats, and the strict parser behind `offsets import`.

Formats (one partition per line, `\\n` endings, no header):

* `csv`: `topic,partition,offset`, as `kafka-consumer-groups --reset-offsets --export` prints it
  for one group; import also takes its several-groups shape `group,topic,partition,offset`;
* `zk-export`: ExportZkOffsets' `/consumers/<group>/offsets/<topic>/<partition>:<offset>`;
* `json` (export only): `{"group", "offsets": [{"topic", "partition", "offset"}]}`.

The parser refuses the whole file on the first bad line (naming it), so an import is all or
nothing: wrong column counts, non-numeric or negative values, duplicates, a byte order mark,
CRLF line endings, blank lines in the middle, another group's lines.
"""

from __future__ import annotations

import csv
import io
import json

from core.errors import GroupshiftError
from core.types import TopicPartition

FORMATS = ("csv", "json", "zk-export")
MAX_FILE_BYTES = 64 << 20
MAX_LINES = 200_000


class BadOffsetsFile(GroupshiftError):
    """The offsets file is malformed; nothing was written."""


def export(group: str, offsets: dict[TopicPartition, int], fmt: str) -> str:
    tps = sorted(offsets)
    if fmt == "csv":
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        for tp in tps:
            w.writerow([tp.topic, tp.partition, offsets[tp]])
        return out.getvalue()
    if fmt == "zk-export":
        return "".join(f"/consumers/{group}/offsets/{tp.topic}/{tp.partition}:{offsets[tp]}\n" for tp in tps)
    if fmt == "json":
        body = [{"topic": tp.topic, "partition": tp.partition, "offset": offsets[tp]} for tp in tps]
        return json.dumps({"group": group, "offsets": body}) + "\n"
    raise GroupshiftError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")


def parse(data: bytes, group: str, source: str = "file") -> dict[TopicPartition, int]:
    """Every line of a csv or zk-export offsets file for `group`; raises `BadOffsetsFile`."""
    if len(data) > MAX_FILE_BYTES:
        raise BadOffsetsFile(f"{source} is larger than {MAX_FILE_BYTES >> 20} MB")
    if data.startswith(b"\xef\xbb\xbf"):
        raise BadOffsetsFile(f"{source} starts with a UTF-8 byte order mark; save it without one")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadOffsetsFile(f"{source} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    lines = text.split("\n")
    while lines and lines[-1] == "":
        lines.pop()  # trailing newline(s)
    if not lines:
        raise BadOffsetsFile(f"{source} has no offsets")
    if len(lines) > MAX_LINES:
        raise BadOffsetsFile(f"{source} has {len(lines)} lines; at most {MAX_LINES} partitions per import")
    out: dict[TopicPartition, int] = {}
    zk_style = lines[0].startswith("/")
    columns = None
    for n, line in enumerate(lines, 1):
        where = f"{source} line {n}"
        if "\r" in line:
            raise BadOffsetsFile(f"{where} has a carriage return (CRLF line endings?); use \\n line endings")
        if not line.strip():
            raise BadOffsetsFile(f"{where} is empty; remove blank lines")
        if zk_style:
            tp, offset = _zk_line(line, group, where)
        else:
            fields = _csv_fields(line, where)
            if columns is None:
                columns = len(fields)
            if len(fields) != columns or len(fields) not in (3, 4):
                raise BadOffsetsFile(
                    f"{where} has {len(fields)} columns; expected topic,partition,offset "
                    "(or group,topic,partition,offset) on every line"
                )
            if len(fields) == 4:
                if fields[0] != group:
                    raise BadOffsetsFile(f"{where} is for group {fields[0]!r}, not {group!r}")
                fields = fields[1:]
            tp = TopicPartition(_topic(fields[0], where), _number(fields[1], "partition", where))
            offset = _number(fields[2], "offset", where)
        if tp in out:
            raise BadOffsetsFile(f"{where} repeats partition {tp.topic}:{tp.partition}")
        out[tp] = offset
    return out


def _csv_fields(line: str, where: str) -> list[str]:
    try:
        rows = list(csv.reader([line], strict=True))
    except csv.Error as exc:
        raise BadOffsetsFile(f"{where} is not valid CSV ({exc})") from None
    return rows[0] if rows else []


def _zk_line(line: str, group: str, where: str) -> tuple[TopicPartition, int]:
    path, colon, value = line.rpartition(":")
    parts = path.split("/")
    if not colon or len(parts) != 6 or parts[0] != "" or parts[1] != "consumers" or parts[3] != "offsets":
        raise BadOffsetsFile(f"{where} is not /consumers/<group>/offsets/<topic>/<partition>:<offset>")
    if parts[2] != group:
        raise BadOffsetsFile(f"{where} is for group {parts[2]!r}, not {group!r}")
    tp = TopicPartition(_topic(parts[4], where), _number(parts[5], "partition", where))
    return tp, _number(value, "offset", where)


def _topic(name: str, where: str) -> str:
    if not name or name.strip() != name or "/" in name or "\0" in name:
        raise BadOffsetsFile(f"{where}: {name!r} is not a topic name")
    return name


def _number(text: str, what: str, where: str) -> int:
    if not text.isascii() or not text.isdigit():
        if text.startswith("-") and text[1:].isdigit():
            raise BadOffsetsFile(f"{where}: {what} {text} is negative")
        raise BadOffsetsFile(f"{where}: {what} {text!r} is not a number")
    value = int(text)
    if value >= 2**63:
        raise BadOffsetsFile(f"{where}: {what} {text} is too large")
    return value
