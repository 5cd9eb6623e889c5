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
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread

from ..drivers.base import Check, Create, Driver, Op, SetData
from ..errors import CorruptData, NoNode
from ..stores import Writer
from .commit import Outcome, commit_batch, files_digest
from .jobs import children
from .layout import JobLayout

__all__ = ("CommitRecord", "commit_micro_batch", "read_commits", "staged_digest")


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


async def commit_micro_batch(
    writer: Writer, layout: JobLayout, job_id: str, batch_id: int, staging: Path, output: str
) -> Outcome:
    """Record micro-batch ``batch_id`` under the writer's lease, then rename it into view.

    Raises ``Fenced`` (nothing recorded, nothing shown) once a newer active exists, and
    ``TransactionFailed`` if batch ``batch_id - 1`` has no record or the record changed under
    us; either way the staged directory is removed. Blocks for the backend's round trip and
    the rename.
    """
    lease = writer.lease
    digest = await anyio.to_thread.run_sync(staged_digest, staging)
    identity = lease.identity.decode(errors="replace")
    path = layout.stream_commit(job_id, batch_id)
    record = CommitRecord(batch_id, lease.epoch, identity, digest).to_bytes()
    ops: list[Op] = []
    if batch_id > 0:
        ops.append(Check(layout.stream_commit(job_id, batch_id - 1)))
    stat = await writer.driver.exists(path)
    if stat is None:
        ops += [*await writer.parent_ops(path), Create(path, record)]
    else:  # redone after a failover: the record takes this epoch
        ops.append(SetData(path, record, stat.version))
    try:
        await writer.commit(ops)
    except BaseException:
        # Never to be shown: the staged copy is this attempt's alone (its token); drop it.
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return await anyio.to_thread.run_sync(commit_batch, staging, output, batch_id)


async def read_commits(driver: Driver, layout: JobLayout, job_id: str) -> list[CommitRecord]:
    """The job's commit records, by batch id (none for a job that has not committed yet)."""
    found = []
    for name in sorted(await children(driver, layout.stream_commits(job_id))):
        where = f"{layout.stream_commits(job_id)}/{name}"
        try:
            data, _ = await driver.get(where)
        except NoNode:
            continue
        found.append(CommitRecord.from_bytes(where, data))
    return found
