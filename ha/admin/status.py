"""Reading an election from outside: ``election_status`` (one reading), ``watch_status``.

A reading never raises for odd contents: a corrupt or foreign node lands in ``problems``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

import anyio

from ..drivers.base import Driver, validate_path
from ..election.nodes import Breadcrumb, ElectionNodes, decode_breadcrumb, decode_epoch
from ..errors import ConfigurationError, NoNode
from .members import list_members
from .records import FailoverRequest, Member, b64, text

__all__ = ("ElectionStatus", "check_election", "election_status", "read_node", "watch_status")


def check_election(path: str) -> str:
    """``path`` if it can be an election's node (any node but the root), else raise."""
    validate_path(path)
    if path == "/":
        raise ConfigurationError("the election path must not be the root '/'")
    return path


@dataclass(frozen=True, slots=True)
class ElectionStatus:
    """One reading of an election. ``active`` is set only when the lock's holder has committed
    its breadcrumb at the current epoch, i.e. its ``become_active`` is running."""

    path: str
    exists: bool
    holder: bytes | None = None  # the lock's holder (may still be taking over)
    holder_session: int | None = None
    active: bytes | None = None
    epoch: int | None = None
    since: float | None = None  # wall clock when ``active`` took over
    breadcrumb: Breadcrumb | None = None
    breadcrumb_raw: bytes | None = None
    members: tuple[Member, ...] = ()
    failover: FailoverRequest | None = None
    problems: tuple[str, ...] = field(default=())

    @property
    def leader(self) -> tuple[bytes, int] | None:
        """(identity, epoch) of the active, or None: what ``ha watch`` reports changes of."""
        if self.active is None or self.epoch is None:
            return None
        return self.active, self.epoch

    @property
    def failover_pending(self) -> bool:
        return self.failover is not None and self.failover.epoch == self.epoch

    def to_json(self) -> dict[str, Any]:
        crumb: dict[str, Any] | None = None
        if self.breadcrumb_raw is not None:
            crumb = {"raw_b64": b64(self.breadcrumb_raw), "valid": self.breadcrumb is not None}
            if self.breadcrumb is not None:
                crumb |= {
                    "identity": text(self.breadcrumb.identity),
                    "epoch": self.breadcrumb.epoch,
                    "data": text(self.breadcrumb.data),
                }
        return {
            "path": self.path,
            "exists": self.exists,
            "active": None if self.active is None else text(self.active),
            "epoch": self.epoch,
            "since": self.since,
            "holder": None if self.holder is None else text(self.holder),
            "breadcrumb": crumb,
            "members": [m.to_json() for m in self.members],
            "failover": None if self.failover is None else self.failover.to_json(),
            "failover_pending": self.failover_pending,
            "problems": list(self.problems),
        }


async def read_node(driver: Driver, path: str) -> tuple[bytes, float, int] | None:
    """(data, mtime, version) or None."""
    try:
        data, stat = await driver.get(path)
    except NoNode:
        return None
    return data, stat.mtime, stat.version


async def election_status(driver: Driver, path: str) -> ElectionStatus:
    """Read the election at ``path``. Never raises for odd contents: they land in ``problems``.

    The nodes are read one by one; if the lock changed meanwhile, they are read again (a few
    times), so a reading is consistent unless the election is changing very fast.
    """
    check_election(path)
    for _ in range(3):
        status, lock_before = await _read_status(driver, path)
        lock_after = await driver.exists(ElectionNodes(path).lock)
        after = None if lock_after is None else (lock_after.ephemeral_owner, lock_after.version)
        if after == lock_before:
            break
    return status


async def _read_status(
    driver: Driver, path: str
) -> tuple[ElectionStatus, tuple[int | None, int] | None]:
    problems: list[str] = []
    nodes = ElectionNodes(path)
    if await driver.exists(path) is None:
        return ElectionStatus(path, exists=False), None
    holder = holder_session = None
    lock_key: tuple[int | None, int] | None = None
    try:
        holder, lock_stat = await driver.get(nodes.lock)
        holder_session = lock_stat.ephemeral_owner
        lock_key = (lock_stat.ephemeral_owner, lock_stat.version)
    except NoNode:
        pass
    epoch: int | None = None
    epoch_mtime: float | None = None
    got = await read_node(driver, nodes.epoch)
    if got is not None:
        epoch = decode_epoch(got[0])
        if epoch is None:
            problems.append(f"the epoch node is not a decimal number: {got[0][:40]!r}")
        else:
            epoch_mtime = got[1]
    crumb_raw: bytes | None = None
    crumb: Breadcrumb | None = None
    got = await read_node(driver, nodes.breadcrumb)
    if got is not None:
        crumb_raw = got[0]
        crumb = decode_breadcrumb(crumb_raw)
        if crumb is None:
            problems.append("the breadcrumb is not an ha breadcrumb (corrupt or foreign)")
    active = since = None
    if (
        holder is not None
        and crumb is not None
        and crumb.identity == holder
        and epoch is not None
        and crumb.epoch == epoch
    ):
        active, since = holder, epoch_mtime
    failover = None
    got = await read_node(driver, nodes.failover)
    if got is not None:
        failover = FailoverRequest.decode(got[0])
        if failover is None:
            problems.append("the failover request node is not an ha failover request")
    members = tuple(await list_members(driver, path))
    status = ElectionStatus(
        path,
        True,
        holder,
        holder_session,
        active,
        epoch,
        since,
        crumb,
        crumb_raw,
        members,
        failover,
        tuple(problems),
    )
    return status, lock_key


async def watch_status(
    driver: Driver, path: str, *, fallback: float = 2.0
) -> AsyncGenerator[ElectionStatus, None]:
    """Yield the election's status now and again after every change of its nodes.

    Changes are learnt from node events; a read every ``fallback`` seconds covers backends
    whose events can be lost (e.g. while disconnected). Use with ``contextlib.aclosing``.
    """
    check_election(path)
    wake = [anyio.Event()]

    def poke(_event: object) -> None:
        wake[0].set()

    nodes = ElectionNodes(path)
    subs = [
        driver.subscribe(node, poke)
        for node in (nodes.lock, nodes.epoch, nodes.breadcrumb, nodes.failover)
    ]
    subs.append(driver.subscribe(None, poke))
    try:
        while True:
            wake[0] = anyio.Event()  # armed before reading: a change during the read is seen
            yield await election_status(driver, path)
            with anyio.move_on_after(fallback):
                await wake[0].wait()
    finally:
        for sub in subs:
            sub.close()
