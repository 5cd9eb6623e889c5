"""Node events from one watch on the tree's ConfigMap, never losing one.

The watch is on the ConfigMap by name (``fieldSelector=metadata.name=NAME-ha``: one object,
as Flink watches its HA ConfigMap since FLINK-33598), from the resourceVersion the driver last
knew the tree at. Every event carries the whole tree; the driver compares it with the tree it
knew (``tree.diff``) and emits the subscribed paths' events, in the server's order.

A watch ends (the server's timeout, a dropped connection, contact lost and back: a stream
may hang silently through a partition); it is resumed from the last resourceVersion seen.
If the server no longer has that version (an ``ERROR`` event with 410 Expired, "too old
resource version"), the driver reads the ConfigMap again and diffs it with what it knew: the
events come coalesced, never lost (the fix the Python client, kr8s and lightkube each
needed: kubernetes-client/python#728, kr8s-org/kr8s#476, gtsystem/lightkube PR #153).

The re-read is a watch without a resourceVersion: the server starts it with the current
object (a synthetic ADDED) and streams the changes after it (kubernetes.io, API concepts,
"Semantics for watch": resourceVersion unset). A GET would give the object's own version,
which the server's history may start after (after a restart, once any other object was
written since the tree), so the watch resumed from it would be 410 again, and again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio

from ...errors import ConnectionLost, DriverError
from ..base import DriverEvent
from .store import TreeStore
from .transport import Transport
from .tree import Tree, diff

__all__ = ("Watches",)

log = logging.getLogger("ha.drivers.kubernetes")


class Watches:
    """The tree's watch, turned into the events of the paths ``watched()`` (``emit``)."""

    def __init__(
        self,
        transport: Transport,
        store: TreeStore,
        emit: Callable[[DriverEvent], None],
        watched: Callable[[], list[str]],
    ) -> None:
        self._transport = transport
        self._store = store
        self._send_event = emit
        self._watched = watched
        self._stop_stream = anyio.Event()  # set: close the current watch stream
        self.stream_ended = anyio.Event()  # set while no stream is being read
        self.stream_ended.set()
        self._reading = False  # a watch's answer has come: its stream must be closed, not cancelled
        self._fresh = False  # a 410 came: the next watch starts from the current state
        self.resyncs = 0  # full re-reads after a 410 (for tests)

    def restart(self) -> None:
        """Contact is back (or a new session began): start the stream afresh."""
        self._stop_stream.set()

    async def quiesce(self) -> None:
        """End the watch stream before the tasks are cancelled (see Api.watch); a watch still
        waiting for its answer has no stream yet, and is cancelled."""
        self._stop_stream.set()
        if not self._reading:
            return
        with anyio.move_on_after(1):
            await self.stream_ended.wait()

    async def run(self) -> None:
        while True:
            self._stop_stream = anyio.Event()
            self.stream_ended = anyio.Event()
            gone = False
            try:
                gone = await self._read_stream()
            except DriverError as exc:
                log.debug("Kubernetes watch ended: %s", exc)
            finally:
                self.stream_ended.set()
            if gone:
                self.resyncs += 1
                self._fresh = True
            else:
                await anyio.sleep(0.02)

    async def _read_stream(self) -> bool:
        """Read one watch until it ends; True if the server no longer has our version."""
        params = {
            "fieldSelector": f"metadata.name={self._transport.settings.tree}",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "300",
        }
        if not self._fresh:
            params["resourceVersion"] = self._store.known.version
        url = self._transport.tree_url.rsplit("/", 1)[0]
        response: Any = None
        gone = False
        error: DriverError | None = None

        async def closer() -> None:  # the way to end a stream early (see Api.watch)
            await self._stop_stream.wait()
            if response is not None:
                await response.aclose()

        async with anyio.create_task_group() as tg:  # errors caught inside: not grouped
            tg.start_soon(closer)
            try:
                async with self._transport.watch(url, params) as (response, events):
                    self._reading = True
                    async for event in events:
                        if self._event(event):
                            gone = True
                            self._stop_stream.set()  # read on to the end (httpx's generators)
            except DriverError as exc:
                error = exc
            finally:
                self._reading = False
                tg.cancel_scope.cancel()
        if gone:
            return True
        raise error or ConnectionLost("the Kubernetes watch ended")

    def _event(self, event: dict[str, Any]) -> bool:
        """Take one watch event; True if it says our version is too old (410)."""
        kind, body = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if body.get("code") == 410:
                return True
            log.info("Kubernetes watch error: %s", body.get("message"))
            self._stop_stream.set()
            return False
        version = str((body.get("metadata") or {}).get("resourceVersion") or "")
        if kind == "BOOKMARK":
            if version:
                self._store.known.version = version
            return False
        if kind == "DELETED":
            log.error("the ha tree ConfigMap %s was deleted", self._transport.settings.tree)
            self._changed(Tree(version=version))
            return False
        if kind in ("ADDED", "MODIFIED"):
            try:
                # the first event of a fresh watch: any number of writes since (see tree.diff)
                self._changed(Tree.decode(body, self._transport.tree_url), coalesced=self._fresh)
                self._fresh = False
            except DriverError as exc:
                log.error("the ha tree ConfigMap holds what ha cannot read: %s", exc)
        return False

    def _changed(self, tree: Tree, *, coalesced: bool = False) -> None:
        before, self._store.known = self._store.known, tree
        for event in diff(before, tree, self._watched(), coalesced=coalesced):
            self._send_event(event)
