"""What an elector watches: its own node, the node below it, that one's breadcrumb, the pause.

Each watch turns the backend's node events into the machine's inputs (``NodeDeleted``,
``NodeChanged``, ``CrumbDeleted``) for the current session. Subscribing comes before the read
that the machine asks for, so a change after that read is seen (``drivers/base.py``). A queue
node or breadcrumb, once deleted, never comes back (its ticket is never used again): its watch
is dropped at once, so that the driver does not arm it again (on ZooKeeper, a request on the
way to a handover).
"""

from __future__ import annotations

from collections.abc import Callable

from ..drivers.base import Driver, NodeEvent, NodeEventKind, Subscription
from . import events as ev
from .names import parse_entry
from .nodes import ElectionNodes

__all__ = ("QueueWatches",)


class QueueWatches:
    """The subscriptions of one elector's run; ``close()`` ends them all but the pause's.

    The callbacks are bound methods, not closures: with thousands of electors in a process,
    each closure and its cells cost about 200 bytes more per elector."""

    __slots__ = ("_driver", "_nodes", "_session", "_feed", "_subs")

    def __init__(
        self,
        driver: Driver,
        nodes: ElectionNodes,
        session: Callable[[], int | None],
        feed: Callable[[ev.Input], None],
    ) -> None:
        self._driver = driver
        self._nodes = nodes
        self._session = session  # the machine's current session: events are its inputs
        self._feed = feed
        self._subs: dict[str, Subscription] = {}

    def pause(self) -> Subscription:
        """Watch the pause node for the whole run: any change of it is ``PauseChanged`` (P16).
        The caller closes it (it outlives the queue's watches)."""
        return self._driver.subscribe(self._nodes.pause, self._on_pause)

    def own(self, node: str) -> None:
        """Watch our own node (its deletion ends our place in the queue)."""
        self._set([(self._nodes.node(node), self._on_node)])

    def below(self, node: str, first: bool, own: str | None) -> None:
        """Watch the node below ours (and its breadcrumb when it is ``first``), and ours."""
        paths: list[tuple[str, Callable[[NodeEvent], None]]] = [
            (self._nodes.node(node), self._on_node)
        ]
        if first:
            entry = parse_entry(node)
            assert entry is not None
            paths.append((self._nodes.crumb(entry.ticket), self._on_crumb))
        self._set(paths, keep=self._nodes.node(own) if own else "")

    def close(self) -> None:
        for sub in self._subs.values():
            sub.close()
        self._subs.clear()

    def _set(self, paths: list[tuple[str, Callable[[NodeEvent], None]]], keep: str = "") -> None:
        """Watch exactly ``paths`` (and ``keep`` if watched): other subscriptions close."""
        wanted = {path for path, _ in paths} | {keep}
        for path in [p for p in self._subs if p not in wanted]:
            self._subs.pop(path).close()
        for path, callback in paths:
            if path not in self._subs:
                self._subs[path] = self._driver.subscribe(path, callback)

    def _drop(self, path: str) -> None:
        sub = self._subs.pop(path, None)
        if sub is not None:
            sub.close()

    def _on_pause(self, _event: NodeEvent) -> None:
        sid = self._session()
        if sid is not None:
            self._feed(ev.PauseChanged(sid))

    def _on_node(self, event: NodeEvent) -> None:
        sid = self._session()
        if sid is None:
            return
        name = event.path.rsplit("/", 1)[1]
        if event.kind is NodeEventKind.DELETED:
            self._drop(event.path)
            self._feed(ev.NodeDeleted(sid, name))
        elif event.kind is NodeEventKind.CHANGED:
            self._feed(ev.NodeChanged(sid, name))

    def _on_crumb(self, event: NodeEvent) -> None:
        sid = self._session()
        if sid is not None and event.kind is NodeEventKind.DELETED:
            self._drop(event.path)
            self._feed(ev.CrumbDeleted(sid, event.path.rsplit("/", 1)[1]))
