"""``format_election``: prepare an election's node, like Hadoop's ``zkfc -formatZK``."""

from __future__ import annotations

from dataclasses import dataclass

from ..drivers.base import Driver
from ..election.nodes import ElectionNodes, decode_epoch, encode_epoch
from ..errors import HAError, NoNode, NotEmpty
from .records import text
from .status import check_election, read_node

__all__ = ("ElectionInUse", "FormatResult", "format_election")


class ElectionInUse(HAError):
    """The election's lock is held: formatting it would depose a running active."""


@dataclass(frozen=True, slots=True)
class FormatResult:
    path: str
    created: bool  # the election's node did not exist and was created
    removed: tuple[str, ...] = ()  # nodes cleared (with force)
    epoch: int | None = None  # the epoch counter, kept across a format
    epoch_reset: bool = False  # it was unreadable and was reset to 0
    holder: bytes | None = None  # a live lock holder left in place (with force)


async def format_election(driver: Driver, path: str, force: bool = False) -> FormatResult:
    """Prepare the election at ``path``, like Hadoop's ``zkfc -formatZK``.

    Creates the election's node and its parents. Refuses (``ElectionInUse``) while the lock is
    held, unless ``force``. With ``force`` it clears what no live session holds: a lock node
    that is not ephemeral (left by a foreign tool), members that are not ephemeral, and
    failover requests. It never removes what safety rests on: a lock held by a live session
    stays (deleting it would let a standby start while the deposed active may still be
    stopping, or is cut off and does not know), and so does the breadcrumb (without it the next
    active would skip fencing an old active that may still run). To end a live active's term,
    stop it or ask it to hand over (``ha failover``). The epoch counter is kept, so fencing
    tokens never go back; an unreadable counter is rewritten as 0 (with a higher node
    version, which still fences old writers).
    """
    check_election(path)
    nodes = ElectionNodes(path)
    created = await driver.exists(path) is None
    await driver.ensure_path(path)
    holder = None
    live_lock = False
    try:
        holder, lock_stat = await driver.get(nodes.lock)
        live_lock = lock_stat.ephemeral_owner is not None
    except NoNode:
        pass
    if holder is not None and not force:
        raise ElectionInUse(
            f"election {path} is in use: {text(holder)!r} holds its lock"
            " (stop it first, or force the format)"
        )
    epoch: int | None = None
    epoch_reset = False
    got = await read_node(driver, nodes.epoch)
    if got is not None:
        epoch = decode_epoch(got[0])
        epoch_reset = epoch is None
    if not force:
        return FormatResult(path, created, epoch=epoch, holder=None)
    removed = []
    if holder is not None and not live_lock and await _delete_tree(driver, nodes.lock):
        removed.append("lock")
    if await _delete_tree(driver, nodes.failover):
        removed.append("failover")
    if await _delete_persistent(driver, nodes.members):
        removed.append("members")
    if epoch_reset:
        await driver.set(nodes.epoch, encode_epoch(0))
        epoch = 0
    kept = holder if live_lock else None
    return FormatResult(path, created, tuple(removed), epoch, epoch_reset, kept)


async def _delete_persistent(driver: Driver, path: str) -> bool:
    """Delete the children of ``path`` that no live session holds, then ``path`` if empty."""
    found = False
    try:
        names = await driver.children(path)
    except NoNode:
        return False
    for name in names:
        try:
            _, stat = await driver.get(f"{path}/{name}")
        except NoNode:
            continue
        if stat.ephemeral_owner is None and await _delete_tree(driver, f"{path}/{name}"):
            found = True
    try:
        await driver.delete(path)
    except (NoNode, NotEmpty):
        pass
    return found


async def _delete_tree(driver: Driver, path: str) -> bool:
    """Delete ``path`` and what is below it, children first; False if it was not there.

    Node by node rather than ``delete(recursive=True)``: the memory driver's recursive delete
    fails on nested nodes (KeyError), and this works the same on every backend.
    """
    try:
        for child in await driver.children(path):
            await _delete_tree(driver, f"{path}/{child}")
        await driver.delete(path)
    except NoNode:
        return False
    return True
