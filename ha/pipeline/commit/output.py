"""Exactly-once batch output: stage, then atomically rename into the batch's own directory.

Layout of a job's output directory::

    out/batch-00000/part-00000.snappy.parquet     committed batches, one directory each
    out/batch-00001/...
    out/_staging/batch-00002.<token>/...           work in progress (ignored by readers)
    out/_staging/.trash-<uuid>/...                 being deleted by clean_staging

Why a batch can never be duplicated or half-visible:

- A batch's rows go to one place only, ``batch-NNNNN``, named by its index in the plan. Doing
  the batch again (after a crash, or by a deposed leader that has not noticed yet) targets the
  same directory; readers list ``batch-*`` directories, so there is no second copy to find.
- The content is deterministic: rows are hash-partitioned into a fixed number of files and
  sorted inside each file, and Spark's Parquet writer puts no timestamp or random id in the
  bytes; file names are rewritten to ``part-NNNNN...`` without Spark's per-write UUID, and the
  one footer list whose order depends on the JVM is sorted (``parquet``). A redo, in this
  process or another, therefore produces the same bytes: whoever commits last changes nothing.
- The commit is a single ``rename(2)`` of a complete, fsynced directory. If the target already
  exists, identical content is simply dropped; different content (a pipeline that is not
  deterministic) is swapped in with ``renameat2(RENAME_EXCHANGE)``, still atomic, and logged.

Spark writes through Hadoop's file system; the rename here is POSIX, so outputs live on a local
or locally mounted file system (shared by every job manager host for real failover).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import hashlib
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ..._fs import fsync_dir, fsync_file
from ...errors import ConfigurationError
from .parquet import canonicalize_footer

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = (
    "STAGING",
    "batch_dir",
    "clean_staging",
    "commit_batch",
    "committed_batches",
    "deterministic_layout",
    "files_digest",
    "is_output_entry",
    "output_digest",
    "output_files",
    "read_output",
    "stage_batch",
    "write_batch",
)

log = logging.getLogger("ha.pipeline.commit")

STAGING = "_staging"
BATCH_RE = re.compile(r"^batch-(\d{5,})$")
_PART_RE = re.compile(r"^part-(\d+)")

Outcome = Literal["created", "identical", "replaced"]


def batch_dir(output: Path | str, index: int) -> Path:
    if index < 0:
        raise ValueError(f"batch index must not be negative: {index}")
    return Path(output) / f"batch-{index:05d}"


def is_output_entry(name: str) -> bool:
    return name == STAGING or BATCH_RE.match(name) is not None


def committed_batches(output: Path | str) -> list[int]:
    """Indexes of the committed batches, ascending."""
    root = Path(output)
    if not root.is_dir():
        return []
    found = []
    for entry in root.iterdir():
        m = BATCH_RE.match(entry.name)
        if m and entry.is_dir():
            found.append(int(m.group(1)))
    return sorted(found)


def deterministic_layout(
    df: DataFrame, files: int = 1, sort_by: Sequence[str] | None = None
) -> DataFrame:
    """``df`` with a fixed row-to-file assignment and row order, so its bytes are repeatable.

    ``sort_by`` should be a unique key (default: every orderable column); rows equal on it may
    come in either order, which only matters if they differ elsewhere.
    """
    from pyspark.sql.types import MapType

    if files < 1:
        raise ConfigurationError(f"files per batch must be at least 1, got {files}")
    if sort_by is None:
        sort_by = [f.name for f in df.schema.fields if not isinstance(f.dataType, MapType)]
    else:
        missing = [c for c in sort_by if c not in df.columns]
        if missing:
            raise ConfigurationError(f"sort_by names columns the output lacks: {missing}")
    if not sort_by:
        raise ConfigurationError("no orderable column to sort batch output by")
    if files == 1:
        spread = df.repartition(1)
    else:
        spread = df.repartition(files, *sort_by)
    return spread.sortWithinPartitions(*sort_by)


def stage_batch(
    df: DataFrame,
    output: Path | str,
    index: int,
    *,
    files: int = 1,
    sort_by: Sequence[str] | None = None,
    token: str | None = None,
) -> Path:
    """Write ``df`` (the Spark work, the slow part) to a fresh staging directory; return it."""
    staging_root = Path(output) / STAGING
    staging_root.mkdir(parents=True, exist_ok=True)
    staging = staging_root / f"batch-{index:05d}.{token or uuid.uuid4().hex}"
    deterministic_layout(df, files, sort_by).write.mode("errorifexists").parquet(str(staging))
    _normalize(staging)
    return staging


def _normalize(staging: Path) -> None:
    """Drop Spark's markers and checksums, rename parts without the write's UUID, fsync."""
    parts: list[tuple[int, Path]] = []
    for entry in staging.iterdir():
        if entry.name.startswith((".", "_")):
            entry.unlink()  # _SUCCESS, .part-*.crc: not part of the data
            continue
        m = _PART_RE.match(entry.name)
        if m is None:
            raise RuntimeError(f"unexpected file in Spark output: {entry}")
        parts.append((int(m.group(1)), entry))
    parts.sort()
    for n, (_, entry) in enumerate(parts):
        suffix = "".join(entry.suffixes[-2:]) if entry.name.endswith(".parquet") else ""
        target = staging / f"part-{n:05d}{suffix or '.parquet'}"
        entry.rename(target)
        if target.name.endswith(".parquet"):
            canonicalize_footer(target)  # the one part of the bytes that varies by JVM
        fsync_file(target)
    fsync_dir(staging)


def commit_batch(staging: Path, output: Path | str, index: int) -> Outcome:
    """Atomically make ``staging`` the content of batch ``index``. Fast: no Spark."""
    target = batch_dir(output, index)
    try:
        os.rename(staging, target)  # atomic; refused when target is a non-empty directory
        fsync_dir(target.parent)
        return "created"
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    if _same_content(staging, target):
        shutil.rmtree(staging, ignore_errors=True)
        return "identical"
    log.warning(
        "batch %d of %s was redone with different content: the pipeline is not deterministic; "
        "keeping the newest",
        index,
        output,
    )
    _exchange(staging, target)
    fsync_dir(target.parent)
    shutil.rmtree(staging, ignore_errors=True)  # now holds the old content
    return "replaced"


def write_batch(
    df: DataFrame,
    output: Path | str,
    index: int,
    *,
    files: int = 1,
    sort_by: Sequence[str] | None = None,
) -> Outcome:
    """Stage and commit one batch."""
    return commit_batch(stage_batch(df, output, index, files=files, sort_by=sort_by), output, index)


_TRASH = ".trash-"


def clean_staging(output: Path | str) -> int:
    """Remove leftover staging directories (a new leader does this before resuming).

    Each is first renamed to a unique trash name beside it (atomic, same file system), and only
    the trash is deleted: a deposed leader's late ``commit_batch`` of the same directory then
    either renamed it into its batch before (the batch is whole; we skip it) or fails with
    ENOENT (nothing committed, nothing lost). Deleting in place could unlink files inside what
    the rename had just made a committed batch.
    """
    root = Path(output) / STAGING
    if not root.is_dir():
        return 0
    removed = 0
    for entry in root.iterdir():
        if entry.name.startswith(_TRASH):
            trash = entry  # an earlier cleanup stopped midway: no one commits from trash
        else:
            trash = root / f"{_TRASH}{uuid.uuid4().hex}"
            try:
                os.rename(entry, trash)
            except FileNotFoundError:
                continue  # committed (or cleaned) meanwhile
            removed += 1
        shutil.rmtree(trash, ignore_errors=True)
    return removed


def output_files(output: Path | str) -> list[Path]:
    """Every data file of the committed batches, in batch then file order."""
    files: list[Path] = []
    for index in committed_batches(output):
        d = batch_dir(output, index)
        files.extend(sorted(p for p in d.iterdir() if p.is_file()))
    return files


def output_digest(output: Path | str) -> str:
    """SHA-256 over the committed batches' names and bytes: equal digests, equal outputs."""
    return files_digest(Path(output), output_files(output))


