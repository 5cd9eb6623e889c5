"""Submitting, cancelling and watching pipeline jobs, from any process (the ``ha jobs`` calls).

Clients do not hold the election's lease, so they cannot write the fenced stores. They drop a
submission (the plan's bytes) or a cancel request in an inbox under the cluster's root and
ring a doorbell node; the active job manager moves each submission into the execution plan
store (fenced) and acts on each request. Reading a job's state needs no lease.

Nodes, under ``<prefix>/<cluster_id>/pipeline/``::

    inbox                   the doorbell: its data is rewritten to wake the active
    inbox/<job_id>          a submitted plan (JSON), until the active has taken it
    cancel/<job_id>         a cancel request, until the job has a result
    failures/<job_id>       failed attempts so far (fenced; the active's bookkeeping)

A job's state, from first to last: ``submitted`` (in the inbox), ``pending`` (taken, not
started), ``running``, then ``succeeded``, ``failed`` or ``cancelled`` (its job result).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

import anyio

from ..drivers.base import Driver
from ..errors import ConfigurationError, CorruptData, NodeExists, NoNode
from ..stores import BlobStore, RunStatus, Stores
from ..stores.layout import Layout, check_name
from .plan import JobPlan

__all__ = (
    "FINAL_STATES",
    "JobStatus",
    "Paths",
    "cancel_job",
    "job_status",
    "list_jobs",
    "submit_job",
    "wait_for_job",
)

FINAL_STATES = ("succeeded", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class Paths:
    """Where the job manager's own nodes are, for one cluster."""

    root: str  # the cluster's root, shared with the stores

    @classmethod
    def of(cls, cluster_id: str, prefix: str = "/ha") -> Paths:
        return cls(Layout(cluster_id, prefix).root)

    @property
    def election(self) -> str:
        return f"{self.root}/jobmanager"

    @property
    def inbox(self) -> str:
        return f"{self.root}/pipeline/inbox"

    @property
    def cancels(self) -> str:
        return f"{self.root}/pipeline/cancel"

    @property
    def failures(self) -> str:
        return f"{self.root}/pipeline/failures"

    def submission(self, job_id: str) -> str:
        return f"{self.inbox}/{check_name('job_id', job_id)}"

    def cancel(self, job_id: str) -> str:
        return f"{self.cancels}/{check_name('job_id', job_id)}"

    def failure(self, job_id: str) -> str:
        return f"{self.failures}/{check_name('job_id', job_id)}"


@dataclass(frozen=True, slots=True)
class JobStatus:
    job_id: str
    state: str  # submitted, pending, running, succeeded, failed, cancelled
    pipeline: str | None = None
    batches_done: int = 0
    batches: int | None = None
    output: str | None = None
    error: str | None = None
    detail: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return self.state in FINAL_STATES

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "state": self.state,
            "pipeline": self.pipeline,
            "batches_done": self.batches_done,
            "batches": self.batches,
            "output": self.output,
            "error": self.error,
        }


async def ring(driver: Driver, paths: Paths) -> None:
    """Wake the active job manager (it watches the inbox node)."""
    try:
        await driver.set(paths.inbox, str(time.time()).encode())
    except NoNode:
        await driver.ensure_path(paths.inbox)
        await driver.set(paths.inbox, str(time.time()).encode())


async def submit_job(
    driver: Driver, cluster_id: str, plan: JobPlan, *, prefix: str = "/ha"
) -> None:
    """Hand a checked plan (``make_plan``) to the active job manager.

    Refuses a job id that is already submitted, known, or finished.
    """
    paths = Paths.of(cluster_id, prefix)
    layout = Layout(cluster_id, prefix)
    job_id = check_name("job_id", plan.job_id)
    for where in (
        f"{layout.execution_plans}/{job_id}",
        f"{layout.job_results}/{job_id}",
        f"{layout.running_jobs}/{job_id}",
    ):
        if await driver.exists(where) is not None:
            raise ConfigurationError(f"job id {job_id!r} is already used ({where})")
    await driver.ensure_path(paths.inbox)
    try:
        await driver.create(paths.submission(job_id), plan.to_bytes())
    except NodeExists:
        raise ConfigurationError(f"job {job_id!r} is already submitted") from None
    await ring(driver, paths)


