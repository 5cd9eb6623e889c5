"""Every election under a prefix, for ``ha status PREFIX`` (``hdfs haadmin -getAllServiceState``).

An election is a node with both a queue and a breadcrumb folder (``n``, ``b``:
``ha/election/nodes.py``; one alone may be an election of that name under a prefix);
the walk does not go into an election's own nodes, and stops at ``MAX_DEPTH`` levels below the
prefix (a prefix is a folder of services, not a whole tree).
"""

from __future__ import annotations

from ..drivers.base import Driver
from ..errors import NoNode

__all__ = ("MAX_DEPTH", "find_elections", "is_election")

MAX_DEPTH = 4
_OWN = frozenset({"n", "b"})  # an election's queue and breadcrumbs


def _join(parent: str, name: str) -> str:
    return f"{parent.rstrip('/')}/{name}"


async def _children(driver: Driver, path: str) -> list[str]:
    try:
        return await driver.children(path)
    except NoNode:
        return []


async def is_election(driver: Driver, path: str) -> bool:
    """Whether ``path`` holds an election (its queue and breadcrumb folders)."""
    return _OWN <= set(await _children(driver, path))


async def find_elections(driver: Driver, prefix: str) -> list[str]:
    """The elections at or under ``prefix``, sorted by path."""
    found: list[str] = []
    level = [prefix]
    for _ in range(MAX_DEPTH + 1):
        below: list[str] = []
        for path in level:
            names = await _children(driver, path)
            if _OWN <= set(names):
                found.append(path)
                continue  # its own nodes are no elections
            below.extend(_join(path, name) for name in names)
        level = below
    return sorted(found)
