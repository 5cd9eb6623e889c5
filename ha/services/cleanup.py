"""Removing a cluster's nodes at the end of its life, without harming a successor.

``HAServices.close_and_cleanup_all_data`` removes the stores under the leader's fence, leaves
the election, and then calls ``remove_cluster_nodes``, which holds the election's lock once
more while the rest goes, so no standby can claim in between (it would lose its lock, and its
epoch, to the wipe). The epoch counter (and its parents) stays: fencing tokens never go back,
and a deposed leader's stale lease cannot pass a fence check against a counter recreated at
its old version (ABA).
"""

from __future__ import annotations

import logging
from typing import Any

import anyio

from ..drivers.base import Check, Delete, Driver, post_order
from ..election.nodes import ElectionNodes
from ..errors import ConfigurationError, DriverError, NodeExists, NoNode, TransactionFailed

__all__ = ("NoBlobs", "remove_cluster_nodes")

log = logging.getLogger("ha.services")


async def remove_cluster_nodes(driver: Driver, root: str, election: str, identity: bytes) -> None:
    """Delete every node under ``root`` but the election's epoch counter, holding the lock of
    the election at ``election`` as ``identity``; stop if someone claims meanwhile."""
    nodes = ElectionNodes(election)
    lock, epoch = nodes.lock, nodes.epoch
    try:
        await driver.create(lock, identity, ephemeral=True)
    except NodeExists:
        log.warning("%s: another process leads now; its election is left", root)
        return
    session = driver.session_id
    try:
        # every claim bumps the epoch, and the counter is never deleted: checking its
        # version stops the wipe if our session ended and someone claimed (a lock check
        # would not: a recreated lock has version 0 again)
        guard = Check(epoch, (await driver.get(epoch))[1].version)
        for path in await post_order(driver, root):
            if path in (lock, epoch) or epoch.startswith(path + "/"):
                continue
            try:
                await driver.transaction([guard, Delete(path)])
            except TransactionFailed as exc:
                if exc.index == 0:
                    log.warning("%s: someone claimed during the cleanup: stopped", lock)
                    return
                log.info("%s: not removed: %s", path, exc)
            except DriverError as exc:
                log.info("%s: not removed: %s", path, exc)
    finally:
        with anyio.CancelScope(shield=True):
            try:  # owner-checked: never a lock a newer session made
                _, stat = await driver.get(lock)
                if stat.ephemeral_owner == session:
                    await driver.delete(lock, stat.version)
            except (NoNode, DriverError) as exc:
                log.info("%s: not removed: %s", lock, exc)


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
