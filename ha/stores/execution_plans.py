"""Execution plans: the job graphs a new leader must recover (Flink's ExecutionPlanStore).

Plans are opaque bytes to this store (the caller serializes them). Each lives in the blob store,
framed with its job id; ``<root>/execution-plans/<job_id>`` is a state handle pointing to it
and locked by every leader that runs the job. A leader ``put``s a plan when a job is submitted,
``recover``s (reads and locks) the plans after winning, and ``remove``s a plan when the job is
globally done; a plan another owner still holds is not removed.
"""

from __future__ import annotations

from ..drivers.base import Driver
from ..election.lease import Lease
from ..errors import CorruptData, NoNode
from . import codec
from .blobs import BlobStore
from .layout import Layout, check_name
from .state_handles import StateHandle, StateHandleStore

__all__ = ("ExecutionPlanStore",)

KIND = "ha.execution-plan"


class ExecutionPlanStore:
    def __init__(
        self,
        driver: Driver,
        layout: Layout,
        blobs: BlobStore,
        *,
        lease: Lease | None = None,
        lock_owner: str | None = None,
    ) -> None:
        self.handles = StateHandleStore(
            driver,
            layout.execution_plans,
            blobs,
            lease=lease,
            lock_owner=lock_owner,
            blob_prefix="execution-plans",
        )

    async def put(self, job_id: str, plan: bytes) -> None:
        """Add the job's plan (locked by us), or replace the plan it has."""
        payload = codec.pack(KIND, {"job_id": check_name("job_id", job_id)}, plan)
        if await self.handles.contains(job_id):
            try:
                await self.handles.replace(job_id, payload)
                return
            except NoNode:
                pass  # removed meanwhile: add it anew
        await self.handles.add_and_lock(job_id, payload)

    async def _plan(self, job_id: str, handle: StateHandle) -> bytes:
        header, plan = codec.unpack(handle.path, await self.handles.load(handle), KIND)
        stored = codec.field(handle.path, header, "job_id", str)
        if stored != job_id:
            raise CorruptData(handle.path, f"its blob holds the plan of job {stored!r}")
        return plan

    async def get(self, job_id: str) -> bytes | None:
        """The plan without locking it, or None."""
        try:
            handle = await self.handles.handle(job_id)
        except NoNode:
            return None
        return await self._plan(job_id, handle)

    async def recover(self, job_id: str) -> bytes:
        """Lock the plan for this leader and return it. NoNode if there is none."""
        return await self._plan(job_id, await self.handles.get_and_lock(job_id))

    async def remove(self, job_id: str) -> bool:
        """Remove the plan of a globally finished job; False if another owner still holds it."""
        return await self.handles.release_and_try_remove(job_id)

    async def release(self, job_id: str) -> None:
        """Stop holding the plan (the job runs elsewhere now, or this process stops)."""
        await self.handles.release(job_id)

    async def job_ids(self) -> list[str]:
        return await self.handles.names()

    async def close(self) -> None:
        await self.handles.close()
