"""Exactly-once micro-batches: a fenced commit record, then the rename that shows the batch.

A streaming job's micro-batch ``N`` goes through three steps, all in the Python driver:

1. stage: Spark writes the batch's rows to ``out/_staging/batch-N.<token>`` (``commit``);
2. record: one fenced transaction (``stores.Writer``) checks this active's epoch (the lease's
   fence op), checks that batch ``N-1`` has its record, and creates or overwrites the record
   ``pipeline/streams/<job>/batch-N`` = {batch, epoch, identity, sha256 of the staged files};
3. show: the staged directory is renamed to ``out/batch-N`` (``commit.commit_batch``).

Why nothing lands twice or from a deposed driver:

- A driver deposed before step 2 (paused, cut off, or its process killed while its Spark JVM
  runs on) is refused at the fence: the transaction changes nothing, ``Fenced`` is raised and
  the batch is never renamed into the output. The JVM writes only to staging directories;
  only the Python driver, after its record, renames one into view.
- A driver deposed between steps 2 and 3 still holds a recorded batch: its late rename shows
  the very bytes the record names, which is also what the new active's redo of the batch
  writes (Spark logs a batch's input before running it, and the output is deterministic):
  the rename finds the same content and drops its copy (``commit_batch``: "identical").
- Spark's own commit log says a batch is done only after ``foreachBatch`` returned, i.e.
  after step 3; a new active therefore redoes at most the batch in flight, and its record
  replaces the old one with its own epoch.

The log compacts, so that it holds at most ``window + 1`` records however old the stream is
(a Kubernetes root is one ConfigMap of 1 MiB, full after about 5,000 records): the
transaction that records batch ``N`` also deletes the records older than ``N - window``
(``COMPACT`` at most at a time, so a lowered window or an old full log shrinks over a few
batches). It is the same fenced transaction, so a deposed driver deletes nothing either. What
a new active reads stays true: its position is the newest record's batch plus one
(``count_commits``: one listing of at most ``window + 1`` names, whatever the stream's age),
and the batch it redoes is the newest or the next, whose predecessor's record is kept
(window >= 1). A batch older than every record kept (a Spark checkpoint restored from long
ago) was shown: a later batch has a record, and Spark starts a batch only once the one before
returned from ``foreachBatch``, after its rename. Its redo records nothing; its rename, behind
a transaction of the fence alone, finds the same bytes in view, as it did before compaction.
A finished job's log stays with its result and goes when the result's retention ends
(``remove_commits``, called by ``term``).
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread

from ...drivers.base import Check, Create, Delete, Driver, Op, SetData
from ...errors import ConfigurationError, CorruptData, NoNode, NotEmpty, TransactionFailed
from ...stores import Writer
from ..layout import JobLayout
from .output import Outcome, commit_batch, files_digest

__all__ = (
    "COMPACT",
    "WINDOW",
    "CommitRecord",
    "commit_micro_batch",
    "count_commits",
    "read_commits",
    "record_ids",
    "remove_commits",
    "staged_digest",
)

WINDOW = 100  # records kept besides the newest, for audit (Spark keeps 100 batches' logs too)
COMPACT = 16  # records deleted at most by one transaction (etcd allows 128 operations)
_NAME = re.compile(r"batch-(\d{5,})")  # JobLayout.stream_commit's names


@dataclass(frozen=True, slots=True)
class CommitRecord:
    """What the commit record of one micro-batch says."""

    batch_id: int
    epoch: int
    identity: str
    sha256: str

    def to_bytes(self) -> bytes:
        doc = {"batch": self.batch_id, "epoch": self.epoch, "identity": self.identity}
        return json.dumps({**doc, "sha256": self.sha256}, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, where: str, data: bytes) -> CommitRecord:
        try:
            doc = json.loads(data)
            return cls(int(doc["batch"]), int(doc["epoch"]), str(doc["identity"]), doc["sha256"])
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptData(where, f"not a micro-batch commit record: {exc}") from exc


def staged_digest(staging: Path) -> str:
    """SHA-256 of a staged batch's files (names and bytes)."""
    return files_digest(staging, sorted(p for p in staging.iterdir() if p.is_file()))


async def record_ids(driver: Driver, layout: JobLayout, job_id: str) -> list[int]:
    """The batch ids that have a record, ascending: one listing, no record read. Names that
    are not records are left out (they are not ours)."""
    try:
        names = await driver.children(layout.stream_commits(job_id))
    except NoNode:
        return []
    return sorted(int(m.group(1)) for m in map(_NAME.fullmatch, names) if m)


