"""State handles: payloads in a blob store, pointers and locks in the backend (Flink's pattern).

Each entry under the store's root is::

    <root>/<name>                 pointer: {"format": "ha.state-handle", "v": 1, "blob": {...}}
    <root>/<name>/locks           container; its absence marks the entry for deletion
    <root>/<name>/locks/<owner>   ephemeral, one per store instance that uses the entry

- ``add_and_lock``: the payload goes to the blob store first; then the pointer, the locks
  container and our lock are created in one fenced transaction. If the backend refuses the
  transaction (fenced, the entry exists), nothing references the payload and it is discarded.
  If the outcome is unknown (contact lost, session expired mid-write), the payload is kept and
  ``PossiblyInconsistent`` is raised: the pointer may have been written.
- ``release_and_try_remove``: one fenced transaction deletes our lock and the locks container;
  if another owner still holds a lock, only our lock is released and the entry stays. Once the
  container is gone the entry is *marked for deletion*: readers treat it as absent, no one can
  lock it. Then the pointer node is deleted (fenced, and only while it has no locks container,
  i.e. is still marked), and only after that commit the payload it named is discarded: a
  deposed remover is refused before it touches any blob, and a blob is never deleted while a
  pointer names it. A crash before the pointer's deletion leaves a marked entry, which
  ``cleanup_marked_for_deletion`` (or a later ``add_and_lock`` of the same name) finishes; a
  crash after it leaves an orphaned blob that no pointer names: garbage, left in the blob
  store (nothing collects it; it is never read).
- Releasing our own lock is the one write that is not fenced: a lock only keeps others from
  removing an entry, dropping it changes no data, and a deposed leader must be able to drop its
  locks (they would otherwise pin entries until its session ends).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ..drivers.base import Check, Create, Delete, Driver, Op, SetData, validate_path
from ..election.lease import Lease
from ..errors import (
    AccessDenied,
    BadVersion,
    ConfigurationError,
    ConnectionLost,
    CorruptData,
    DriverError,
    Fenced,
    NodeExists,
    NoNode,
    NotEmpty,
    SessionExpired,
    TransactionFailed,
)
from . import codec
from .blobs import BlobRef, BlobStore
from .fencing import PossiblyInconsistent, Writer
from .layout import check_name

__all__ = ("StateHandle", "StateHandleStore", "pointer_blob")

POINTER = "ha.state-handle"
LOCKS = "locks"


def pointer_blob(path: str, data: bytes) -> BlobRef | None:
    """The blob a node's data points to if it is a readable state-handle pointer, else None."""
    try:
        return BlobRef.from_json(path, codec.decode(path, data, POINTER).get("blob"))
    except CorruptData:
        return None


@dataclass(frozen=True, slots=True)
class StateHandle:
    """An entry: its name, node path, the blob it points to and the pointer node's version."""

    name: str
    path: str
    blob: BlobRef
    version: int


