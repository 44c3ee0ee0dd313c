"""A class-data-sharing archive for the Spark driver's JVM: the same JVM, started in a third of the CPU.

A Spark driver loads some 12,000 classes from PySpark's jars at start-up; the JVM parses and
verifies each one, every time. An application class-data-sharing archive (JDK 17's dynamic
archive: `-XX:ArchiveClassesAtExit` writes it, `-XX:SharedArchiveFile` maps it) holds them
already parsed and verified. Measured on the 2-core reference machine, a driver's start plus a
first query took 8.5 s of CPU without the archive and 3.7 s with it.

* `build()` (run by `scripts/setup.sh`, or `python -m pipeline.spark.cds`) writes the archive once:
  a driver started with `-XX:ArchiveClassesAtExit` runs a warm-up (`cds_warm_up`: a batch query,
  Parquet out and in, a Python data source's stream into `foreachBatch`, as `groupshift consume`
  does) and stops;
  the archive is written to a temporary name and renamed into place with its size in its name,
  so a reader never maps half of one.
* `java_options()` is what `spark_session()` adds to the driver's options: the archive when one
  exists for this JVM and these jars, else nothing. The archive's name is a digest of the `java`
  binary and PySpark's jars (paths, sizes, times), so an upgrade of either simply finds no archive
  (and runs as fast as without one) until `build()` runs again; nothing at run time ever writes it.

The archive lives in `$GROUPSHIFT_CACHE` (default `~/.cache/groupshift`), `spark-cds/`, about 160 MB.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUILD_TIMEOUT_S = 600.0
KEPT = 3  # archives kept for other JVM/jar combinations (an upgrade leaves the old one behind)


def cache_dir() -> Path:
    return Path(os.environ.get("GROUPSHIFT_CACHE") or Path.home() / ".cache" / "groupshift") / "spark-cds"


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else None
    if found is None or not found.is_file():
        which = shutil.which("java")
        found = Path(which) if which else None
    return found.resolve() if found else None


def _key() -> str | None:
    """The archive's name without its size: PySpark's version and a digest of the `java` binary and
    of every jar's path, size and time — what the JVM checks before it maps an archive (a jar
    rewritten by a reinstall makes it refuse the archive, so the name must change with it).
    None without Java or PySpark."""
    java = _java()
    try:
        import pyspark
    except ImportError:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    if java is None or not jars.is_dir():
        return None
    digest = hashlib.sha256()
    for f in [java, *sorted(jars.iterdir())]:
        st = f.stat()
        digest.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return f"driver-{pyspark.__version__}-{digest.hexdigest()[:16]}"


def archive_path() -> Path | None:
    """The archive for this JVM and these jars, when one was written whole; else None.

    Its size is in its name and checked here: the JVM maps the file, and one cut short (a full
    disk, a copy interrupted) would crash it rather than be refused."""
    key = _key()
    if key is None:
        return None
    for path in cache_dir().glob(f"{key}-*.jsa"):
        try:
            if path.stat().st_size == int(path.stem.rsplit("-", 1)[1]):
                return path
        except (OSError, ValueError):
            continue
    return None


def java_options() -> list[str]:
    """The driver's JVM options that map the archive, when there is one for this JVM and these jars."""
    path = archive_path()
    if path is None:
        return []
    # -Xlog: an archive the JVM refuses to map (it checks the JVM build and the jars) must not
    # print on the command's stderr: the driver then starts as it would without one
    return [f"-XX:SharedArchiveFile={path}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def build(force: bool = False) -> Path | None:
    """Write the archive for this JVM and these jars, unless it exists; its path (None without Java).

    Raises RuntimeError (one line, naming the log) when the warm-up driver fails."""
    key = _key()
    if key is None:
        return None
    found = archive_path()
    if found is not None and not force:
        return found
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{key}.{os.getpid()}.tmp"
    log = directory / f"{key}.log"
    with tempfile.TemporaryDirectory(prefix="groupshift-cds-") as work, open(log, "wb") as out:
        done = subprocess.run(
            [sys.executable, "-m", "pipeline.spark.cds_warm_up", str(tmp), work],
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=BUILD_TIMEOUT_S,
            cwd=Path(__file__).resolve().parents[2],
        )
    if done.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"the Spark class-data-sharing archive was not written; see {log}")
    path = directory / f"{key}-{tmp.stat().st_size}.jsa"
    os.replace(tmp, path)
    if found is not None and found != path:
        found.unlink(missing_ok=True)
    _prune(path)
    return path


def _prune(keep: Path) -> None:
    """Drop all but the newest KEPT archives (others belong to JVMs or jars no longer installed)."""
    archives = sorted(keep.parent.glob("driver-*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[KEPT:]:
        if old != keep:
            old.unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    start = time.monotonic()
    try:
        path = build(force="--force" in argv)
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if path is None:
        print("no Java or no PySpark: no Spark class-data-sharing archive to build", file=sys.stderr)
        return 0
    print(f"{path} ({path.stat().st_size >> 20} MB, {time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