async def count_commits(driver: Driver, layout: JobLayout, job_id: str) -> int:
    """How many micro-batches the stream job has committed: the newest record's batch plus
    one. One listing of a compacted log, no record read, so what a takeover pays does not grow
    with the stream's age (a day at a batch a second: 86,400 batches)."""
    ids = await record_ids(driver, layout, job_id)
    return ids[-1] + 1 if ids else 0


async def commit_micro_batch(
    writer: Writer,
    layout: JobLayout,
    job_id: str,
    batch_id: int,
    staging: Path,
    output: str,
    *,
    window: int = WINDOW,
) -> Outcome:
    """Record micro-batch ``batch_id`` under the writer's lease, then rename it into view;
    the same transaction drops the records older than ``window`` batches before the newest.

    Raises ``Fenced`` (nothing recorded, nothing shown) once a newer active exists, and
    ``TransactionFailed`` if batch ``batch_id - 1`` has no record or the record changed under
    us; either way the staged directory is removed. Blocks for the backend's round trips and
    the rename.
    """
    if window < 1:
        raise ConfigurationError(f"the commit log's window must be at least 1, got {window}")
    lease = writer.lease
    digest = await anyio.to_thread.run_sync(staged_digest, staging)
    identity = lease.identity.decode(errors="replace")
    record = CommitRecord(batch_id, lease.epoch, identity, digest).to_bytes()
    try:
        await writer.commit(await _record_ops(writer, layout, job_id, batch_id, record, window))
    except BaseException:
        # Never to be shown: the staged copy is this attempt's alone (its token); drop it.
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return await anyio.to_thread.run_sync(commit_batch, staging, output, batch_id)


async def _record_ops(
    writer: Writer, layout: JobLayout, job_id: str, batch_id: int, record: bytes, window: int
) -> list[Op]:
    """The ops that record ``batch_id`` (after the fence, which ``writer`` adds)."""
    ids = await record_ids(writer.driver, layout, job_id)
    if ids and batch_id < ids[0]:
        return []  # compacted away long ago, and shown: the fence alone, then the rename
    path = layout.stream_commit(job_id, batch_id)
    ops: list[Op] = []
    if batch_id > 0 and not (ids and batch_id - 1 < ids[0]):
        ops.append(Check(layout.stream_commit(job_id, batch_id - 1)))  # no gap
    stat = await writer.driver.exists(path) if batch_id in ids else None
    if stat is None:
        ops += [*await writer.parent_ops(path), Create(path, record)]
    else:  # redone after a failover: the record takes this epoch
        ops.append(SetData(path, record, stat.version))
    newest = max(batch_id, ids[-1]) if ids else batch_id
    stale = [i for i in ids if i < newest - window][:COMPACT]
    return ops + [Delete(layout.stream_commit(job_id, i)) for i in stale]


async def read_commits(driver: Driver, layout: JobLayout, job_id: str) -> list[CommitRecord]:
    """The job's commit records kept (the newest and its window), by batch id (none for a job
    that has not committed yet)."""
    found = []
    for batch_id in await record_ids(driver, layout, job_id):
        where = layout.stream_commit(job_id, batch_id)
        try:
            data, _ = await driver.get(where)
        except NoNode:
            continue  # compacted meanwhile
        found.append(CommitRecord.from_bytes(where, data))
    return found


async def remove_commits(writer: Writer, layout: JobLayout, job_id: str) -> None:
    """Delete the job's commit log (fenced, ``COMPACT`` records a transaction, then its node);
    for a finished job whose result goes. Idempotent."""
    folder = layout.stream_commits(job_id)
    for attempt in range(3):
        try:
            names = await writer.driver.children(folder)
        except NoNode:
            return
        paths = [f"{folder}/{name}" for name in names]
        try:
            for start in range(0, len(paths), COMPACT):
                await writer.commit([Delete(p) for p in paths[start : start + COMPACT]])
            await writer.commit([Delete(folder)])
            return
        except TransactionFailed as exc:
            # gone meanwhile (a cleanup of our own before a failover), or a record came back
            if attempt == 2 or not isinstance(exc.cause, NoNode | NotEmpty):
                raise exc.cause from exc
