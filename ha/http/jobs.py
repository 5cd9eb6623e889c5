"""``ha jobs manager --http``: the job manager's endpoint and metrics.

``serve_job_manager`` measures a ``JobManager`` that has not started yet (its backend's
operations, its elector, its batches and recoveries through its event sink) and serves the
routes of ``endpoints.py`` for its election until cancelled. The job manager is a component of
its process's HA services, whose elector runs the services' contender: ``ElectorMetrics.watch``
is handed to the services (``on_elector``), so each elector they run is measured and runs the
wrapper that counts its fences. ``job_rows`` reads the cluster's jobs for the status page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from ..election.nodes import identity_bytes
from ..errors import CorruptData
from ..metrics import BackendMetrics, ElectorMetrics, JobManagerMetrics, Registry
from .endpoints import ElectionEndpoints
from .server import serve

if TYPE_CHECKING:
    from ..pipeline.jobmanager import JobManager

__all__ = ("job_rows", "serve_job_manager")


async def job_rows(manager: JobManager) -> list[dict[str, Any]]:
    """The cluster's jobs as ``ha jobs list --json`` shows them, each with its failed attempts
    (``failures``) and the job managers that died running it (``deaths``, in a row at the same
    batch: ``ha/pipeline/attempts.py``) and the epoch of the term running it now (``epoch``)."""
    from ..pipeline.attempts import read_attempts
    from ..pipeline.jobs import failure_count, list_jobs

    rows = []
    for job in await list_jobs(
        manager.driver, manager.cluster_id, blobs=manager.blobs, prefix=manager.prefix
    ):
        row = job.to_json() | {"failures": None, "deaths": None, "epoch": None}
        try:
            row["failures"] = await failure_count(manager.driver, manager.layout, job.job_id)
            attempts = await read_attempts(manager.driver, manager.layout, job.job_id)
        except CorruptData:  # the job manager refuses it too, and its state says why
            rows.append(row)
            continue
        row["deaths"] = attempts.deaths
        row["epoch"] = None if attempts.open is None else attempts.open.get("epoch")
        rows.append(row)
    return rows


async def serve_job_manager(
    manager: JobManager,
    host: str,
    port: int,
    *,
    task_status: anyio.abc.TaskStatus[tuple[str, int]] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Measure ``manager`` and serve its endpoint on ``host:port`` until cancelled (call
    before ``manager.run()``: ``await task_group.start(serve_job_manager, manager, h, p)``)."""
    registry = Registry()
    BackendMetrics(registry).measure(manager.driver)
    manager.on_event = JobManagerMetrics(registry).sink(manager.identity, manager.on_event)
    manager.services.on_elector(ElectorMetrics(registry).watch)
    identity = identity_bytes(manager.services.identity)
    path = manager.services.election_path
    routes = ElectionEndpoints(
        manager.driver,
        path,
        identity,
        lambda: manager.elector.state.value,
        registry,
        jobs=lambda: job_rows(manager),
    )
    await serve(host, port, routes, task_status=task_status)
