"""The tree's ConfigMap: read, written with the resourceVersion it was read at, updated.

Kubernetes' one compare-and-set: a PUT carrying the version read fails (409) if anyone wrote
in between; ``update`` then reads and decides again. ``known`` is the tree as the watch last
saw it (``watches``), which the reaper and ``known_tree_size`` read.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

import anyio

from ...errors import ConnectionLost, DriverError
from .api import CORE, failure
from .transport import Transport
from .tree import Tree, reap

__all__ = ("TreeStore",)

ATTEMPTS = 100  # writes of one tree update, while other drivers keep writing it


class TreeStore:
    """The tree of one root, through ``transport``. ``own``: a request of the driver's own
    (see ``transport``); ``raw``: one made as from the server's side."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self.known = Tree()  # the tree as the watch last saw it

    async def read(self, *, own: bool = False, raw: bool = False) -> Tree:
        t = self._transport
        if raw:
            status, body = await t.raw("GET", t.tree_url)
        else:
            status, body = await t.request("GET", t.tree_url, own=own)
        if status == 200:
            return Tree.decode(body, t.tree_url)
        if status == 404 and (body.get("details") or {}).get("kind") != "namespaces":
            raise DriverError(
                f"the ha tree ConfigMap {t.settings.tree} in {t.where} was deleted"
                " (its epochs with it): the election cannot go on safely"
            )
        raise failure(status, body, "GET", "configmaps", t.where)

    async def write(self, tree: Tree, *, own: bool = False, raw: bool = False) -> Tree | None:
        """PUT ``tree`` if the ConfigMap is still at the version it was read at: the tree as
        written, or None on a conflict (someone wrote in between)."""
        t = self._transport
        body = tree.encode(t.namespace, t.settings.tree, t.settings.name)
        if raw:
            status, reply = await t.raw("PUT", t.tree_url, body)
        else:
            status, reply = await t.request("PUT", t.tree_url, body, own=own)
        if status == 200:
            tree.version = str((reply.get("metadata") or {}).get("resourceVersion") or "")
            return tree
        if status == 409:
            return None
        raise failure(status, reply, "PUT", "configmaps", t.where)

    async def update(
        self, change: Callable[[Tree], Tree | None], *, own: bool = False, raw: bool = False
    ) -> None:
        """Read the tree, ``change`` it (None: nothing to write), write it; again on 409."""
        for attempt in range(ATTEMPTS):
            tree = await self.read(own=own, raw=raw)
            new = change(tree)
            if new is None or await self.write(new, own=own, raw=raw) is not None:
                return
            await anyio.sleep(0.001 * secrets.randbelow(attempt + 1))
        raise ConnectionLost(f"the ha tree kept changing ({ATTEMPTS} tries)")

    async def ensure(self) -> None:
        """Make the ConfigMap if it is not there yet (another driver may make it first)."""
        t = self._transport
        method = "GET"
        status, body = await t.request(method, t.tree_url, own=True)
        if status == 404 and (body.get("details") or {}).get("kind") != "namespaces":
            empty = Tree().encode(t.namespace, t.settings.tree, t.settings.name)
            url = f"{CORE}/namespaces/{t.namespace}/configmaps"
            method = "POST"
            status, body = await t.request(method, url, empty, own=True)
            if status == 409:  # another driver made it first
                method = "GET"
                status, body = await t.request(method, t.tree_url, own=True)
        if status not in (200, 201):
            raise failure(status, body, method, "configmaps", t.where)
        self.known = Tree.decode(body, t.tree_url)

    async def clear(self, sessions: set[int], *, raw: bool = False) -> None:
        """Strike ``sessions`` off the tree with their ephemeral nodes."""
        await self.update(lambda tree: _reaped(tree, sessions), own=True, raw=raw)

    async def register(self, session: int) -> None:
        """Add ``session`` to the tree's sessions (only those create ephemeral nodes)."""
        await self.update(lambda tree: _registered(tree, session), own=True)


def _registered(tree: Tree, session: int) -> Tree:
    registered = Tree(dict(tree.nodes), tree.sessions | {session}, tree.txn, tree.seq)
    registered.version, registered.log = tree.version, tree.log  # no node written: no new txn
    return registered


def _reaped(tree: Tree, sessions: set[int]) -> Tree | None:
    new, _ = reap(tree, sessions)
    return None if new is tree else new
