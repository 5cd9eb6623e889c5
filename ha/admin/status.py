"""Reading an election from outside: ``election_status`` (one reading), ``watch_status``.

The election is a queue (``ha/election/nodes.py``): its first node leads, and that node's
creation order is the leader's epoch. A reading lists the queue in order (``contenders``), the
breadcrumbs no live node owns (``leftovers``: a crashed leader's, which the leader fences before
it acts, or a crashed standby's), the members and the failover request. It never raises for odd
contents: a corrupt or foreign node lands in ``problems``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field, replace
from typing import Any

import anyio

from ..drivers.base import Driver, SessionLease, Subscription, TreeSize, validate_path
from ..election.history import FenceFailure, Term, read_history
from ..election.names import Breadcrumb, decode_breadcrumb, parse_entry, priority_of
from ..election.nodes import ElectionNodes
from ..errors import ConfigurationError, NoNode
from ..membership.members import read_members
from ..membership.records import FailoverRequest, Member, Pause, b64, text
from .leases import lease_json, read_leases

__all__ = (
    "Contender",
    "ElectionStatus",
    "Leftover",
    "check_election",
    "election_status",
    "read_node",
    "watch_status",
)

# A join into an empty queue changes no node anyone can watch (its name is new): while there is
# no leader, a watch looks this often, however long its fallback.
IDLE_POLL = 0.25


def check_election(path: str) -> str:
    """``path`` if it can be an election's node (any node but the root), else raise."""
    validate_path(path)
    if path == "/":
        raise ConfigurationError("the election path must not be the root '/'")
    return path


def _crumb_json(raw: bytes | None, crumb: Breadcrumb | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    doc: dict[str, Any] = {"raw_b64": b64(raw), "valid": crumb is not None}
    if crumb is not None:
        doc |= {"identity": text(crumb.identity), "epoch": crumb.epoch, "data": text(crumb.data)}
    return doc


def _decode(raw: bytes, epoch: int) -> Breadcrumb | None:
    """A stored breadcrumb with its owner's epoch (stored ones have none), or None."""
    crumb = decode_breadcrumb(raw)
    return None if crumb is None else Breadcrumb(crumb.identity, epoch, crumb.data)


@dataclass(frozen=True, slots=True)
class Contender:
    """One node of the queue; the first leads."""

    name: str  # the node's name under PATH/n: TICKET_SEQ
    ticket: str  # its breadcrumb's name under PATH/b
    identity: bytes
    epoch: int  # the node's creation order: the fencing token of its term as leader
    session: int | None  # the session holding it (None: a persistent node, held by no one)
    joined: float  # wall clock of its creation
    breadcrumb: Breadcrumb | None = None
    breadcrumb_raw: bytes | None = None  # None: no breadcrumb (it is leaving)
    lease: SessionLease | None = None  # its session's, if read and the backend tells

    @property
    def priority(self) -> int:
        """The priority its join published (0: none; ``ha/election/names.py``)."""
        return priority_of(self.ticket)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "identity": text(self.identity),
            "epoch": self.epoch,
            "priority": self.priority,
            "session": self.session,
            "joined": self.joined,
            "breadcrumb": _crumb_json(self.breadcrumb_raw, self.breadcrumb),
            "lease": lease_json(self.lease),
        }


@dataclass(frozen=True, slots=True)
class Leftover:
    """A breadcrumb whose node is gone: its contender crashed (or is just leaving).

    ``awaits_fence``: it is older than the leader (or there is no leader), so the leader
    fences its owner before it acts, then deletes it. A newer one is a standby's that crashed
    behind the leader: a later leader fences it.
    """

    ticket: str
    epoch: int  # its node's creation order (made in one transaction with it)
    raw: bytes
    breadcrumb: Breadcrumb | None
    awaits_fence: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "ticket": self.ticket,
            "epoch": self.epoch,
            "awaits_fence": self.awaits_fence,
            "breadcrumb": _crumb_json(self.raw, self.breadcrumb),
        }


