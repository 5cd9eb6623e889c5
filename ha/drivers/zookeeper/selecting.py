"""kazoo's selects, each on a selector kept for its shape instead of one made for it.

kazoo's connection thread selects before every request it writes, before every reply it reads
and while it waits (on its socket and its wake-up socket), and its threading handler makes a
selector for each select, registers the sockets, waits and closes it: four system calls and
an epoll descriptor for one wait. With a thousand joins in flight that was an eighth of the
process's time (issue 31). It asks in three shapes (its socket to read, its socket to write,
both sockets to read), so one selector is kept for each shape, its sockets registered once.

A shape is the objects asked about, each with its descriptor and events. A kept selector
holds its shape's objects, so none of them is freed while kept and no new object takes its
id. A socket closed and another opened on its descriptor is another object, so another shape
(the kernel dropped the closed one from the old selector). The last ``KEPT`` shapes are kept,
since a new connection brings new sockets; the oldest is closed past that. When the handler
stops, all of them are closed, and so is every selector used until it starts again: kazoo
stops its handler before its connection thread's last selects (the close request). A selector
is taken out while a thread waits on it, so two threads never share one. A descriptor given as
a number, not an object, gets a selector of its own, as kazoo gives it. A file whose descriptor
is closed or replaced under its object (``os.close``, ``os.dup2``) would not be seen again by a
kept selector: kazoo closes its sockets through the object, which leaves it no descriptor.

Answers as kazoo's ``selector_select`` does, errors included, and like it reports a socket
ready to read and to write as readable only.
"""

from __future__ import annotations

import selectors
import threading
from collections import OrderedDict
from typing import Any

from kazoo.handlers.utils import fileobj_to_fd, selector_select

__all__ = ("KEPT", "KeptSelectors")

KEPT = 4

Shape = tuple[tuple[int, int, tuple[int, ...]], ...]  # (descriptor, events, ids of its objects)
Kept = tuple[selectors.BaseSelector, list[Any]]  # the selector, and the objects it holds


class KeptSelectors:
    """``select`` for kazoo's handler, on kept selectors."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[Shape, Kept] = OrderedDict()
        self._keeping = True  # false from close() to open(): a selector used is closed after

    def open(self) -> None:
        """Keep selectors again (the handler starts)."""
        with self._lock:
            self._keeping = True

    def select(
        self, rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None
    ) -> tuple[list[Any], list[Any], list[Any]]:
        if timeout is not None:
            if not isinstance(timeout, int | float):
                raise TypeError("timeout must be a number")
            if timeout < 0:
                raise ValueError("timeout must be non-negative")
        if any(isinstance(f, int) for f in (*rlist, *wlist)):
            # a number stays the same when its file is closed and another opened on it: the
            # kernel dropped the old one from a kept selector, which would never see the new
            return selector_select(rlist, wlist, xlist, timeout)  # type: ignore[no-any-return]
        events: dict[int, int] = {}
        files: dict[int, list[Any]] = {}
        for event, fileobjs in ((selectors.EVENT_READ, rlist), (selectors.EVENT_WRITE, wlist)):
            for fileobj in fileobjs:
                fd = fileobj_to_fd(fileobj)
                events[fd] = events.get(fd, 0) | event
                files.setdefault(fd, []).append(fileobj)
        shape = tuple(sorted((fd, e, tuple(map(id, files[fd]))) for fd, e in events.items()))
        with self._lock:
            kept = self._kept.pop(shape, None)
        if kept is None:
            kept = (self._make(events), [f for fs in files.values() for f in fs])
        try:
            ready = kept[0].select(timeout)
        except BaseException:
            kept[0].close()
            raise
        self._keep(shape, kept)
        readable: list[Any] = []
        writable: list[Any] = []
        for key, ready_events in ready:
            if ready_events & selectors.EVENT_READ:
                readable.extend(files[key.fd])
            elif ready_events & selectors.EVENT_WRITE:
                writable.extend(files[key.fd])
        return readable, writable, []

    def close(self) -> None:
        """Close every kept selector, and from now on each one used (kazoo stops its handler
        before its connection thread's last selects), until ``open``."""
        with self._lock:
            self._keeping = False
            kept, self._kept = list(self._kept.values()), OrderedDict()
        for selector, _ in kept:
            selector.close()

    @staticmethod
    def _make(events: dict[int, int]) -> selectors.BaseSelector:
        selector = selectors.DefaultSelector()
        for fd, mask in events.items():
            try:
                selector.register(fd, mask)
            except (ValueError, OSError) as exc:
                selector.close()
                raise ValueError("Invalid event mask or fd") from exc
        return selector

    def _keep(self, shape: Shape, kept: Kept) -> None:
        closing: list[Kept] = []
        with self._lock:
            other = self._kept.pop(shape, None)  # another thread's, made meanwhile
            if other is not None:
                closing.append(other)
            if not self._keeping:
                closing.append(kept)
            else:
                self._kept[shape] = kept
            while len(self._kept) > KEPT:
                closing.append(self._kept.popitem(last=False)[1])
        for selector, _ in closing:
            selector.close()
