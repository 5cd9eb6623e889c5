"""kazoo's threading handler, minus one thread hop for the driver's own callbacks.

kazoo reads replies and watch events on its connection thread, then queues every callback to
one of two worker threads (completions, watches), which run it later. The driver's callbacks
only hand the outcome to the loop (``KazooSession._post``: a queue put and a wake-up byte),
never block, so the extra hop buys nothing and costs a thread switch (0.1-0.3 ms under the
GIL) on every reply and every event, and it lets a watch event and a later reply reach the
loop out of the order the server sent them (two threads). Callbacks marked with ``inline``
run at once on the thread that has the outcome; kazoo's own and any others keep their queues.
Its selects wait on kept selectors (``selecting.py``).
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.handlers.threading import SequentialThreadingHandler

from .selecting import KeptSelectors

__all__ = ("InlineHandler", "inline")

log = logging.getLogger("ha.drivers.zookeeper")

F = TypeVar("F", bound=Callable[..., Any])
_MARK = "_ha_inline"


def inline(fn: F) -> F:
    """Mark ``fn`` (a completion or watch callback that never blocks) to run without a hop."""
    setattr(fn, _MARK, True)
    return fn


def _marked(fn: Any) -> bool:
    return bool(getattr(fn, _MARK, False))


def _run(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except Exception:  # never let a callback break kazoo's connection thread
        log.exception("ZooKeeper driver callback failed")


class _CompletionQueue(queue.Queue):  # type: ignore[type-arg]
    """kazoo queues a completion as ``functools.partial(callback, result)``."""

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        if _marked(getattr(item, "func", None)):
            _run(item)
        else:
            super().put(item, block, timeout)


class InlineHandler(SequentialThreadingHandler):  # type: ignore[misc]
    queue_impl = _CompletionQueue

    def __init__(self) -> None:
        super().__init__()
        self._selectors = KeptSelectors()

    def select(
        self, rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None
    ) -> tuple[list[Any], list[Any], list[Any]]:
        return self._selectors.select(rlist, wlist, xlist, timeout)

    def start(self) -> None:
        self._selectors.open()
        super().start()

    def stop(self) -> None:
        super().stop()
        self._selectors.close()

    def dispatch_callback(self, callback: Any) -> None:
        if _marked(callback.func):
            _run(lambda: callback.func(*callback.args))
        else:
            super().dispatch_callback(callback)