@dataclass(frozen=True, slots=True)
class ElectionStatus:
    """One reading of an election.

    ``holder`` is the queue's first contender, the leader. ``active`` is the same identity once
    it may act: no breadcrumb older than its node is left to fence (or its ``ha run`` member
    says it is active at this epoch). ``epoch`` is the leader's token, ``since`` when it took
    over as its member tells, else when it joined the queue.
    """

    path: str
    exists: bool
    holder: bytes | None = None  # the leader (may still be fencing)
    holder_session: int | None = None
    active: bytes | None = None
    epoch: int | None = None
    since: float | None = None
    breadcrumb: Breadcrumb | None = None  # the leader's
    breadcrumb_raw: bytes | None = None
    members: tuple[Member, ...] = ()
    failover: FailoverRequest | None = None
    problems: tuple[str, ...] = field(default=())
    contenders: tuple[Contender, ...] = ()  # the queue in order, the leader first
    leftovers: tuple[Leftover, ...] = ()  # oldest first
    paused: Pause | None = None  # while paused (``pause.py``)
    last_term: Term | None = None  # the last term the history recorded
    fence_failure: FenceFailure | None = None  # the last refused fence the history recorded
    member_leases: tuple[SessionLease | None, ...] = ()  # the members' sessions', in order
    leases_told: bool = False  # leases were read and the backend tells them (``leases.py``)
    tree: TreeSize | None = None  # the backend's one object holding the tree, if it has a limit

    @property
    def active_lease(self) -> SessionLease | None:
        """The active's session lease, when known: its "expires in"."""
        return self.contenders[0].lease if self.active is not None else None

    def members_with_leases(self) -> list[tuple[Member, SessionLease | None]]:
        """Each member with its session's lease (None: not read, not told, or gone)."""
        leases = self.member_leases or (None,) * len(self.members)
        return list(zip(self.members, leases, strict=True))

    @property
    def leader(self) -> tuple[bytes, int] | None:
        """(identity, epoch) of the active, or None: what ``ha watch`` reports changes of."""
        if self.active is None or self.epoch is None:
            return None
        return self.active, self.epoch

    @property
    def standbys(self) -> tuple[Contender, ...]:
        """The contenders behind the leader, in the order they would take over."""
        return self.contenders[1:]

    @property
    def failover_pending(self) -> bool:
        return self.failover is not None and self.failover.epoch == self.epoch

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "exists": self.exists,
            "active": None if self.active is None else text(self.active),
            "epoch": self.epoch,
            "since": self.since,
            "holder": None if self.holder is None else text(self.holder),
            "breadcrumb": _crumb_json(self.breadcrumb_raw, self.breadcrumb),
            "contenders": [c.to_json() for c in self.contenders],
            "leftovers": [c.to_json() for c in self.leftovers],
            "members": [
                m.to_json() | {"lease": lease_json(lease)}
                for m, lease in self.members_with_leases()
            ],
            "failover": None if self.failover is None else self.failover.to_json(),
            "failover_pending": self.failover_pending,
            "problems": list(self.problems),
            "tree": _tree_json(self.tree),
        } | (self._more_json() if self.exists else {})

    def _more_json(self) -> dict[str, Any]:
        """Keys of an election that exists (one that does not has only the ones above)."""
        term, failed = self.last_term, self.fence_failure
        return {
            "leases_told": self.leases_told,
            "active_lease": lease_json(self.active_lease),
            "paused": None if self.paused is None else self.paused.to_json(),
            "last_term": None
            if term is None
            else {
                "epoch": term.epoch,
                "identity": text(term.identity),
                "started": term.started,
                "cause": term.cause,
                "ended": term.ended,
                "end_cause": term.end_cause,
            },
            "fence_failure": None
            if failed is None
            else {
                "by": text(failed.by),
                "old": failed.old,
                "error": failed.error,
                "at": failed.at,
                "count": failed.count,
            },
        }


def _tree_json(size: TreeSize | None) -> dict[str, Any] | None:
    if size is None:
        return None
    return {"where": size.where, "bytes": size.used, "limit": size.limit, "nodes": size.nodes}


