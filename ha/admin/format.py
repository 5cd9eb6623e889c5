"""``format_election``: prepare an election's nodes, like Hadoop's ``zkfc -formatZK``."""

from __future__ import annotations

from dataclasses import dataclass

from ..drivers.base import Driver
from ..election.names import parse_entry
from ..election.nodes import ElectionNodes
from ..errors import HAError, NoNode, NotEmpty
from ..membership.records import text
from .status import check_election

__all__ = ("ElectionInUse", "FormatResult", "format_election")


class ElectionInUse(HAError):
    """A contender is in the election's queue: formatting it would depose a running leader."""


@dataclass(frozen=True, slots=True)
class FormatResult:
    path: str
    created: bool  # the election's node did not exist and was created
    removed: tuple[str, ...] = ()  # nodes cleared (with force): "n/NAME", "failover", "members"
    epoch: int | None = None  # the live leader's epoch (its node is kept)
    # always False: the token is a node's creation order, there is no counter to reset (the
    # field stays for the callers that print it)
    holder: bytes | None = None  # a live leader left in place (with force)


async def format_election(driver: Driver, path: str, force: bool = False) -> FormatResult:
    """Prepare the election at ``path``, like Hadoop's ``zkfc -formatZK``.

    Creates the election's node, its parents, its queue ``PATH/n`` and its breadcrumbs
    ``PATH/b``. Refuses (``ElectionInUse``) while a contender is in the queue, unless ``force``.
    With ``force`` it clears what no live session holds and would confuse contenders: queue
    nodes that are not ephemeral (one named as a contender's would lead for ever) or not an
    ha queue node, members that are not ephemeral, and the failover request. It never removes
    what safety rests on: a live contender's node stays (deleting the leader's would let its
    successor start while the deposed active may still be stopping, or is cut off and does not
    know), and so does every breadcrumb (without the one a crashed leader left, the next leader
    would skip fencing an old active that may still run). To end a live active's term, stop it
    or ask it to hand over (``ha failover``). Tokens need no care: they are creation orders,
    which never go back.
    """
    check_election(path)
    nodes = ElectionNodes(path)
    created = await driver.exists(path) is None
    for folder in (nodes.queue, nodes.crumbs):
        await driver.ensure_path(folder)
    live: list[tuple[int, bytes, int]] = []  # (seq, identity, epoch) of the live contenders
    queued: list[tuple[int, bytes]] = []  # (seq, identity) of every contender-shaped node
    stale: list[str] = []  # queue nodes no session holds
    for name in await _children(driver, nodes.queue):
        entry = parse_entry(name)
        stat = await driver.exists(nodes.node(name))
        if stat is None:
            continue
        if entry is not None:
            queued.append((entry.seq, entry.identity))
            if stat.ephemeral_owner is not None:
                live.append((entry.seq, entry.identity, stat.created))
        if stat.ephemeral_owner is None:
            stale.append(name)
    if queued and not force:
        raise ElectionInUse(
            f"election {path} is in use: {text(min(queued)[1])!r} is in its queue"
            " (stop it first, or force the format)"
        )
    if not force:
        return FormatResult(path, created)
    removed = [f"n/{name}" for name in stale if await _delete_tree(driver, nodes.node(name))]
    if await _delete_tree(driver, nodes.failover):
        removed.append("failover")
    if await _delete_persistent(driver, nodes.members):
        removed.append("members")
    leader = min(live, default=None)
    if leader is None:
        return FormatResult(path, created, tuple(removed))
    return FormatResult(path, created, tuple(removed), leader[2], holder=leader[1])


async def _children(driver: Driver, path: str) -> list[str]:
    try:
        return await driver.children(path)
    except NoNode:
        return []


async def _delete_persistent(driver: Driver, path: str) -> bool:
    """Delete the children of ``path`` that no live session holds, then ``path`` if empty."""
    found = False
    for name in await _children(driver, path):
        stat = await driver.exists(f"{path}/{name}")
        if stat is not None and stat.ephemeral_owner is None:
            found = await _delete_tree(driver, f"{path}/{name}") or found
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
