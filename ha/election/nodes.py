"""The election's nodes: where they live, and the backend calls each effect needs.

An election at ``PATH`` is a queue (protocol 2; ``ha/admin/`` reads it all from outside)::

    PATH/n/TICKET_SEQ  ephemeral and sequential, holding the contender's identity: one per
                       contender in the queue. The lowest SEQ leads; the node's creation order
                       (``Stat.created``: ZooKeeper's czxid) is that leader's fencing token.
    PATH/b/TICKET      persistent, ``ha.breadcrumb/2`` JSON (identity, data): created in the
                       same transaction as the node, deleted with it by a graceful exit, left
                       behind by a crash for the next leader to fence.
    PATH/members/ID    ephemeral, one per member (``ha/membership/members.py``)
    PATH/failover      the last failover request (``ha/membership/requests.py``)
    PATH/pause         there while the election is paused (``ha pause``; machine.py, P16)
    PATH/history       the last leaders and the last refused fence (``history.py``)

What the names say (the ticket grammar, with its priority) and the breadcrumb's encoding are
``names.py``'s: pure, for the machine. Every path sits in this file, as etcd's ``election.go``
holds its keys: the elector, ``ha status``, ``ha run`` and the demo go through
``ElectionNodes``. The calls the machine's effects need are here too, each answered as the
machine's input (``events.py``), so the runner only picks the call and bounds it in time.

Blocking and cancellation: each call waits for one or two backend round trips and has no
timeout of its own; the elector bounds it with its op timeout. Cancelled, a call is like any
interrupted request: a join may or may not have applied, and the machine finds out by listing
the queue for its ticket.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar
from urllib.parse import quote
from weakref import WeakSet

import anyio

from ..drivers.base import Check, Create, Delete, Driver, Op, Stat
from ..errors import NodeExists, NoNode, TransactionFailed
from .events import CrumbsRead, NotQueued, PredecessorGone, Queued, Watching
from .names import (
    Breadcrumb,
    QueueEntry,
    encode_breadcrumb,
    in_order,
    parse_entry,
    with_epoch,
)

__all__ = ("ElectionNodes",)

# The drivers whose last join found its election new (no queue yet): their next joins make the
# election and its folders in the join's own transaction, one round trip where a new election
# took three or more (the join refused, its folders made, the join again): ten thousand
# elections started in one process are new but for the first joins. A join that finds its
# election there after all takes the driver out, and goes the usual way.
_new_elections: WeakSet[Driver] = WeakSet()


# --- the nodes -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ElectionNodes:
    """The nodes of the election at ``path``, and the backend calls on them."""

    path: str

    @property
    def queue(self) -> str:
        return f"{self.path}/n"

    @property
    def crumbs(self) -> str:
        return f"{self.path}/b"

    def node(self, name: str) -> str:
        return f"{self.queue}/{name}"

    def crumb(self, ticket: str) -> str:
        return f"{self.crumbs}/{ticket}"

    @property
    def members(self) -> str:
        return f"{self.path}/members"

    def member(self, identity: bytes | str) -> str:
        """One supervisor's node: its identity, percent-encoded into one path segment."""
        return f"{self.members}/{quote(identity, safe='')}"

    @property
    def failover(self) -> str:
        return f"{self.path}/failover"

    @property
    def pause(self) -> str:
        return f"{self.path}/pause"

    @property
    def history(self) -> str:
        return f"{self.path}/history"

    async def _paused(self, driver: Driver) -> bool:
        """Whether the pause node is there (read beside the queue: no round trip of its own)."""
        return await driver.exists(self.pause) is not None

    # --- reads --------------------------------------------------------------------------------

    async def entries(self, driver: Driver) -> list[QueueEntry]:
        """The queue in order, leader first; [] when the election has no queue yet."""
        try:
            return in_order(await driver.children(self.queue))
        except NoNode:
            return []

    async def find(
        self, driver: Driver, session: int, ticket: str, token: int | None, node: str | None = None
    ) -> Queued | NotQueued:
        """Where our node (by ticket) stands: the names below it, and its token.

        ``token`` is the one already known (None: read the node's creation order once; beside
        the listing when ``node``, the name our join created, is known). The breadcrumbs are
        listed beside the queue, in the same round trip: a contender that finds itself first,
        with every breadcrumb owned by a node of this listing, has nobody to fence (a
        breadcrumb left by a leader is never owned: its node does not come back). A failed
        listing of the breadcrumbs only leaves that unknown (``strays``).
        """
        calls: list[Awaitable[Any]] = [
            self.entries(driver),
            _unknown(self._tickets(driver)),
            self._paused(driver),
        ]
        if token is None and node is not None:
            calls.append(driver.exists(self.node(node)))
        entries, tickets, paused, *ours = await concurrently(*calls)
        index = next((i for i, e in enumerate(entries) if e.ticket == ticket), None)
        if index is None:
            return NotQueued(session)
        entry = entries[index]
        if token is None:
            if ours and entry.name == node:
                stat = ours[0]
            else:
                stat = await driver.exists(self.node(entry.name))
            if stat is None:
                return NotQueued(session)
            token = stat.created
        below = tuple(e.name for e in entries[:index])
        holder = entries[0].identity if entries else b""
        owned = {e.ticket for e in entries}
        strays = tickets is None or any(t not in owned for t in tickets)
        behind = index < len(entries) - 1
        return Queued(session, entry.name, token, below, holder, strays, paused, behind)

    async def watch(
        self, driver: Driver, session: int, predecessor: str, first: bool
    ) -> Watching | PredecessorGone:
        """Read the node just below ours (the caller has subscribed to it and its breadcrumb).

        When it is ``first`` (the leader), also read its breadcrumb, for its fence hook, and
        tell whether other breadcrumbs lie about that no live node owns: a leader that crashed
        while fencing leaves those, and its successor must then read them all.
        """
        entry = parse_entry(predecessor)
        assert entry is not None
        node_stat: Stat | None
        if not first:
            node_stat, paused = await concurrently(
                driver.exists(self.node(predecessor)), self._paused(driver)
            )
            if node_stat is None:
                return PredecessorGone(session, predecessor)
            return Watching(session, predecessor, None, True, paused)
        node_stat, crumb, tickets, live, paused = await concurrently(
            driver.exists(self.node(predecessor)),
            _absent(driver.get(self.crumb(entry.ticket))),
            self._tickets(driver),
            self.entries(driver),
            self._paused(driver),
        )
        if node_stat is None:
            return PredecessorGone(session, predecessor)
        raw = None if crumb is None else with_epoch(crumb[0], node_stat.created)
        owned = {e.ticket for e in live}
        return Watching(session, predecessor, raw, any(t not in owned for t in tickets), paused)

    async def read_crumbs(
        self, driver: Driver, session: int, ticket: str, token: int
    ) -> CrumbsRead:
        """The breadcrumbs a new leader must fence: those older than its own node (token)
        whose node is gone, oldest first, each as its fence hook gets it; ours are included
        (the machine skips fencing our own identity but clears them)."""
        tickets, entries, paused = await concurrently(
            self._tickets(driver), self.entries(driver), self._paused(driver)
        )
        owned = {e.ticket for e in entries} | {ticket}
        unowned = [t for t in tickets if t not in owned]
        crumbs = await concurrently(*(_absent(driver.get(self.crumb(t))) for t in unowned))
        found = sorted(
            (stat.created, t, with_epoch(raw, stat.created))
            for t, got in zip(unowned, crumbs, strict=True)
            if got is not None
            for raw, stat in [got]
            if stat.created < token
        )
        return CrumbsRead(session, tuple((t, raw) for _, t, raw in found), paused)

    async def _tickets(self, driver: Driver) -> list[str]:
        """The breadcrumbs' names (tickets); [] when there are none yet."""
        got: list[str] | None = await _absent(driver.children(self.crumbs))
        return got or []

    # --- writes -------------------------------------------------------------------------------

    async def join(self, driver: Driver, ticket: str, crumb: Breadcrumb) -> str:
        """One transaction: our node at the back of the queue and its breadcrumb.

        Returns the node's name. Raises ``NodeExists`` if the ticket is taken (the machine
        joins again with another) and ``DriverError`` for the rest.
        """
        name, _ = await self._join(driver, ticket, crumb)
        return name

    async def enter(
        self, driver: Driver, session: int, ticket: str, crumb: Breadcrumb
    ) -> Queued | NotQueued:
        """``join``, then where our node stands (``find``). An election made by our join's
        transaction held nothing but our node and breadcrumb when it applied: we were first,
        with nobody to fence and nobody behind, as a listing made then would have said;
        whoever joins later lists after it and finds us first. Only our node's token is read
        then (and whether it still lives), not the queue and the breadcrumbs; the pause is read
        beside it, as the listing read it: a pause written since the join applied must hold us
        although its event comes later (a poll later on sqlite)."""
        node, made = await self._join(driver, ticket, crumb)
        if not made:
            return await self.find(driver, session, ticket, None, node)
        stat, paused = await concurrently(driver.exists(self.node(node)), self._paused(driver))
        entry = parse_entry(node)
        if stat is None or entry is None:
            return NotQueued(session)
        return Queued(session, node, stat.created, (), entry.identity, False, paused, False)

    async def _join(self, driver: Driver, ticket: str, crumb: Breadcrumb) -> tuple[str, bool]:
        """``join``: the node's name, and whether the transaction made the election."""
        ops: list[Op] = [
            Create(self.node(f"{ticket}_"), crumb.identity, ephemeral=True, sequential=True),
            Create(self.crumb(ticket), encode_breadcrumb(crumb)),
        ]
        if driver in _new_elections:
            made = await self._join_new(driver, ops)
            if made is not None:
                return made, True
        for attempt in range(2):
            try:
                results = await driver.transaction(ops)
            except TransactionFailed as exc:
                if isinstance(exc.cause, NoNode) and attempt == 0:
                    # a new election: make its two folders, then try once more
                    _new_elections.add(driver)
                    await driver.ensure_paths([self.queue, self.crumbs])
                    continue
                _raise_cause(exc)
            return _name_of(results[0]), False
        raise AssertionError("unreachable")

    async def _join_new(self, driver: Driver, ops: list[Op]) -> str | None:
        """``join`` of an election taken for new: the election and its two folders created in
        the join's transaction, as ``ensure_paths`` makes them (empty, persistent). None when
        one of them is there already, or the election's parent is missing: the usual way then
        (which makes the parents)."""
        made: list[Op] = [Create(self.path), Create(self.queue), Create(self.crumbs)]
        try:
            results = await driver.transaction([*made, *ops])
        except TransactionFailed as exc:
            if exc.index >= len(made):
                _raise_cause(exc)
            if isinstance(exc.cause, NodeExists):
                _new_elections.discard(driver)  # not new: joins go the usual way again
            return None
        return _name_of(results[len(made)])

    async def clear(self, driver: Driver, node: str, tickets: Sequence[str]) -> bool:
        """Delete the breadcrumbs of ``tickets`` (fenced, or ours from before) while our node
        lives. False when our node is gone; breadcrumbs already deleted are skipped."""
        left = list(tickets)
        while left:
            ops: list[Op] = [Check(self.node(node)), *(Delete(self.crumb(t)) for t in left)]
            try:
                await driver.transaction(ops)
            except TransactionFailed as exc:
                if exc.index == 0:
                    return False
                del left[exc.index - 1]
                continue
            return True
        return True

    async def resign(self, driver: Driver, ticket: str, node: str) -> None:
        """A graceful exit: our breadcrumb, then our node, in one transaction.

        The successor, which watches both, sees the breadcrumb go and knows that nobody needs
        fencing. If the node is gone already, the breadcrumb is left (the next leader fences
        us, which is safe); ``DriverError`` is raised when the backend cannot be reached.
        """
        await self._exit(driver, ticket, node, orphan_crumb=False)

    async def leave(
        self, driver: Driver, ticket: str, node: str | None, *, keep_crumb: bool
    ) -> None:
        """Delete our node (found by ticket when its name is unknown) and, unless
        ``keep_crumb``, our breadcrumb with it (only once our work has stopped): a successor
        then sees it go as after a resign, and fences nobody."""
        if node is None:
            node = next((e.name for e in await self.entries(driver) if e.ticket == ticket), None)
        if node is None:
            if not keep_crumb:
                await self.drop_crumb(driver, ticket)
        elif keep_crumb:
            await _delete_if_there(driver, self.node(node))
        else:
            await self._exit(driver, ticket, node, orphan_crumb=True)

    async def _exit(self, driver: Driver, ticket: str, node: str, *, orphan_crumb: bool) -> None:
        """Our breadcrumb and our node in one transaction: a breadcrumb never goes while its
        node lives, so its deletion alone tells a successor that the leader is gone (P6).
        With ``orphan_crumb`` the breadcrumb goes even when the node is gone already."""
        try:
            await driver.transaction([Delete(self.crumb(ticket)), Delete(self.node(node))])
        except TransactionFailed as exc:
            if exc.index == 0:  # no breadcrumb: leave the queue all the same
                await _delete_if_there(driver, self.node(node))
            elif orphan_crumb:
                await self.drop_crumb(driver, ticket)

    async def drop_crumb(self, driver: Driver, ticket: str) -> None:
        """Delete a breadcrumb nobody needs to fence (its owner never led, or left cleanly)."""
        await _delete_if_there(driver, self.crumb(ticket))