async def read_node(driver: Driver, path: str) -> tuple[bytes, float, int] | None:
    """(data, mtime, version) or None."""
    try:
        data, stat = await driver.get(path)
    except NoNode:
        return None
    return data, stat.mtime, stat.version


async def _names(driver: Driver, path: str) -> list[str]:
    try:
        return await driver.children(path)
    except NoNode:
        return []


async def election_status(
    driver: Driver, path: str, *, leases: bool = False, tree_size: bool = False
) -> ElectionStatus:
    """Read the election at ``path``. Never raises for odd contents: they land in ``problems``.
    ``leases``: read the contenders' and members' session leases too (``leases.py``).
    ``tree_size``: read how full the backend's one object holding the tree is, where the
    backend limits it (``Driver.tree_size``: a Kubernetes ConfigMap; one more read there).

    The nodes are read one by one; if the queue changed meanwhile, they are read again (a few
    times), so a reading is consistent unless the election is changing very fast.
    """
    check_election(path)
    queue = ElectionNodes(path).queue
    for _ in range(3):
        before = await _names(driver, queue)
        status = await _read_status(driver, path, before, leases)
        if await _names(driver, queue) == before:
            break
    if tree_size:
        status = replace(status, tree=await driver.tree_size())
    return status


async def _read_queue(
    driver: Driver, nodes: ElectionNodes, names: list[str], problems: list[str]
) -> list[Contender]:
    entries = []
    for name in names:
        entry = parse_entry(name)
        if entry is None:
            problems.append(f"n/{name} is not an ha queue node (foreign): contenders ignore it")
        else:
            entries.append(entry)
    entries.sort(key=lambda e: e.seq)
    contenders = []
    for entry in entries:
        try:
            _, stat = await driver.get(nodes.node(entry.name))
        except NoNode:
            continue  # it left while we read
        if stat.ephemeral_owner is None:
            problems.append(
                f"n/{entry.name} is held by no session (not ephemeral): it blocks the queue"
                " (`ha format --force` removes it)"
            )
        raw = crumb = None
        got = await read_node(driver, nodes.crumb(entry.ticket))
        if got is not None:
            raw = got[0]
            crumb = _decode(raw, stat.created)
            if crumb is None:
                problems.append(f"b/{entry.ticket} is not an ha breadcrumb (corrupt or foreign)")
        contenders.append(
            Contender(
                entry.name,
                entry.ticket,
                entry.identity,
                stat.created,
                stat.ephemeral_owner,
                stat.mtime,
                crumb,
                raw,
            )
        )
    return contenders


async def _read_leftovers(
    driver: Driver,
    nodes: ElectionNodes,
    contenders: list[Contender],
    problems: list[str],
) -> list[Leftover]:
    owned = {c.ticket for c in contenders}
    leader = contenders[0].epoch if contenders else None
    found = []
    for ticket in await _names(driver, nodes.crumbs):
        if ticket in owned:
            continue
        try:
            raw, stat = await driver.get(nodes.crumb(ticket))
        except NoNode:
            continue  # fenced and cleared while we read
        crumb = _decode(raw, stat.created)
        if crumb is None:
            problems.append(f"b/{ticket} is not an ha breadcrumb (corrupt or foreign)")
        awaits = leader is None or stat.created < leader
        found.append(Leftover(ticket, stat.created, raw, crumb, awaits))
    found.sort(key=lambda c: c.epoch)
    return found


