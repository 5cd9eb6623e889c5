"""``ha jobs manager --http``: the job manager's endpoint and metrics.

``serve_job_manager`` measures a ``JobManager`` that has not started yet (its backend's
operations, its elector, its batches and recoveries through its event sink) and serves the
routes of ``endpoints.py`` for its election until cancelled. The job manager is a component of
its process's HA services, whose elector runs the services' contender: ``ElectorMetrics.watch``
is handed to the services (``on_elector``), so each elector they run is measured and runs the
wrapper that counts its fences.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import anyio.abc

from ..election.nodes import identity_bytes
from ..metrics import BackendMetrics, ElectorMetrics, JobManagerMetrics, Registry
from .endpoints import ElectionEndpoints
from .server import serve

if TYPE_CHECKING:
    from ..pipeline.jobmanager import JobManager

__all__ = ("serve_job_manager",)


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
        manager.driver, path, identity, lambda: manager.elector.state.value, registry
    )
    await serve(host, port, routes, task_status=task_status)
