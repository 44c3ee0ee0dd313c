"""The Spark driver's class-data-sharing archive: found only when written whole for this JVM and
these jars (`pipeline.spark.cds`). The archive itself is written by `scripts/setup.sh`; the
driver sessions of the Spark tests start with it."""

from __future__ import annotations

import os

import pytest

from pipeline.spark import cds


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GROUPSHIFT_CACHE", str(tmp_path))
    assert cds._key() is not None, "the tests need Java and PySpark"
    return tmp_path / "spark-cds"


def test_no_archive_no_options(cache):
    assert cds.archive_path() is None
    assert cds.java_options() == []


def test_an_archive_written_whole_is_mapped(cache):
    cache.mkdir()
    path = cache / f"{cds._key()}-1000.jsa"
    path.write_bytes(b"\0" * 1000)
    assert cds.archive_path() == path
    assert cds.java_options()[0] == f"-XX:SharedArchiveFile={path}"


@pytest.mark.parametrize("size", [999, 1001])
def test_an_archive_of_another_size_than_its_name_says_is_never_mapped(cache, size):
    """A file cut short would crash the JVM that maps it: it is not offered."""
    cache.mkdir()
    (cache / f"{cds._key()}-1000.jsa").write_bytes(b"\0" * size)
    (cache / f"{cds._key()}-x.jsa").write_bytes(b"\0")  # a name without a size
    assert cds.archive_path() is None
    assert cds.java_options() == []


def test_an_archive_of_other_jars_is_not_this_one(cache):
    cache.mkdir()
    (cache / "driver-0.0.0-0123456789abcdef-10.jsa").write_bytes(b"\0" * 10)
    assert cds.archive_path() is None


def test_the_key_changes_with_a_jar(cache, monkeypatch, tmp_path):
    """A jar rewritten (a reinstall) makes the JVM refuse the archive: it gets another name."""
    import pyspark

    before = cds._key()
    jars = tmp_path / "pyspark" / "jars"
    jars.mkdir(parents=True)
    (jars / "a.jar").write_bytes(b"a")
    monkeypatch.setattr(pyspark, "__file__", str(tmp_path / "pyspark" / "__init__.py"))
    one = cds._key()
    (jars / "a.jar").write_bytes(b"ab")
    assert one != before and cds._key() != one


def test_prune_keeps_the_newest(cache):
    cache.mkdir()
    paths = []
    for i in range(cds.KEPT + 2):
        p = cache / f"driver-0.0.0-{i:016x}-1.jsa"
        p.write_bytes(b"\0")
        os.utime(p, (1000 + i, 1000 + i))
        paths.append(p)
    cds._prune(paths[-1])
    assert [p.exists() for p in paths] == [False, False] + [True] * cds.KEPT
