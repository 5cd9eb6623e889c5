"""``ha jobs manager --http``: the job manager's endpoint and metrics.

``serve_job_manager`` measures a ``JobManager`` that has not started yet (its backend's
operations, its elector, its batches and recoveries through its event sink) and serves the
routes of ``endpoints.py`` for its election until cancelled. The job manager runs its elector
with itself as the contender, so the fence counter (``ElectorMetrics.watch``'s wrapper) is
set as that instance's ``fence_old_active`` hook: the elector looks the hook up on the
contender, and the wrapper calls the job manager's own if it ever has one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

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
    measured: Any = ElectorMetrics(registry).watch(manager.elector, manager)
    manager.fence_old_active = measured.fence_old_active  # type: ignore[attr-defined]
    elector = manager.elector
    routes = ElectionEndpoints(
        manager.driver, elector.path, elector.identity, lambda: elector.state.value, registry
    )
    await serve(host, port, routes, task_status=task_status)
