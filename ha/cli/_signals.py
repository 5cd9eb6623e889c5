"""Ctrl-C (SIGINT), and SIGTERM where a command asks for it, on a command's event loop: the
same under asyncio and trio.

Left to the loops they differ. asyncio cancels its main task and raises KeyboardInterrupt once
the loop is done (the command exits 130); trio raises KeyboardInterrupt in whatever code runs
at that moment, in any task, so it comes out inside an exception group (a traceback, exit 1),
is swallowed by a task's cleanup (the command runs on), or lands in trio's own bookkeeping
(``TrioInternalError``). So ``run`` (``_run.py``) runs every command's async work under one
receiver, opened before the work starts and closed once it has ended:

- by default a signal cancels the work: after SIGINT the command exits 130 and says nothing
  more, after SIGTERM it exits 0 (the normal end of ``ha watch``);
- a command that stops in its own way (``ha run``: stop COMMAND, leave the election) hands
  ``react`` what to do instead, for every signal from then on; after a SIGINT it still exits
  130 once its work has returned;
- a second signal while cancelled work has not ended (a thread that cannot be cancelled)
  ends the process at once, as asyncio does on a second Ctrl-C.

One receiver for the loop's life rather than one per command: under asyncio a second receiver
of a signal replaces the first, and once closed leaves the signal to Python's default handler
(KeyboardInterrupt again, anywhere).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import anyio

__all__ = ("Signals",)

T = TypeVar("T")


class Signals:
    """What a command's event loop does with SIGINT and, with ``term``, SIGTERM."""

    def __init__(self, *, term: bool = False) -> None:
        self.caught = (signal.SIGINT, signal.SIGTERM) if term else (signal.SIGINT,)
        self.interrupted = False  # a SIGINT came: the command exits 130
        self._react: Callable[[int], object] | None = None

    def react(self, handler: Callable[[int], object] | None) -> None:
        """From now on call ``handler(signum)`` for each signal instead of cancelling the
        work (None: cancel it again)."""
        self._react = handler

    async def run(self, fn: Callable[[], Awaitable[T]]) -> list[T]:
        """``[await fn()]``, or ``[]`` when a signal cancelled it."""
        done: list[T] = []
        with anyio.open_signal_receiver(*self.caught) as received:
            async with anyio.create_task_group() as tg:
                work = anyio.CancelScope()  # fn's alone: the receiving task hears a second one
                tg.start_soon(self._dispatch, received, work)
                with work:
                    done.append(await fn())
                tg.cancel_scope.cancel()
        return done

    async def _dispatch(self, received: AsyncIterator[int], work: anyio.CancelScope) -> None:
        async for signum in received:
            self.interrupted = self.interrupted or signum == signal.SIGINT
            if self._react is not None:
                self._react(signum)
            elif work.cancel_called:  # asked again: the work does not end, we do
                _exit_now(128 + signum)
            else:
                work.cancel()


def _exit_now(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more to say there anyway
            pass
    os._exit(code)
