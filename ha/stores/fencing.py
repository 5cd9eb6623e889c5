"""Fenced writes: every write of a store is one transaction that starts with the lease's check.

The leader's ``Lease`` names this leader's queue node (``ha/election/nodes.py``). A store write
is ``lease.transaction(driver, ops)``, i.e. ``[*lease.fence_ops(), *ops]`` as one transaction:
the backend applies it only while that node exists, so once the leader is deposed (its node
gone, which is what lets the next one lead), a late write of the old one fails at the fence and
changes nothing (Kafka's controller epoch, Flink's leader-session-guarded writes). A failure at a fence
op becomes ``Fenced`` and is reported to the elector through ``lease.report_fenced()``; a
failure at a later op is re-raised as ``TransactionFailed`` indexed from the caller's first op.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..drivers.base import Create, Delete, Driver, Op, SetData, Stat, parent_of
from ..election.lease import Lease
from ..errors import (
    BadVersion,
    ConfigurationError,
    Fenced,
    NodeExists,
    NoNode,
    PossiblyInconsistent,
    TransactionFailed,
)

__all__ = ("PossiblyInconsistent", "Writer")  # PossiblyInconsistent lives in ha.errors


class Writer:
    """One store's way to write: fenced transactions under a lease, on one driver.

    It also remembers which container nodes exist so that a write can create missing parents
    inside its own (fenced) transaction instead of with an unfenced ``ensure_path``.
    """

    def __init__(self, driver: Driver, lease: Lease | None) -> None:
        self.driver = driver
        self._lease = lease
        self._known: set[str] = {"/"}

    @property
    def lease(self) -> Lease:
        if self._lease is None:
            raise ConfigurationError(
                "this store was opened without a lease (read-only); writes need the active's lease"
            )
        return self._lease

    async def commit(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        """Apply ``ops`` behind the fence, atomically (``Lease.transaction``: ``Fenced`` when
        the fence failed). An empty ``ops`` only checks the fence."""
        try:
            results = await self.lease.transaction(self.driver, ops)
        except (Fenced, TransactionFailed):
            self._known = {"/"}  # a stale container may be why; look again next time
            raise
        for op in ops:
            if isinstance(op, Create) and not op.ephemeral:
                self._known.add(op.path)
            elif isinstance(op, Delete):
                self._known.discard(op.path)
        return results

    async def parent_ops(self, path: str) -> list[Op]:
        """Ops that create whichever ancestors of ``path`` are missing, topmost first."""
        missing: list[str] = []
        parent = parent_of(path)
        while parent not in self._known:
            if await self.driver.exists(parent) is not None:
                self._known.add(parent)
                break
            missing.append(parent)
            parent = parent_of(parent)
        return [Create(p) for p in reversed(missing)]

    async def create(self, path: str, data: bytes) -> None:
        """Create the node (and missing parents), fenced. NodeExists if it exists."""
        for attempt in range(3):
            ops = [*await self.parent_ops(path), Create(path, data)]
            try:
                await self.commit(ops)
                return
            except TransactionFailed as exc:
                if attempt < 2 and _raced(exc.cause, path):
                    continue
                raise exc.cause from exc

    async def put(self, path: str, data: bytes) -> None:
        """Create or overwrite the node (and missing parents), fenced."""
        for attempt in range(3):
            stat = await self.driver.exists(path)
            if stat is None:
                ops = [*await self.parent_ops(path), Create(path, data)]
            else:
                ops = [SetData(path, data, stat.version)]
            try:
                await self.commit(ops)
                return
            except TransactionFailed as exc:
                # created, deleted or changed between our look and our write: look again
                if attempt < 2 and isinstance(exc.cause, (NoNode, NodeExists, BadVersion)):
                    continue
                raise exc.cause from exc

    async def delete(self, path: str) -> bool:
        """Delete the node, fenced; False if it was absent."""
        try:
            await self.commit([Delete(path)])
        except TransactionFailed as exc:
            if isinstance(exc.cause, NoNode):  # the fence held (it is checked first)
                return False
            raise exc.cause from exc
        return True


def _raced(cause: BaseException, path: str) -> bool:
    """A parent container created or removed by someone else between our look and our write."""
    if isinstance(cause, NoNode):
        return True
    return isinstance(cause, NodeExists) and cause.path != path
