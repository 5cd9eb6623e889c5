"""``ha jobs manager --http``: the job manager's endpoint and metrics.

``serve_job_manager`` measures a ``JobManager`` that has not started yet (its process and
build as ``ha run --http`` does, its backend's operations, its elector, its batches and
recoveries through its event sink) and serves the routes of ``endpoints.py`` for its election
until cancelled. The job manager is a component of its process's HA services, whose elector
runs the services' contender: ``ElectorMetrics.watch`` is handed to the services
(``on_elector``), so each elector they run is measured and runs the wrapper that counts its
fences. It takes any object shaped like a job manager
(``ServedJobManager``): this layer sits below ``ha.pipeline`` and imports nothing of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import anyio
import anyio.abc
import sniffio

from ..drivers.base import Driver
from ..election.elector import Elector
from ..election.names import identity_bytes
from ..metrics import BackendMetrics, ElectorMetrics, JobManagerMetrics, ProcessMetrics, Registry
from ..metrics.jobs import EventSink
from .endpoints import ElectionEndpoints
from .server import serve

__all__ = ("ServedJobManager", "ServedServices", "serve_job_manager")


class ServedServices(Protocol):
    """What is read of the job manager's HA services: the process's identity and election, and
    a hook that sees each elector they run (``HAServices.on_elector``)."""

    @property
    def identity(self) -> str | bytes: ...

    @property
    def election_path(self) -> str: ...

    def on_elector(self, observer: Callable[[Elector, object], object]) -> None: ...


class ServedJobManager(Protocol):
    """What ``serve_job_manager`` needs of a job manager (``ha.pipeline.JobManager`` is one):
    its backend and identity to measure, its event sink to count through (replaced by a
    counting one that calls the old), its services, the elector running now, and its
    cluster's jobs for the status page."""

    on_event: EventSink

    @property
    def driver(self) -> Driver: ...

    @property
    def identity(self) -> str: ...

    @property
    def services(self) -> ServedServices: ...

    @property
    def elector(self) -> Elector: ...

    async def job_rows(self) -> list[dict[str, Any]]:
        """The cluster's jobs for the status page (``page.py``)."""
        ...


async def serve_job_manager(
    manager: ServedJobManager,
    host: str,
    port: int,
    *,
    task_status: anyio.abc.TaskStatus[tuple[str, int]] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Measure ``manager`` and serve its endpoint on ``host:port`` until cancelled (call
    before ``manager.run()``: ``await task_group.start(serve_job_manager, manager, h, p)``)."""
    registry = Registry()
    ProcessMetrics(registry, event_loop=sniffio.current_async_library())  # as `ha run`'s
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
        jobs=manager.job_rows,
    )
    await serve(host, port, routes, task_status=task_status)
