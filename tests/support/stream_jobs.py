"""A streaming job through failovers of real job manager processes: the disruptions and the
checks that the failover tests share (local[2] in ``tests/pipeline/test_streaming_failover.py``,
a standalone cluster in ``tests/pipeline/test_standalone.py``).

The verdicts come from outside the job managers: the commit records in the backend against the
batch directories on disk, the deposed driver's own report that the backend refused its late
batch (``batch_rejected``), and whether a killed driver's JVM outlived it (``/proc``).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio

from ha.drivers import connect
from ha.pipeline.commit import STAGING, batch_dir, committed_batches
from ha.pipeline.commit.stream_commit import CommitRecord, read_commits, staged_digest
from ha.pipeline.layout import JobLayout
from ha.pipeline.local import Event, LocalJobCluster
from tests.support.processes import descendants, java_under

__all__ = (
    "Killed",
    "Paused",
    "check_rejected",
    "check_visible",
    "jvm_of",
    "kill_after_a_commit",
    "kill_the_jvm",
    "of_job",
    "pause_mid_batch",
    "pause_the_jvm",
    "read_records",
    "reference_run",
)


def of_job(
    job: str, who: str | None = None, after: float = 0.0, not_by: str | None = None
) -> Callable[[Event], bool]:
    """Events of ``job``: by ``who`` (or anyone but ``not_by``), later than ``after``."""

    def match(e: Event) -> bool:
        return (
            e.fields.get("job") == job
            and (who is None or e.identity == who)
            and (not_by is None or e.identity != not_by)
            and e.t > after
        )

    return match


async def read_records(cluster: LocalJobCluster, job: str) -> list[CommitRecord]:
    async with connect(cluster.url) as driver:
        return await read_commits(driver, JobLayout(cluster.cluster_id), job)


def jvm_of(cluster: LocalJobCluster, identity: str) -> int:
    """The Spark JVM of a job manager process (its child)."""
    [jvm] = java_under(cluster.workers[identity].process.pid)
    return jvm


@dataclass(frozen=True, slots=True)
class Killed:
    victim: str
    killed_at: float
    jvms: list[int]  # the processes under the victim when it was killed
    resumed: Event  # the first batch_started after the kill


async def kill_after_a_commit(cluster: LocalJobCluster, job: str) -> Killed:
    """SIGKILL the active Python driver once it committed a micro-batch of ``job``; return when
    another job manager has started a micro-batch."""
    victim = cluster.active()
    assert victim is not None
    with anyio.fail_after(120):
        await cluster.wait_event("batch_committed", of_job(job, victim))
    jvms = descendants(cluster.workers[victim].process.pid)
    assert jvms  # its Spark JVM
    killed_at = cluster.kill(victim)
    with anyio.fail_after(60):
        resumed = await cluster.wait_event("batch_started", of_job(job, after=killed_at))
    return Killed(victim, killed_at, jvms, resumed)


@dataclass(frozen=True, slots=True)
class Paused:
    victim: str
    batch: int  # the micro-batch it was in when stopped
    epoch: int  # its epoch then
    taken: Event  # the first batch another job manager committed meanwhile
    rejected: Event  # the victim's own report of its late batch, once continued


async def pause_mid_batch(
    cluster: LocalJobCluster, job: str, victim: str | None = None, *, takeover: float = 60.0
) -> Paused:
    """SIGSTOP the active in the middle of a micro-batch of ``job`` (after one it committed)
    and SIGCONT it once another job manager committed one; return when the backend has
    refused its late batch. The job's pipeline must sleep before it writes (``delay_seconds``)
    for the stop to land inside a batch. ``victim``: the active by default; ``takeover``: how
    long a successor may take to commit (longer when its SparkSession is still cold)."""
    victim = victim or cluster.active()
    assert victim is not None
    with anyio.fail_after(60):
        done = await cluster.wait_event("batch_committed", of_job(job, victim))
        started = await cluster.wait_event("batch_started", of_job(job, victim, after=done.t))
    stopped_at = cluster.signal(victim, signal.SIGSTOP)
    with anyio.fail_after(takeover):
        taken = await cluster.wait_event(
            "batch_committed", of_job(job, after=stopped_at, not_by=victim)
        )
    cluster.signal(victim, signal.SIGCONT)
    with anyio.fail_after(60):
        rejected = await cluster.wait_event("batch_rejected", of_job(job, victim))
    return Paused(victim, started.fields["batch"], started.fields["epoch"], taken, rejected)


def check_rejected(paused: Paused, records: list[CommitRecord]) -> None:
    """The deposed driver's late batch was refused by the backend and its epoch never recorded
    for that batch."""
    rejected = paused.rejected
    assert rejected.fields["batch"] == paused.batch and rejected.fields["epoch"] == paused.epoch
    assert "epoch" in rejected.fields["error"] and paused.taken.fields["epoch"] > paused.epoch
    assert records[paused.batch].epoch > paused.epoch


async def kill_the_jvm(cluster: LocalJobCluster, job: str) -> tuple[str, Event]:
    """SIGKILL the active's Spark JVM alone once it committed a micro-batch of ``job``: it
    must leave the election (its process exits) and another job manager commit the next."""
    victim = cluster.active()
    assert victim is not None
    with anyio.fail_after(120):
        await cluster.wait_event("batch_committed", of_job(job, victim))
    killed_at = time.time()
    os.kill(jvm_of(cluster, victim), signal.SIGKILL)
    with anyio.fail_after(60):
        await cluster.wait_event("spark_lost", of_job(job, victim))
        await cluster.workers[victim].exited.wait()
        taken = await cluster.wait_event(
            "batch_committed", of_job(job, after=killed_at, not_by=victim)
        )
    return victim, taken


async def pause_the_jvm(cluster: LocalJobCluster, holder: str, seconds: float) -> None:
    """SIGSTOP the active's Spark JVM alone for ``seconds`` (past the session timeout), then
    SIGCONT it: its Python driver keeps the lease, so no one else acts meanwhile, and nothing
    is committed until the JVM continues."""
    jvm = jvm_of(cluster, holder)
    os.kill(jvm, signal.SIGSTOP)
    paused_at = len(cluster.events)
    await anyio.sleep(seconds)
    during = cluster.events[paused_at:]
    os.kill(jvm, signal.SIGCONT)
    assert [e for e in during if e.name in ("active", "batch_committed")] == []
    assert cluster.active() == holder


async def check_visible(cluster: LocalJobCluster, job: str, out: Path, batches: int) -> None:
    """Batches in view are exactly the recorded ones, with the recorded bytes, in epoch order."""
    records = await read_records(cluster, job)
    assert [r.batch_id for r in records] == committed_batches(out) == list(range(batches))
    assert [r.epoch for r in records] == sorted(r.epoch for r in records)
    for r in records:
        assert r.sha256 == staged_digest(batch_dir(out, r.batch_id))
    assert not [p for p in (out / STAGING).iterdir() if not p.name.startswith(".trash-")]


async def reference_run(cluster: LocalJobCluster, events: Path, ref: Path, job: str) -> None:
    """The same stream, uninterrupted, by the same cluster (no delay)."""
    await cluster.submit("events.count", {"input": str(events)}, str(ref), job_id=job)
    with anyio.fail_after(120):
        assert (await cluster.wait_job(job)).state == "succeeded"