class StateHandleStore:
    """Entries named by one path segment under ``root``, payloads in ``blobs``."""

    def __init__(
        self,
        driver: Driver,
        root: str,
        blobs: BlobStore,
        *,
        lease: Lease | None = None,
        lock_owner: str | None = None,
        blob_prefix: str = "state",
    ) -> None:
        self.root = validate_path(root)
        self.lock_owner = check_name("lock_owner", lock_owner or uuid.uuid4().hex)
        self._driver = driver
        self._blobs = blobs
        self._writer = Writer(driver, lease)
        self._blob_prefix = blob_prefix

    # --- paths ------------------------------------------------------------------------------

    def path(self, name: str) -> str:
        return f"{self.root}/{check_name('entry name', name)}"

    def _locks(self, path: str) -> str:
        return f"{path}/{LOCKS}"

    def _lock(self, path: str) -> str:
        return f"{path}/{LOCKS}/{self.lock_owner}"

    # --- reading ----------------------------------------------------------------------------

    async def _marked(self, path: str) -> bool:
        return await self._driver.exists(self._locks(path)) is None

    def _pointer(self, path: str, data: bytes) -> BlobRef:
        doc = codec.decode(path, data, POINTER)
        return BlobRef.from_json(path, doc.get("blob"))

    async def _read(self, name: str, path: str) -> StateHandle:
        data, stat = await self._driver.get(path)
        return StateHandle(name, path, self._pointer(path, data), stat.version)

    async def names(self) -> list[str]:
        """Names of the entries, sorted, without those marked for deletion."""
        return [n for n in await self._all_names() if not await self._marked(f"{self.root}/{n}")]

    async def _all_names(self) -> list[str]:
        try:
            return await self._driver.children(self.root)
        except NoNode:
            return []

    async def contains(self, name: str) -> bool:
        path = self.path(name)
        return await self._driver.exists(path) is not None and not await self._marked(path)

    async def handle(self, name: str) -> StateHandle:
        """The entry's pointer, without locking. NoNode if absent or marked for deletion."""
        path = self.path(name)
        if await self._marked(path):
            raise NoNode(path)
        return await self._read(name, path)

    async def load(self, handle: StateHandle) -> bytes:
        """The payload a handle points to; CorruptData names the entry and the blob."""
        try:
            return await self._blobs.get(handle.blob)
        except CorruptData as exc:
            raise CorruptData(handle.path, f"its blob {handle.blob.key}: {exc}") from exc

    async def get(self, name: str) -> bytes:
        return await self.load(await self.handle(name))

    # --- writing ----------------------------------------------------------------------------

    async def _commit_with_blob(self, path: str, ref: BlobRef, ops: list[Op]) -> None:
        """Commit ops that make a node point to ``ref``; discard ``ref`` only if surely unused."""
        try:
            await self._writer.commit(ops)
        except (Fenced, TransactionFailed, AccessDenied, ConfigurationError):
            # the backend refused the transaction: nothing of it applied, nothing points to ref
            await self._blobs.delete(ref)
            raise
        except DriverError as exc:
            # ConnectionLost, SessionExpired...: it may have been applied; keep the payload
            raise PossiblyInconsistent(path, exc, ref.key) from exc

    async def add_and_lock(self, name: str, payload: bytes) -> StateHandle:
        """Store ``payload`` and add a locked entry ``name``. NodeExists if it already exists."""
        path = self.path(name)
        if await self._driver.exists(path) is not None:
            if not await self._marked(path):
                raise NodeExists(path)
            await self._finish_removal(path)  # a leftover marked for deletion: finish it first
        ref = await self._blobs.put(f"{self._blob_prefix}/{name}", payload)
        pointer = codec.encode(POINTER, {"blob": ref.to_json()})
        for attempt in range(2):
            try:
                parents = await self._writer.parent_ops(path)
            except BaseException:
                await self._blobs.delete(ref)  # nothing was sent yet
                raise
            ops: list[Op] = [
                *parents,
                Create(path, pointer),
                Create(self._locks(path)),
                Create(self._lock(path), ephemeral=True),
            ]
            try:
                await self._commit_with_blob(path, ref, ops)
            except TransactionFailed as exc:
                cause = exc.cause
                racing = isinstance(cause, NoNode) or (
                    isinstance(cause, NodeExists) and cause.path != path
                )
                if racing and attempt == 0:
                    # a container was removed or created under us (stale cache): once more
                    ref = await self._blobs.put(f"{self._blob_prefix}/{name}", payload)
                    continue
                raise cause from exc
            break
        return StateHandle(name, path, ref, 0)

    async def replace(self, name: str, payload: bytes) -> StateHandle:
        """Point the existing entry ``name`` at a new payload; the old payload is discarded."""
        path = self.path(name)
        data, stat = await self._driver.get(path)
        old = self._pointer(path, data)  # never overwrite what we cannot read
        ref = await self._blobs.put(f"{self._blob_prefix}/{name}", payload)
        pointer = codec.encode(POINTER, {"blob": ref.to_json()})
        # the Check makes an entry marked for deletion meanwhile count as absent
        ops: list[Op] = [Check(self._locks(path)), SetData(path, pointer, stat.version)]
        try:
            await self._commit_with_blob(path, ref, ops)
        except TransactionFailed as exc:
            if isinstance(exc.cause, NoNode):
                raise NoNode(path) from exc
            raise exc.cause from exc
        await self._blobs.delete(old)
        return StateHandle(name, path, ref, stat.version + 1)

    async def get_and_lock(self, name: str) -> StateHandle:
        """Lock the entry for this store instance and return its handle. NoNode if absent."""
        path = self.path(name)
        try:
            await self._writer.commit([Create(self._lock(path), ephemeral=True)])
        except TransactionFailed as exc:
            if isinstance(exc.cause, NoNode):  # absent, or marked for deletion
                raise NoNode(path) from exc
            if not isinstance(exc.cause, NodeExists):  # NodeExists: we hold it already
                raise exc.cause from exc
        return await self._read(name, path)

    async def get_all_and_lock(self) -> list[StateHandle]:
        """Lock every entry not marked for deletion; the handles in name order."""
        handles = []
        for name in await self.names():
            try:
                handles.append(await self.get_and_lock(name))
            except NoNode:
                continue  # removed meanwhile
        return handles

    async def release(self, name: str) -> None:
        """Drop our lock on ``name`` (not fenced; see the module docstring). Idempotent."""
        try:
            await self._driver.delete(self._lock(self.path(name)))
        except NoNode:
            pass

    async def release_all(self) -> None:
        for name in await self._all_names():
            await self.release(name)

    async def release_and_try_remove(self, name: str) -> bool:
        """Release our lock and remove the entry if no one else holds a lock.

        True if the entry is gone (or was absent), False if another owner still holds it.
        """
        path = self.path(name)
        last: BaseException | None = None
        for _ in range(5):
            try:
                data, stat = await self._driver.get(path)
            except NoNode:
                await self._writer.commit([])  # nothing to remove; a deposed caller still hears it
                return True
            ref = self._pointer(path, data)  # CorruptData before any change: a human must look
            held = await self._driver.exists(self._lock(path)) is not None
            # mark only the pointer we read, so the payload we discard below is the right one
            ops: list[Op] = [Check(path, stat.version)]
            if held:
                ops.append(Delete(self._lock(path)))
            ops.append(Delete(self._locks(path)))
            try:
                await self._writer.commit(ops)
            except TransactionFailed as exc:
                cause = exc.cause
                if isinstance(cause, NotEmpty):  # someone else holds it: only let go of ours
                    if held:
                        await self.release(name)
                    return False
                if isinstance(cause, NoNode) and cause.path == self._locks(path):
                    # already marked for deletion: finish the removal
                    await self._discard(path, ref, stat.version)
                    return True
                if isinstance(cause, NoNode | BadVersion):
                    last = cause
                    continue  # removed, replaced, or our lock vanished meanwhile: look again
                raise cause from exc
            # marked entries never change (replace checks the locks container)
            await self._discard(path, ref, stat.version)
            return True
        assert last is not None
        raise last  # it kept changing under us

    async def _finish_removal(self, path: str) -> bool:
        """Delete the pointer node of an entry marked for deletion, then its payload.

        False if the entry is no longer marked (re-added meanwhile): then nothing is touched.
        """
        try:
            data, stat = await self._driver.get(path)
        except NoNode:
            return True
        # the entry may have been removed and re-added since we saw it marked; _discard only
        # deletes a pointer without children, so a live entry (and its blob) stays
        return await self._discard(path, self._pointer(path, data), stat.version, gone_ok=False)

    async def _discard(
        self, path: str, ref: BlobRef, version: int, *, gone_ok: bool = True
    ) -> bool:
        """Delete the marked pointer ``path`` (fenced), then the blob ``ref`` it named.

        The pointer goes first: a deposed caller is refused (Fenced) before any blob is touched,
        and a crash in between leaves garbage (an orphaned blob), never a dangling pointer.
        ``gone_ok``: ``ref`` is known to be the marked entry's payload, so discard it even if
        someone else deleted the pointer already. False if the pointer is live again.
        """
        try:
            await self._writer.commit([Delete(path, version)])
        except TransactionFailed as exc:
            cause = exc.cause
            if isinstance(cause, NotEmpty | BadVersion):
                return False  # re-added (it has locks again) or changed: not garbage any more
            if not isinstance(cause, NoNode):
                raise cause from exc
            if not gone_ok:
                return True  # whoever deleted the pointer discards the blob it read
        await self._blobs.delete(ref)
        return True

    async def cleanup_marked_for_deletion(self) -> list[str]:
        """Finish the removal of entries left marked for deletion; the names removed."""
        removed = []
        for name in await self._all_names():
            path = f"{self.root}/{name}"
            if await self._driver.exists(path) is not None and await self._marked(path):
                if await self._finish_removal(path):
                    removed.append(name)
        return removed

    async def remove_all(self) -> list[str]:
        """Try to remove every entry; the names that others still hold."""
        kept = [n for n in await self.names() if not await self.release_and_try_remove(n)]
        await self.cleanup_marked_for_deletion()
        return kept

    async def close(self) -> None:
        """Release our locks; the data stays. Lost contact is fine: ephemeral locks go anyway."""
        try:
            await self.release_all()
        except (ConnectionLost, SessionExpired):
            pass
