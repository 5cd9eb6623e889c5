"""Fenced metadata stores: what a new leader needs to recover (Flink's HA stores).

Every write is one backend transaction that first checks the writer's queue node
(``lease.fence_ops()``), so a deposed leader's late write fails with ``Fenced`` and changes
nothing (see ``fencing``). Reads need no lease: open a store with ``lease=None`` to read only.
Stored bytes that do not decode raise ``CorruptData`` naming the path; they are never replaced
or deleted by the stores.

Layout of one cluster under the coordination backend (``prefix`` defaults to ``/ha``)::

    <prefix>/<cluster_id>/
        job-results/<job_id>                      {"format": "ha.job-result", state dirty|clean}
        running-jobs/<job_id>                     {"format": "ha.running-job", status}
        execution-plans/<job_id>                  state handle -> execution-plans/<job_id>/<uuid>
        execution-plans/<job_id>/locks/<owner>    ephemeral lock of each store instance using it
        checkpoints/<job_id>/counter              {"format": "ha.checkpoint-counter", next}
        checkpoints/<job_id>/completed/<id:019d>  state handle -> checkpoints/<job_id>/<id>/<uuid>
        checkpoints/<job_id>/completed/<id>/locks/<owner>
        state/<namespace>/<name>[/locks/<owner>]  generic state handles
        leader/<component>                        ha.services: the published leader address
        election/{lock,breadcrumb,epoch}          ha.services: the process-wide election

State handles point (``->``) to blob keys. Blobs live outside the backend, in a ``BlobStore``
(``FileBlobStore(<blob_dir>/<cluster_id>)`` by default); a state handle node holds only the
blob's key, size and SHA-256.

``Stores(driver, cluster_id, blobs=..., lease=...)`` opens all of them for one leadership term
(``max_retained_job_results``, ``job_result_max_age``: how long clean job results stay);
``close()`` releases this instance's locks and keeps every byte; ``close_and_cleanup_all_data()``
removes the stores' subtrees (fenced, children first) and then the blobs their pointers named.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from ..drivers.base import Delete, Driver, Op, post_order
from ..election.lease import Lease
from ..errors import BadVersion, NoNode, NotEmpty, TransactionFailed
from .blobs import BlobRef, BlobStore, FileBlobStore, MemoryBlobStore
from .checkpoints import CheckpointIdCounter, CheckpointStore, CompletedCheckpoint
from .execution_plans import ExecutionPlanStore
from .fencing import PossiblyInconsistent, Writer
from .job_results import MAX_RETAINED, JobOutcome, JobResult, JobResultEntry, JobResultStore
from .layout import STORE_DIRS, Layout
from .running_jobs import RunningJobsRegistry, RunStatus
from .state_handles import StateHandle, StateHandleStore, pointer_blob

__all__ = (
    "STORE_DIRS",
    "BlobRef",
    "BlobStore",
    "CheckpointIdCounter",
    "CheckpointStore",
    "CompletedCheckpoint",
    "ExecutionPlanStore",
    "FileBlobStore",
    "JobOutcome",
    "JobResult",
    "JobResultEntry",
    "JobResultStore",
    "Layout",
    "MemoryBlobStore",
    "PossiblyInconsistent",
    "RunStatus",
    "RunningJobsRegistry",
    "StateHandle",
    "StateHandleStore",
    "Stores",
    "Writer",
)

_BATCH = 100  # deletes per fenced transaction when removing everything


class Stores:
    """All stores of one cluster, for one leadership term (``lease``) or read-only (None).

    ``blobs`` is a ``BlobStore`` or a directory; a directory gets a ``FileBlobStore`` in its
    ``<cluster_id>`` subdirectory. One lock owner name is shared by every store of the instance.
    """

    def __init__(
        self,
        driver: Driver,
        cluster_id: str,
        *,
        blobs: BlobStore | str | os.PathLike[str],
        lease: Lease | None = None,
        prefix: str = "/ha",
        max_retained_checkpoints: int = 1,
        max_retained_job_results: int | None = MAX_RETAINED,
        job_result_max_age: float | None = None,
        lock_owner: str | None = None,
    ) -> None:
        self.layout = Layout(cluster_id, prefix)
        self.driver = driver
        self.lease = lease
        self.lock_owner = lock_owner or uuid.uuid4().hex
        if isinstance(blobs, str | os.PathLike):
            blobs = FileBlobStore(Path(blobs) / cluster_id)
        self.blobs: BlobStore = blobs
        self.max_retained_checkpoints = max_retained_checkpoints
        self.job_results = JobResultStore(
            driver,
            self.layout,
            lease=lease,
            max_retained=max_retained_job_results,
            max_age=job_result_max_age,
        )
        self.running_jobs = RunningJobsRegistry(driver, self.layout, lease=lease)
        self.execution_plans = ExecutionPlanStore(
            driver, self.layout, self.blobs, lease=lease, lock_owner=self.lock_owner
        )
        self._checkpoints: dict[str, CheckpointStore] = {}
        self._counters: dict[str, CheckpointIdCounter] = {}
        self._state: dict[str, StateHandleStore] = {}

    def checkpoints(self, job_id: str) -> CheckpointStore:
        store = self._checkpoints.get(job_id)
        if store is None:
            store = self._checkpoints[job_id] = CheckpointStore(
                self.driver,
                self.layout,
                job_id,
                self.blobs,
                lease=self.lease,
                max_retained=self.max_retained_checkpoints,
                lock_owner=self.lock_owner,
            )
        return store

    def checkpoint_ids(self, job_id: str) -> CheckpointIdCounter:
        counter = self._counters.get(job_id)
        if counter is None:
            counter = self._counters[job_id] = CheckpointIdCounter(
                self.driver, self.layout, job_id, lease=self.lease
            )
        return counter

    def state_handles(self, namespace: str) -> StateHandleStore:
        store = self._state.get(namespace)
        if store is None:
            store = self._state[namespace] = StateHandleStore(
                self.driver,
                self.layout.state(namespace),
                self.blobs,
                lease=self.lease,
                lock_owner=self.lock_owner,
                blob_prefix=f"state/{namespace}",
            )
        return store

    async def close(self) -> None:
        """Release this instance's locks; all data stays for the next leader."""
        await self.execution_plans.close()
        for store in self._checkpoints.values():
            await store.close()
        for handles in self._state.values():
            await handles.close()

    async def close_and_cleanup_all_data(self) -> None:
        """Remove every node of the stores, then the blobs their pointers named (fenced).

        A blob is deleted only after the fenced transaction that deleted its pointer committed:
        a leader deposed before or during the cleanup gets ``Fenced`` and never deletes a blob
        a newer leader wrote (never wipe the whole blob directory: that is unfenced). Blobs no
        pointer names (orphans of a crash or of an unknown outcome) are left where they are.
        """
        writer = Writer(self.driver, self.lease)
        for attempt in range(5):
            listing = await self._cleanup_listing()
            if not listing:
                await writer.commit([])  # nothing (left) to remove; a deposed caller hears it
                return
            try:
                for start in range(0, len(listing), _BATCH):
                    batch = listing[start : start + _BATCH]
                    await writer.commit([op for op, _ in batch])
                    # these pointers are gone under our fence: their payloads are garbage now
                    for _, ref in batch:
                        if ref is not None:
                            await self.blobs.delete(ref)
                return
            except TransactionFailed as exc:
                # a lock came or went, or a pointer changed, between listing and deleting
                if attempt == 4 or not isinstance(exc.cause, NoNode | NotEmpty | BadVersion):
                    raise exc.cause from exc

    async def _cleanup_listing(self) -> list[tuple[Op, BlobRef | None]]:
        """Deletes of every store node, children first, with the blob of each pointer."""
        found: list[tuple[Op, BlobRef | None]] = []
        for top in self.layout.store_dirs():
            for path in await post_order(self.driver, top):
                try:
                    data, stat = await self.driver.get(path)
                except NoNode:
                    continue  # gone meanwhile (an ephemeral lock of an ended session)
                ref = pointer_blob(path, data)
                # a pointer's version pins the blob we read: changed meanwhile, list again
                found.append((Delete(path, stat.version) if ref else Delete(path), ref))
        return found
