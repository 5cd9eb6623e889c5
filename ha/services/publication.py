"""Publishing a confirmed leader address, for one term of leadership.

While the process leads, a component's confirmed ``LeaderInfo`` is written to its node
``<root>/leader/<component>`` as an ephemeral node (it goes with the leader's session, so a
crashed leader's address does not linger). Every write is one transaction through the lease's
``Writer``, behind its fence (a check that our queue node lives: it goes with our session and
is never created again), and it is made only while the driver still has the session that won:
a deposed leader never overwrites its successor's address.

Decide, then act (httpcore's connection pool): ``plan`` is a plain function that, from what a
look at the node found, returns the transaction that makes it hold the address, or None when
it does already. ``Term.publish`` does the looks and the commits: first a create without
looking (the common case after a failover: no node yet under an existing parent), then look
and plan again whenever the node changed between our look and our write.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from ..drivers.base import Create, Delete, Driver, Op, SetData, Stat
from ..election.lease import Lease
from ..errors import BadVersion, Fenced, NodeExists, NoNode, TransactionFailed
from ..stores.fencing import Writer
from .retrieval import LeaderInfo

__all__ = ("Found", "Term", "plan")

log = logging.getLogger("ha.services")

ATTEMPTS = 6  # looks and writes per publication before giving up (a busy node: retried later)


@dataclass(frozen=True, slots=True)
class Found:
    """What a look at the leader node found."""

    stat: Stat | None  # None: there is no node
    data: bytes | None = None  # its content, read only when the node is ours
    parents: tuple[Op, ...] = ()  # the missing containers, to create with it (when there is none)


def plan(path: str, data: bytes, session: int | None, found: Found | None) -> list[Op] | None:
    """The transaction that makes ``path`` hold ``data`` as our ephemeral node, or None when
    it does already (the writer puts the fence in front). ``found`` None: not looked at,
    create it under an existing parent."""
    create = Create(path, data, ephemeral=True)
    if found is None:
        return [create]
    if found.stat is None:
        return [*found.parents, create]
    if found.stat.ephemeral_owner == session:
        return None if found.data == data else [SetData(path, data, found.stat.version)]
    # someone else's node (an old leader's, or a stray write)
    return [Delete(path, found.stat.version), create]


class Term:
    """One term of leadership: the lease and its fenced writer."""

    def __init__(self, driver: Driver, lease: Lease) -> None:
        self.driver = driver
        self.lease = lease
        self.writer = Writer(driver, lease)
        self.dirty = anyio.Event()  # a published node may need correcting

    def may_publish(self) -> bool:
        """False once leadership is going: the new leader publishes its own."""
        return self.lease.valid and self.driver.session_id == self.lease.session_id

    async def publish(
        self, name: str, path: str, info: LeaderInfo, current: Callable[[], bool]
    ) -> None:
        """Write ``info`` at ``path`` if the node does not hold it already, while ``current()``
        says the grant still wants it. Raises ``DriverError`` for lack of contact."""
        data = info.encode()
        found: Found | None = None
        for attempt in range(ATTEMPTS):
            if not self.may_publish() or not current():
                return  # the grant ended (or a newer confirm took over) while we looked
            if attempt > 0:
                found = await self._look(path)
            ops = plan(path, data, self.lease.session_id, found)
            if ops is None:
                return
            try:
                await self.writer.commit(ops)
            except Fenced:
                return  # deposed: the elector has been told, the component will be revoked
            except TransactionFailed as exc:
                if not isinstance(exc.cause, BadVersion | NodeExists | NoNode):
                    raise exc.cause from exc
                continue  # the node changed between our look and our write: look again
            log.info("%s: published %s", name, info.address)
            return

    async def _look(self, path: str) -> Found:
        stat = await self.driver.exists(path)
        if stat is None:
            return Found(None, parents=tuple(await self.writer.parent_ops(path)))
        if stat.ephemeral_owner == self.lease.session_id:
            data, stat = await self.driver.get(path)
            return Found(stat, data)
        return Found(stat)

    async def unpublish(self, name: str, path: str) -> None:
        """Remove our node at ``path`` (another's is left alone)."""
        stat = await self.driver.exists(path)
        if stat is None or stat.ephemeral_owner != self.lease.session_id:
            return
        try:
            await self.writer.commit([Delete(path, stat.version)])
        except TransactionFailed as exc:
            log.info("%s: address not removed: %s", name, exc)
