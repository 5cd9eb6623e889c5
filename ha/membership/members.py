"""Member nodes: each member's ephemeral ``PATH/members/ID``, one per identity.

A member is an ``ha run`` supervisor, or a services process opened with ``members=True``. It
claims its node before taking part (``claim_member``), rewrites it on every state
change (``write_member``) and deletes it on the way out (``remove_member``); the backend removes
it when the supervisor's session ends. A node of another live session means a second supervisor
with the same identity, which is refused: two contenders with one identity would skip fencing
each other (a breadcrumb naming our own identity is taken for ours).
"""

from __future__ import annotations

import logging
from urllib.parse import unquote

import anyio

from .. import errors
from ..drivers.base import Driver
from ..election.nodes import ElectionNodes
from ..errors import HAError, NodeExists, NoNode
from .records import Member, text

__all__ = (
    "DuplicateIdentity",
    "claim_member",
    "list_members",
    "member_path",
    "read_members",
    "remove_member",
    "write_member",
)

log = logging.getLogger("ha.admin")


class DuplicateIdentity(HAError):
    """Another running supervisor already takes part with this identity."""


def member_path(path: str, identity: bytes) -> str:
    return ElectionNodes(path).member(identity)


async def claim_member(driver: Driver, path: str, member: Member, *, wait: float) -> None:
    """Create our member node, refusing an identity another live supervisor holds.

    A node of another session may be a dead supervisor's (a restart after a crash): it is
    waited out for up to ``wait`` seconds (the backend removes it within its session timeout);
    if it is still there, its owner is alive and ``DuplicateIdentity`` is raised.
    """
    node = member_path(path, member.identity)
    deadline = anyio.current_time() + wait
    waited = False
    while True:
        try:
            await driver.create(node, member.encode(), ephemeral=True, makepath=True)
            return
        except NodeExists:
            pass
        except (errors.ConnectionLost, errors.SessionExpired):  # transient: the driver reconnects
            await anyio.sleep(0.2)
            continue
        try:
            raw, stat = await driver.get(node)
        except NoNode:
            continue
        except (errors.ConnectionLost, errors.SessionExpired):
            await anyio.sleep(0.2)
            continue
        if stat.ephemeral_owner == driver.session_id:
            return
        other = Member.decode(raw)
        where = "" if other is None else f" (pid {other.pid} on {other.host}, {other.state})"
        if not waited:
            waited = True
            log.info("another supervisor with this id%s: waiting %.1fs for it to go", where, wait)
        if anyio.current_time() >= deadline:
            raise DuplicateIdentity(
                f"another supervisor with --id {text(member.identity)!r} is running in"
                f" {path}{where}: give each one its own --id"
            )
        await anyio.sleep(0.1)


async def write_member(driver: Driver, path: str, member: Member) -> None:
    """Create or update our member node (ephemeral: it goes with our session).

    Never overwrites the node of another session (a duplicate identity's): that raises
    ``DuplicateIdentity``.
    """
    node = member_path(path, member.identity)
    data = member.encode()
    stat = await driver.exists(node)
    if stat is None:
        await driver.create(node, data, ephemeral=True, makepath=True)
    elif stat.ephemeral_owner == driver.session_id:
        await driver.set(node, data, version=stat.version)
    else:
        raise DuplicateIdentity(f"the member node {node} belongs to another session")


async def remove_member(driver: Driver, path: str, identity: bytes) -> None:
    """Delete our member node; another session's (a duplicate's) is left alone."""
    node = member_path(path, identity)
    try:
        stat = await driver.exists(node)
        if stat is not None and stat.ephemeral_owner == driver.session_id:
            await driver.delete(node, version=stat.version)
    except (NoNode, errors.BadVersion):
        pass


async def list_members(driver: Driver, path: str) -> list[Member]:
    """Every member node, decoded; a foreign node shows as its name in state ``unknown``."""
    return [member for member, _ in await read_members(driver, path)]


async def read_members(driver: Driver, path: str) -> list[tuple[Member, int | None]]:
    """Every member with the session that holds its node (``list_members``)."""
    try:
        names = await driver.children(ElectionNodes(path).members)
    except NoNode:
        return []
    members = []
    for name in names:
        try:
            raw, stat = await driver.get(f"{ElectionNodes(path).members}/{name}")
        except NoNode:
            continue
        member = Member.decode(raw)
        if member is None:  # a foreign node: show it by its name
            member = Member(unquote(name).encode(), "unknown")
        members.append((member, stat.ephemeral_owner))
    return members