def files_digest(root: Path, files: Iterable[Path]) -> str:
    """SHA-256 over ``files``' names (relative to ``root``) and bytes, in the order given."""
    h = hashlib.sha256()
    for path in files:
        h.update(str(path.relative_to(root)).encode() + b"\0")
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


def read_output(
    spark: SparkSession, output: Path | str, order_by: Sequence[str] | None = None
) -> DataFrame:
    """The committed output in a canonical order (``order_by``, default every column)."""
    dirs = [str(batch_dir(output, i)) for i in committed_batches(output)]
    if not dirs:
        raise FileNotFoundError(f"no committed batch under {output}")
    df = spark.read.parquet(*dirs)
    from pyspark.sql.types import MapType

    keys = (
        list(order_by)
        if order_by
        else [f.name for f in df.schema.fields if not isinstance(f.dataType, MapType)]
    )
    return df.orderBy(*keys)


# --- file system details -------------------------------------------------------------------


def _same_content(a: Path, b: Path) -> bool:
    names_a = sorted(p.name for p in a.iterdir())
    names_b = sorted(p.name for p in b.iterdir())
    if names_a != names_b:
        return False
    for name in names_a:
        pa, pb = a / name, b / name
        if pa.stat().st_size != pb.stat().st_size or pa.read_bytes() != pb.read_bytes():
            return False
    return True


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> None:
    """Swap two paths atomically (Linux ``renameat2``); elsewhere, move aside then rename."""
    libc_name = ctypes.util.find_library("c")
    renameat2 = (
        getattr(ctypes.CDLL(libc_name, use_errno=True), "renameat2", None) if libc_name else None
    )
    if renameat2 is not None:
        rc = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
        if rc == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(err, os.strerror(err), str(b))
    # Not atomic: between the two renames the batch is briefly missing (never duplicated).
    aside = a.with_name(a.name + ".old")
    os.rename(b, aside)
    os.rename(a, b)
    os.rename(aside, a)
