"""Submitting, cancelling and watching pipeline jobs, from any process (the ``ha jobs`` calls).

Clients do not hold the election's lease, so they cannot write the fenced stores. They drop a
submission (the plan's bytes) or a cancel request in an inbox under the cluster's root and
ring a doorbell node; the active job manager moves each submission into the execution plan
store (fenced) and acts on each request (nodes: ``layout``). Reading a job's state needs no
lease.

A job's state (``JobState``), from first to last: ``submitted`` (in the inbox), ``pending``
(taken, not started), ``running``, then ``succeeded``, ``failed`` or ``cancelled`` (its job
result).
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from ..drivers.base import Driver
from ..errors import ConfigurationError, CorruptData, NodeExists, NoNode
from ..stores import BlobStore, RunStatus, Stores
from ..stores.layout import check_name
from .api.plan import JobPlan
from .api.streaming import is_stream_plan
from .commit.stream_commit import count_commits
from .layout import JobLayout, read_failures

__all__ = (
    "JobState",
    "JobStatus",
    "cancel_job",
    "count_commits",
    "job_status",
    "list_jobs",
    "progress_lines",
    "submit_job",
    "wait_for_job",
)


class JobState(enum.StrEnum):
    """Where a job is. The values are what ``ha jobs`` prints and a job result stores."""

    SUBMITTED = "submitted"  # in the inbox
    PENDING = "pending"  # taken by the active, not started
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"  # ended, outcome not learned; or its nodes did not decode

    @property
    def finished(self) -> bool:
        return self in _FINAL


_FINAL = frozenset((JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED))


@dataclass(frozen=True, slots=True)
class JobStatus:
    job_id: str
    state: JobState
    pipeline: str | None = None
    batches_done: int = 0
    batches: int | None = None
    output: str | None = None
    error: str | None = None
    detail: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return self.state.finished

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "state": self.state.value,
            "pipeline": self.pipeline,
            "batches_done": self.batches_done,
            "batches": self.batches,
            "output": self.output,
            "error": self.error,
        }


async def ring(driver: Driver, layout: JobLayout) -> None:
    """Wake the active job manager (it watches the inbox node)."""
    try:
        await driver.set(layout.inbox, str(time.time()).encode())
    except NoNode:
        await driver.ensure_path(layout.inbox)
        await driver.set(layout.inbox, str(time.time()).encode())


async def submit_job(
    driver: Driver, cluster_id: str, plan: JobPlan, *, prefix: str = "/ha"
) -> None:
    """Hand a checked plan (``make_plan``) to the active job manager.

    Refuses a job id that is already submitted, known, or finished.
    """
    layout = JobLayout(cluster_id, prefix)
    job_id = check_name("job_id", plan.job_id)
    for where in (
        f"{layout.execution_plans}/{job_id}",
        f"{layout.job_results}/{job_id}",
        f"{layout.running_jobs}/{job_id}",
    ):
        if await driver.exists(where) is not None:
            raise ConfigurationError(f"job id {job_id!r} is already used ({where})")
    await driver.ensure_path(layout.inbox)
    try:
        await driver.create(layout.submission(job_id), plan.to_bytes())
    except NodeExists:
        raise ConfigurationError(f"job {job_id!r} is already submitted") from None
    await ring(driver, layout)


async def cancel_job(driver: Driver, cluster_id: str, job_id: str, *, prefix: str = "/ha") -> None:
    """Ask the active job manager to cancel a job (idempotent; a finished job stays as it is)."""
    layout = JobLayout(cluster_id, prefix)
    await driver.ensure_path(layout.cancels)
    try:
        await driver.create(layout.cancel(job_id), str(time.time()).encode())
    except NodeExists:
        pass
    await ring(driver, layout)


def _read_stores(driver: Driver, cluster_id: str, blobs: Any, prefix: str) -> Stores:
    if blobs is None:
        raise ConfigurationError("reading job plans needs the blob directory of the cluster")
    return Stores(driver, cluster_id, blobs=blobs, prefix=prefix)


async def job_status(
    driver: Driver,
    cluster_id: str,
    job_id: str,
    *,
    blobs: BlobStore | str | os.PathLike[str],
    prefix: str = "/ha",
) -> JobStatus:
    """The job's state now. ConfigurationError if no such job is known."""
    layout = JobLayout(cluster_id, prefix)
    stores = _read_stores(driver, cluster_id, blobs, prefix)
    check_name("job_id", job_id)
    entry = await stores.job_results.get(job_id)
    if entry is not None:
        detail = dict(entry.result.detail)
        return JobStatus(
            job_id,
            JobState(entry.result.outcome.value),
            pipeline=detail.get("pipeline"),
            batches_done=int(detail.get("batches_done", 0)),
            batches=detail.get("batches"),
            output=detail.get("output"),
            error=detail.get("error"),
            detail=detail,
        )
    try:
        raw = await stores.execution_plans.get(job_id)
    except CorruptData:  # its blob gone: the job may have finished since we looked, and be cleaned
        if await stores.job_results.get(job_id) is None:
            raise
        return await job_status(driver, cluster_id, job_id, blobs=blobs, prefix=prefix)
    if raw is not None:
        plan = JobPlan.from_bytes(raw, f"{stores.layout.execution_plans}/{job_id}")
        status = await stores.running_jobs.status(job_id)
        if is_stream_plan(plan):  # a stream's progress: its micro-batches' commit records
            done = [await count_commits(driver, layout, job_id)]
        else:
            done = await stores.checkpoints(job_id).ids()
        return JobStatus(
            job_id,
            JobState.RUNNING if status is RunStatus.RUNNING else JobState.PENDING,
            pipeline=plan.pipeline,
            batches_done=done[-1] if done else 0,  # checkpoint n: n batches committed
            batches=None if is_stream_plan(plan) else len(plan.batches),
            output=plan.output,
        )
    try:
        data, _ = await driver.get(layout.submission(job_id))
    except NoNode:
        raise ConfigurationError(f"no job {job_id!r} in cluster {cluster_id!r}") from None
    try:
        plan = JobPlan.from_bytes(data, layout.submission(job_id))
    except CorruptData as exc:  # the active will refuse it; say why already
        return JobStatus(job_id, JobState.SUBMITTED, error=str(exc))
    total = None if is_stream_plan(plan) else len(plan.batches)
    return JobStatus(job_id, JobState.SUBMITTED, plan.pipeline, 0, total, plan.output)