async def cancel_job(driver: Driver, cluster_id: str, job_id: str, *, prefix: str = "/ha") -> None:
    """Ask the active job manager to cancel a job (idempotent; a finished job stays as it is)."""
    paths = Paths.of(cluster_id, prefix)
    await driver.ensure_path(paths.cancels)
    try:
        await driver.create(paths.cancel(job_id), str(time.time()).encode())
    except NodeExists:
        pass
    await ring(driver, paths)


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
    paths = Paths.of(cluster_id, prefix)
    stores = _read_stores(driver, cluster_id, blobs, prefix)
    check_name("job_id", job_id)
    entry = await stores.job_results.get(job_id)
    if entry is not None:
        detail = dict(entry.result.detail)
        return JobStatus(
            job_id,
            entry.result.outcome.value,
            pipeline=detail.get("pipeline"),
            batches_done=int(detail.get("batches_done", 0)),
            batches=detail.get("batches"),
            output=detail.get("output"),
            error=detail.get("error"),
            detail=detail,
        )
    raw = await stores.execution_plans.get(job_id)
    if raw is not None:
        plan = JobPlan.from_bytes(raw, f"{stores.layout.execution_plans}/{job_id}")
        status = await stores.running_jobs.status(job_id)
        done = await stores.checkpoints(job_id).ids()
        return JobStatus(
            job_id,
            "running" if status is RunStatus.RUNNING else "pending",
            pipeline=plan.pipeline,
            batches_done=done[-1] if done else 0,  # checkpoint n: n batches committed
            batches=len(plan.batches),
            output=plan.output,
        )
    try:
        data, _ = await driver.get(paths.submission(job_id))
    except NoNode:
        raise ConfigurationError(f"no job {job_id!r} in cluster {cluster_id!r}") from None
    try:
        plan = JobPlan.from_bytes(data, paths.submission(job_id))
    except CorruptData as exc:  # the active will refuse it; say why already
        return JobStatus(job_id, "submitted", error=str(exc))
    return JobStatus(job_id, "submitted", plan.pipeline, 0, len(plan.batches), plan.output)


async def _children(driver: Driver, path: str) -> list[str]:
    try:
        return await driver.children(path)
    except NoNode:
        return []


async def list_jobs(
    driver: Driver,
    cluster_id: str,
    *,
    blobs: BlobStore | str | os.PathLike[str],
    prefix: str = "/ha",
) -> list[JobStatus]:
    """Every known job (submitted, current and finished), by job id."""
    paths = Paths.of(cluster_id, prefix)
    layout = Layout(cluster_id, prefix)
    ids: set[str] = set()
    for where in (paths.inbox, layout.execution_plans, layout.job_results):
        ids.update(await _children(driver, where))
    found = []
    for job_id in sorted(ids):
        try:
            found.append(await job_status(driver, cluster_id, job_id, blobs=blobs, prefix=prefix))
        except ConfigurationError:
            continue  # it moved from one place to the next while we looked, and is gone
        except CorruptData as exc:
            found.append(JobStatus(job_id, "unknown", error=str(exc)))
    return found


async def wait_for_job(
    driver: Driver,
    cluster_id: str,
    job_id: str,
    *,
    blobs: BlobStore | str | os.PathLike[str],
    prefix: str = "/ha",
    poll: float = 0.2,
) -> JobStatus:
    """Poll until the job is finished (bound it with ``anyio.fail_after``)."""
    while True:
        status = await job_status(driver, cluster_id, job_id, blobs=blobs, prefix=prefix)
        if status.finished:
            return status
        await anyio.sleep(poll)


def failure_record(failures: int, error: str) -> bytes:
    return json.dumps({"failures": failures, "last_error": error}).encode()


def read_failures(path: str, data: bytes) -> int:
    try:
        value = json.loads(data)["failures"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptData(path, f"not a failure record: {exc}") from exc
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CorruptData(path, f"bad failure count {value!r}")
    return value
