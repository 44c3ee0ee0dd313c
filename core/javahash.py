"""Java's String.hashCode and ordering, which Kafka uses for shards and assignor tie-breaks."""

from __future__ import annotations


def java_string_hash(s: str) -> int:
    """`s.hashCode()` as the JVM computes it: 31-polynomial over UTF-16 code units, signed 32-bit."""
    h = 0
    for unit in _utf16_units(s):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def java_abs(i: int) -> int:
    """`Math.abs` on a Java int: `abs(Integer.MIN_VALUE)` stays negative; Kafka's `Utils.abs` maps it to 0."""
    return 0 if i == -0x8000_0000 else abs(i)


def java_sort_key(s: str) -> tuple[int, ...]:
    """Key that orders strings as Java's `String.compareTo` does (by UTF-16 code unit)."""
    return tuple(_utf16_units(s))


def _utf16_units(s: str) -> list[int]:
    if s.isascii():
        return list(s.encode("ascii"))
    data = s.encode("utf-16-be")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]
