"""Background tasks for drivers, free of the nesting rules of task groups.

A driver's pinger or poller lives as long as the driver, not as long as a block of code, so it
cannot sit in a task group entered in ``start`` and left in ``aclose``: several drivers closed
in any order other than the reverse of their starts would break the nesting of cancel scopes.
Such a task is spawned as a system task (trio) or a plain task (asyncio), owns its own cancel
scope, and never lets an exception escape (it is logged).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import sniffio

__all__ = ("BackgroundTask",)

log = logging.getLogger("ha.drivers")


class BackgroundTask:
    """``start()`` runs ``fn(*args)`` in the background; ``await stop()`` cancels and waits."""

    def __init__(self, fn: Callable[..., Awaitable[Any]], *args: Any, name: str) -> None:
        self._fn, self._args, self.name = fn, args, name
        self._scope = anyio.CancelScope()
        self._done = anyio.Event()
        self._started = False

    def start(self) -> None:
        if self._started:
            raise RuntimeError(f"{self.name} already started")
        self._started = True
        library = sniffio.current_async_library()
        if library == "trio":
            import trio

            trio.lowlevel.spawn_system_task(self._main, name=self.name)
        elif library == "asyncio":
            import asyncio

            task = asyncio.get_running_loop().create_task(self._main(), name=self.name)
            _keep.add(task)  # asyncio holds tasks weakly
            task.add_done_callback(_keep.discard)
        else:  # pragma: no cover
            raise RuntimeError(f"unsupported async library {library}")

    async def _main(self) -> None:
        try:
            with self._scope:
                await self._fn(*self._args)
        except Exception:
            log.exception("background task %s failed", self.name)
        finally:
            self._done.set()

    async def stop(self) -> None:
        self._scope.cancel()
        if self._started:
            with anyio.CancelScope(shield=True):
                await self._done.wait()


_keep: set[Any] = set()
