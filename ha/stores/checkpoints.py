"""Completed checkpoints and the checkpoint id counter (Flink's CompletedCheckpointStore and
CheckpointIDCounter).

- ``CheckpointStore`` keeps the newest ``max_retained`` completed checkpoints of one job. Each
  is a state handle ``<root>/checkpoints/<job_id>/completed/<id, 19 digits>`` (zero-padded so
  names sort by id) pointing to a blob that holds the checkpoint's metadata. Adding one
  subsumes the oldest beyond ``max_retained``; the ids subsumed are returned so that the
  caller can discard the state they reference.
- ``CheckpointIdCounter`` hands out ids from ``<root>/checkpoints/<job_id>/counter``. Each
  increment is a compare-and-set on that node behind the leader's fence, so ids are strictly
  increasing across failovers: a new leader continues from the last committed value, and a
  deposed leader cannot hand out or consume one. An increment whose outcome is unknown may
  skip an id, never repeat one.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..drivers.base import Driver, SetData
from ..election.lease import Lease
from ..errors import (
    BadVersion,
    ConfigurationError,
    CorruptData,
    NodeExists,
    NoNode,
    TransactionFailed,
)
from . import codec
from .blobs import BlobStore
from .fencing import Writer
from .layout import Layout
from .state_handles import StateHandle, StateHandleStore

__all__ = ("CheckpointIdCounter", "CheckpointStore", "CompletedCheckpoint")

KIND = "ha.checkpoint"
COUNTER = "ha.checkpoint-counter"
_DIGITS = 19  # enough for any non-negative 64-bit id


@dataclass(frozen=True, slots=True)
class CompletedCheckpoint:
    job_id: str
    checkpoint_id: int
    metadata: bytes  # opaque to the store: where the checkpoint's state lives
    timestamp: float = 0.0  # wall-clock seconds when it completed, for display


def _name(checkpoint_id: int) -> str:
    return f"{checkpoint_id:0{_DIGITS}d}"


class CheckpointStore:
    def __init__(
        self,
        driver: Driver,
        layout: Layout,
        job_id: str,
        blobs: BlobStore,
        *,
        lease: Lease | None = None,
        max_retained: int = 1,
        lock_owner: str | None = None,
    ) -> None:
        if max_retained < 1:
            raise ConfigurationError(f"max_retained must be at least 1, got {max_retained}")
        self.job_id = job_id
        self.max_retained = max_retained
        self.handles = StateHandleStore(
            driver,
            layout.completed_checkpoints(job_id),
            blobs,
            lease=lease,
            lock_owner=lock_owner,
            blob_prefix=f"checkpoints/{job_id}",
        )

    def _id(self, name: str) -> int:
        if len(name) != _DIGITS or not name.isdigit():
            raise CorruptData(f"{self.handles.root}/{name}", "not a checkpoint id")
        return int(name)

    async def ids(self) -> list[int]:
        """Ids of the retained checkpoints, oldest first."""
        return sorted(self._id(n) for n in await self.handles.names())

    async def add(self, checkpoint: CompletedCheckpoint) -> list[int]:
        """Add a checkpoint newer than every retained one, then subsume the oldest beyond
        ``max_retained``. Returns the ids subsumed (their state may now be discarded)."""
        if checkpoint.job_id != self.job_id:
            raise ConfigurationError(
                f"checkpoint of job {checkpoint.job_id!r} added to the store of {self.job_id!r}"
            )
        cid = checkpoint.checkpoint_id
        if not 0 <= cid < 10**_DIGITS:
            raise ConfigurationError(f"checkpoint id out of range: {cid}")
        ids = await self.ids()
        if ids and cid <= ids[-1]:
            if cid in ids:
                raise NodeExists(self.handles.path(_name(cid)))
            raise ConfigurationError(f"checkpoint {cid} is older than the latest, {ids[-1]}")
        header = {"job_id": self.job_id, "checkpoint_id": cid, "timestamp": checkpoint.timestamp}
        await self.handles.add_and_lock(_name(cid), codec.pack(KIND, header, checkpoint.metadata))
        subsumed = []
        for old in [*ids, cid][: -self.max_retained]:
            if await self.handles.release_and_try_remove(_name(old)):
                subsumed.append(old)
        return subsumed

    async def _checkpoint(self, handle: StateHandle) -> CompletedCheckpoint:
        header, metadata = codec.unpack(handle.path, await self.handles.load(handle), KIND)
        job_id = codec.field(handle.path, header, "job_id", str)
        cid = codec.field(handle.path, header, "checkpoint_id", int)
        timestamp = header.get("timestamp")
        if job_id != self.job_id or cid != self._id(handle.name):
            raise CorruptData(handle.path, f"its blob holds checkpoint {cid} of job {job_id!r}")
        if not isinstance(timestamp, int | float) or isinstance(timestamp, bool):
            raise CorruptData(handle.path, f"bad timestamp {timestamp!r}")
        return CompletedCheckpoint(job_id, cid, metadata, float(timestamp))

    async def get(self, checkpoint_id: int) -> CompletedCheckpoint | None:
        try:
            handle = await self.handles.handle(_name(checkpoint_id))
        except NoNode:
            return None
        return await self._checkpoint(handle)

    async def latest(self) -> CompletedCheckpoint | None:
        for cid in reversed(await self.ids()):
            checkpoint = await self.get(cid)
            if checkpoint is not None:  # None: subsumed meanwhile
                return checkpoint
        return None

    async def checkpoints(self) -> list[CompletedCheckpoint]:
        """Every retained checkpoint, oldest first."""
        found = []
        for cid in await self.ids():
            checkpoint = await self.get(cid)
            if checkpoint is not None:
                found.append(checkpoint)
        return found

    async def recover(self) -> list[CompletedCheckpoint]:
        """After winning: finish interrupted removals, lock every checkpoint, return them."""
        await self.handles.cleanup_marked_for_deletion()
        handles = await self.handles.get_all_and_lock()
        return [await self._checkpoint(h) for h in handles]

    async def remove_all(self) -> list[int]:
        """Discard every checkpoint (the job is globally done); the ids others still hold."""
        return [self._id(n) for n in await self.handles.remove_all()]

    async def close(self) -> None:
        """Release our locks; the checkpoints stay for the next leader."""
        await self.handles.close()


class CheckpointIdCounter:
    def __init__(
        self, driver: Driver, layout: Layout, job_id: str, *, lease: Lease | None = None
    ) -> None:
        self.path = layout.checkpoint_counter(job_id)
        self._driver = driver
        self._writer = Writer(driver, lease)

    START = 1

    async def _read(self) -> tuple[int, int | None]:
        """The next id and the node's version (None if the counter was never written)."""
        try:
            data, stat = await self._driver.get(self.path)
        except NoNode:
            return self.START, None
        value = codec.field(self.path, codec.decode(self.path, data, COUNTER), "next", int)
        if value < 0:
            raise CorruptData(self.path, f"negative counter {value}")
        return value, stat.version

    async def get(self) -> int:
        """The id the next ``get_and_increment`` will hand out."""
        return (await self._read())[0]

    async def _write(self, value: int, version: int | None) -> None:
        data = codec.encode(COUNTER, {"next": value})
        if version is None:
            await self._writer.create(self.path, data)
        else:
            try:
                await self._writer.commit([SetData(self.path, data, version)])
            except TransactionFailed as exc:
                raise exc.cause from exc

    async def get_and_increment(self) -> int:
        """Hand out the next id; fenced compare-and-set, retried if our own tasks race."""
        for attempt in range(10):
            value, version = await self._read()
            try:
                await self._write(value + 1, version)
                return value
            except (BadVersion, NodeExists, NoNode):
                if attempt == 9:
                    raise
        raise AssertionError("unreachable")

    async def set_count(self, value: int) -> None:
        """Continue from ``value`` (restoring from a savepoint); never moves backwards."""
        for attempt in range(10):
            current, version = await self._read()
            if value < current:
                raise ConfigurationError(
                    f"counter {self.path} is at {current}, not going back to {value}"
                )
            try:
                await self._write(value, version)
                return
            except (BadVersion, NodeExists, NoNode):
                if attempt == 9:
                    raise

    async def remove(self) -> None:
        """Drop the counter (the job is globally done)."""
        await self._writer.delete(self.path)