async def _read_status(
    driver: Driver, path: str, names: list[str], with_leases: bool
) -> ElectionStatus:
    problems: list[str] = []
    nodes = ElectionNodes(path)
    if await driver.exists(path) is None:
        return ElectionStatus(path, exists=False)
    contenders = await _read_queue(driver, nodes, names, problems)
    leftovers = await _read_leftovers(driver, nodes, contenders, problems)
    failover = None
    got = await read_node(driver, nodes.failover)
    if got is not None:
        failover = FailoverRequest.decode(got[0])
        if failover is None:
            problems.append("the failover request node is not an ha failover request")
    found_members = await read_members(driver, path)
    members = tuple(m for m, _ in found_members)
    told = with_leases and driver.capabilities.session_leases
    leases = {}
    if told:
        owners = [c.session for c in contenders] + [owner for _, owner in found_members]
        leases = await read_leases(driver, owners)
        contenders = [replace(c, lease=leases.get(c.session or 0)) for c in contenders]
    member_leases = tuple(leases.get(owner or 0) for _, owner in found_members)
    got = await read_node(driver, nodes.pause)
    paused = None if got is None else Pause.decode(got[0])
    found = await read_history(driver, nodes)
    history = None if found is None else found[0]
    last = history.terms[-1] if history is not None and history.terms else None
    refused = None if history is None else history.fence_failure
    if not contenders:
        return ElectionStatus(
            path,
            True,
            members=members,
            failover=failover,
            problems=tuple(problems),
            leftovers=tuple(leftovers),
            paused=paused,
            last_term=last,
            fence_failure=refused,
            member_leases=member_leases,
            leases_told=told,
        )
    first = contenders[0]
    said = next(
        (
            m
            for m in members
            if m.identity == first.identity and m.state == "active" and m.epoch == first.epoch
        ),
        None,
    )
    active = since = None
    # while paused, a leader that came after the pause waits (P16): active only if it says so,
    # or if it was the active the pause found
    waits = paused is not None and said is None and paused.epoch != first.epoch
    if said is not None or not (waits or any(c.awaits_fence for c in leftovers)):
        active = first.identity
        since = said.since if said is not None else first.joined
    return ElectionStatus(
        path,
        True,
        first.identity,
        first.session,
        active,
        first.epoch,
        since,
        first.breadcrumb,
        first.breadcrumb_raw,
        members,
        failover,
        tuple(problems),
        tuple(contenders),
        tuple(leftovers),
        paused,
        last,
        refused,
        member_leases,
        told,
    )


def _watched(nodes: ElectionNodes, status: ElectionStatus) -> set[str]:
    """The nodes whose change may change the reading: every node it found, their folders."""
    found = {nodes.path, nodes.queue, nodes.crumbs, nodes.failover}
    for c in status.contenders:
        found |= {nodes.node(c.name), nodes.crumb(c.ticket)}
    found.update(nodes.crumb(c.ticket) for c in status.leftovers)
    return found


async def watch_status(
    driver: Driver, path: str, *, fallback: float = 2.0
) -> AsyncGenerator[ElectionStatus, None]:
    """Yield the election's status now and again after every change of its nodes.

    Changes are learnt from node events on every node the last reading found (the leader's
    node going, a breadcrumb fenced and cleared, the failover request): a leader change is
    seen at once. A new node's name cannot be known before it exists, so a join is seen by
    reading again: every ``fallback`` seconds (which also covers backends whose events can be
    lost, e.g. while disconnected), and every ``IDLE_POLL`` while nobody leads. Use with
    ``contextlib.aclosing``.
    """
    check_election(path)
    wake = [anyio.Event()]

    def poke(_event: object) -> None:
        wake[0].set()

    nodes = ElectionNodes(path)
    subs: dict[str, Subscription] = {}
    connection = driver.subscribe(None, poke)
    try:
        while True:
            wake[0] = anyio.Event()  # armed before reading: a change during the read is seen
            for _ in range(3):
                status = await election_status(driver, path)
                wanted = _watched(nodes, status)
                for gone in subs.keys() - wanted:
                    subs.pop(gone).close()
                new = wanted - subs.keys()
                for node in new:
                    subs[node] = driver.subscribe(node, poke)
                if not new:
                    break  # each node was watched before it was read: no change is missed
            yield status
            wait = fallback if status.holder is not None else min(fallback, IDLE_POLL)
            with anyio.move_on_after(wait):
                await wake[0].wait()
    finally:
        connection.close()
        for sub in subs.values():
            sub.close()