async def children(driver: Driver, path: str) -> list[str]:
    """The children of ``path``; none if it does not exist (yet)."""
    try:
        return await driver.children(path)
    except NoNode:
        return []


async def failure_count(driver: Driver, layout: JobLayout, job_id: str) -> int:
    """The job's failed attempts so far (its fenced failure record; 0 without one)."""
    path = layout.failure(job_id)
    try:
        data, _ = await driver.get(path)
    except NoNode:
        return 0
    return read_failures(path, data)


async def list_jobs(
    driver: Driver,
    cluster_id: str,
    *,
    blobs: BlobStore | str | os.PathLike[str],
    prefix: str = "/ha",
) -> list[JobStatus]:
    """Every known job (submitted, current and finished), by job id."""
    layout = JobLayout(cluster_id, prefix)
    ids: set[str] = set()
    for where in (layout.inbox, layout.execution_plans, layout.job_results):
        ids.update(await children(driver, where))
    found = []
    for job_id in sorted(ids):
        try:
            found.append(await job_status(driver, cluster_id, job_id, blobs=blobs, prefix=prefix))
        except ConfigurationError:
            continue  # it moved from one place to the next while we looked, and is gone
        except CorruptData as exc:
            found.append(JobStatus(job_id, JobState.UNKNOWN, error=str(exc)))
    return found


def progress_lines(job_id: str, echo: Callable[[str], None]) -> Callable[[JobStatus], None]:
    """An ``on_progress`` for ``wait_for_job`` that says, one plain line each, every change of
    state before the end and every newly committed (micro-)batch."""
    last: dict[str, Any] = {"state": None, "done": 0}

    def show(status: JobStatus) -> None:
        if status.state != last["state"] and not status.finished:  # the caller says the end
            echo(f"job {job_id} {status.state}")
        # A stream's count is known only at its end: keep saying what the first status said.
        known = last.setdefault("batches", status.batches)
        total = "" if known is None else f" of {known}"
        for n in range(last["done"], status.batches_done):
            echo(f"job {job_id}: batch {n} committed ({n + 1}{total})")
        last.update(state=status.state, done=max(last["done"], status.batches_done))

    return show


async def wait_for_job(
    driver: Driver,
    cluster_id: str,
    job_id: str,
    *,
    blobs: BlobStore | str | os.PathLike[str],
    prefix: str = "/ha",
    poll: float = 0.2,
    on_progress: Callable[[JobStatus], None] | None = None,
) -> JobStatus:
    """Poll until the job is finished (bound it with ``anyio.fail_after``); ``on_progress`` is
    called with each status whose committed batch count or state differs from the last one."""
    seen: tuple[JobState, int] | None = None
    while True:
        status = await job_status(driver, cluster_id, job_id, blobs=blobs, prefix=prefix)
        if on_progress is not None and (status.state, status.batches_done) != seen:
            seen = (status.state, status.batches_done)
            on_progress(status)
        if status.finished:
            return status
        await anyio.sleep(poll)