def _name_of(created: str | Stat | None) -> str:
    """The name of the queue node a join's transaction created."""
    assert isinstance(created, str)
    return created.rsplit("/", 1)[1]


def _raise_cause(exc: TransactionFailed) -> NoReturn:
    """A join refused: its cause, ``NodeExists`` (the ticket is taken) on its own."""
    if isinstance(exc.cause, NodeExists):
        raise exc.cause from None
    raise exc.cause from exc


async def _delete_if_there(driver: Driver, path: str) -> None:
    try:
        await driver.delete(path)
    except NoNode:
        pass


# --- concurrent reads ----------------------------------------------------------------------------

T = TypeVar("T")


async def concurrently(*calls: Awaitable[Any]) -> list[Any]:
    """Await ``calls`` at once (one round trip for several reads); their results, in order.

    The first error is raised once every call has ended. No child raises: an error beside a
    cancellation (the op's timeout) would leave the task group as a BaseExceptionGroup that
    nothing above can handle (trio).
    """
    results: list[Any] = [None] * len(calls)
    errors: list[Exception] = []

    async def run(index: int, call: Awaitable[Any]) -> None:
        try:
            results[index] = await call
        except Exception as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        for index, call in enumerate(calls):
            tg.start_soon(run, index, call)
    if errors:
        raise errors[0]
    return results


async def _absent(call: Awaitable[T]) -> T | None:
    """``call``'s answer, or None for a node that does not exist."""
    try:
        return await call
    except NoNode:
        return None


async def _unknown(call: Awaitable[T]) -> T | None:
    """``call``'s answer, or None when it failed (what it would have told stays unknown)."""
    try:
        return await call
    except Exception:
        return None
