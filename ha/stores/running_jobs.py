"""The running jobs registry: PENDING, RUNNING or DONE per job id (Flink's RunningJobsRegistry).

A new leader reads it to tell a job that must be recovered (RUNNING) from one that finished
(DONE) but whose result is not yet recorded. Node: ``<root>/running-jobs/<job_id>`` holding
``{"format": "ha.running-job", "v": 1, "status": "PENDING"|"RUNNING"|"DONE"}``.
"""

from __future__ import annotations

import enum

from ..drivers.base import Driver
from ..election.lease import Lease
from ..errors import NoNode
from . import codec
from .fencing import Writer
from .layout import Layout, check_name

__all__ = ("RunStatus", "RunningJobsRegistry")

KIND = "ha.running-job"


class RunStatus(enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    DONE = "DONE"


class RunningJobsRegistry:
    def __init__(self, driver: Driver, layout: Layout, *, lease: Lease | None = None) -> None:
        self.root = layout.running_jobs
        self._driver = driver
        self._writer = Writer(driver, lease)

    def _path(self, job_id: str) -> str:
        return f"{self.root}/{check_name('job_id', job_id)}"

    async def set_status(self, job_id: str, status: RunStatus) -> None:
        data = codec.encode(KIND, {"status": RunStatus(status).value})
        await self._writer.put(self._path(job_id), data)

    async def set_pending(self, job_id: str) -> None:
        await self.set_status(job_id, RunStatus.PENDING)

    async def set_running(self, job_id: str) -> None:
        await self.set_status(job_id, RunStatus.RUNNING)

    async def set_done(self, job_id: str) -> None:
        await self.set_status(job_id, RunStatus.DONE)

    async def clear(self, job_id: str) -> None:
        """Forget the job (idempotent)."""
        await self._writer.delete(self._path(job_id))

    async def status(self, job_id: str) -> RunStatus | None:
        path = self._path(job_id)
        try:
            data, _ = await self._driver.get(path)
        except NoNode:
            return None
        return codec.field_enum(path, codec.decode(path, data, KIND), "status", RunStatus)

    async def statuses(self) -> dict[str, RunStatus]:
        try:
            names = await self._driver.children(self.root)
        except NoNode:
            return {}
        found = {}
        for job_id in names:
            status = await self.status(job_id)
            if status is not None:
                found[job_id] = status
        return found
