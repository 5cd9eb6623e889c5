"""Removing a cluster's nodes at the end of its life, without harming a successor.

``HAServices.close_and_cleanup_all_data`` removes the stores under the leader's fence, revokes
its components, and then, still leading, calls ``remove_cluster_nodes``: every node under the
cluster's root goes under the same fence (``lease.transaction``), so the wipe stops as soon as
this process is deposed and never touches a successor's nodes. Of the election it removes only
what no live contender needs: the failover request, the members, and the breadcrumbs whose node
is gone (this leader fenced the older ones when it took over; the newer ones are standbys' that
never led). Then the process leaves the election (its breadcrumb and queue node go in one
transaction, ``ha/election/nodes.py``), and ``remove_election`` deletes the election's folders
if they are empty. A live contender's queue node, or its breadcrumb, is never deleted: a
standby still queued takes over as after any graceful exit. Nothing needs keeping for the
fencing tokens: they are creation orders, which never go back.
"""

from __future__ import annotations

import logging
from typing import Any

from ..drivers.base import Delete, Driver, post_order
from ..election.lease import Lease
from ..election.nodes import ElectionNodes
from ..errors import ConfigurationError, DriverError, Fenced, NoNode, NotEmpty, TransactionFailed

__all__ = ("NoBlobs", "remove_cluster_nodes", "remove_election")

log = logging.getLogger("ha.services")


async def remove_cluster_nodes(driver: Driver, root: str, election: str, lease: Lease) -> bool:
    """Delete, under ``lease``'s fence, every node under ``root`` but the election's queue, the
    live contenders' breadcrumbs and the folders that hold them. False if deposed meanwhile."""
    nodes = ElectionNodes(election)
    live = {e.ticket for e in await nodes.entries(driver)}
    for path in await post_order(driver, root):
        if _kept(nodes, live, path):
            continue
        try:
            await lease.transaction(driver, [Delete(path)])
        except Fenced:
            log.warning("%s: deposed during the cleanup: stopped", root)
            return False
        except (TransactionFailed, DriverError) as exc:
            log.info("%s: not removed: %s", path, exc)
    return True


def _kept(nodes: ElectionNodes, live: set[str], path: str) -> bool:
    """Whether ``path`` stays while we lead: the queue, a live contender's breadcrumb, the
    folders above them."""
    if nodes.path.startswith(path + "/") or path in (nodes.path, nodes.crumbs):
        return True
    if path == nodes.queue or path.startswith(nodes.queue + "/"):
        return True
    return path.startswith(nodes.crumbs + "/") and path.rsplit("/", 1)[1] in live


async def remove_election(driver: Driver, root: str, election: str) -> None:
    """After leaving: delete the election's folders and their parents up to ``root``, each
    only if empty (a contender still queued keeps them)."""
    nodes = ElectionNodes(election)
    paths = [nodes.queue, nodes.crumbs, nodes.members, nodes.path]
    parent = nodes.path
    while parent.startswith(root + "/"):
        parent = parent.rsplit("/", 1)[0]
        paths.append(parent)
    for path in paths:
        try:
            await driver.delete(path)
        except (NoNode, NotEmpty):
            pass
        except DriverError as exc:
            log.info("%s: not removed: %s", path, exc)


class NoBlobs:
    """Stands in when no blob store was given: then no stored payload can be found either."""

    async def put(self, prefix: str, data: bytes) -> Any:
        raise ConfigurationError("no blob store configured")

    async def get(self, ref: Any) -> bytes:
        raise ConfigurationError("no blob store configured")

    async def delete(self, ref: Any) -> None:
        return None

    async def delete_all(self) -> None:
        return None
