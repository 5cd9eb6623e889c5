"""``ha watch``: one line per leader change, through backend outages.

The lines come from ``admin.watch_status``. When the backend goes away (the driver reports a
disconnection, or a read fails), watch says so once on stderr and keeps trying: it reads
again on every connection event and every ``RETRY`` seconds, and when the driver itself is
closed it connects anew. Once a read succeeds it says the backend is back and goes on; the
leader is printed again only if it changed meanwhile (a watcher's view, as ``etcdctl watch``
and ``zkCli``'s watches resume after a reconnect). What fails before the first connection (no
database, a missing chroot, a bad URL) still ends the command with one error line.

An election that does not exist yet is said once on stderr and watched until it appears: a
typo is visible, and starting ``ha watch`` before the first ``ha run`` works.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import AbstractAsyncContextManager, aclosing

import anyio
import click

from .. import admin
from ..drivers.base import ConnectionEvent, ConnectionState, Driver
from ..errors import DriverError

__all__ = ("RETRY", "Watcher")

RETRY = 1.0  # seconds between reads while the backend is away

LOST = (ConnectionState.DISCONNECTED, ConnectionState.EXPIRED, ConnectionState.CLOSED)


class _DriverClosed(Exception):
    """The driver was closed under us: connect again."""


class Watcher:
    """Prints the leader of ``path`` each time it changes, ``count`` lines at most."""

    def __init__(self, path: str, count: int | None, show: Callable[[admin.ElectionStatus], None]):
        self.path = path
        self.count = count
        self.show = show
        self.shown = 0
        self.lost = False
        self._last: object = ()  # () before the first reading; then the leader (or None)
        self._closed = False
        self._wake = anyio.Event()

    async def run(self, open_driver: Callable[[], AbstractAsyncContextManager[Driver]]) -> None:
        """Watch until ``count`` lines are shown (or forever); ``open_driver()`` connects."""
        connected_once = False
        while True:
            try:
                async with open_driver() as driver:
                    connected_once = True
                    if await self._follow(driver):
                        return
            except (DriverError, OSError, TimeoutError) as exc:
                if not connected_once:
                    raise  # nothing was ever read: the URL or the backend is wrong
                self._lose(str(exc) or type(exc).__name__)
            except _DriverClosed:
                self._lose("the connection was closed")
            await anyio.sleep(RETRY)

    async def _follow(self, driver: Driver) -> bool:
        """Follow on one driver; True once ``count`` lines are shown."""
        self._closed = False
        sub = driver.subscribe(None, self._on_connection)
        try:
            while True:
                try:
                    async with aclosing(self._statuses(driver)) as statuses:
                        async for found in statuses:
                            if self._seen(found):
                                return True
                except (DriverError, TimeoutError) as exc:
                    if self._closed:
                        raise _DriverClosed from None
                    self._lose(str(exc) or type(exc).__name__)
                self._wake = anyio.Event()
                with anyio.move_on_after(RETRY):
                    await self._wake.wait()
        finally:
            sub.close()

    def _statuses(self, driver: Driver) -> AsyncGenerator[admin.ElectionStatus, None]:
        return admin.watch_status(driver, self.path)

    def _seen(self, found: admin.ElectionStatus) -> bool:
        """A reading: say what is new; True once ``count`` lines are shown."""
        if self.lost:
            self.lost = False
            click.echo(f"ha: the backend is back: watching {self.path} again", err=True)
        if self._last == () and not found.exists:  # a typo looks like an empty election
            click.echo(
                f"ha: warning: no election at {self.path} (nothing has run there yet):"
                " watching for one to start",
                err=True,
            )
        if found.leader == self._last:
            return False
        self._last = found.leader
        self.show(found)
        self.shown += 1
        return self.count is not None and self.shown >= self.count

    def _on_connection(self, event: object) -> None:
        if isinstance(event, ConnectionEvent):
            if event.state in LOST:
                self._lose(event.state.value)
            if event.state is ConnectionState.CLOSED:
                self._closed = True
        self._wake.set()

    def _lose(self, why: str) -> None:
        if not self.lost:
            self.lost = True
            click.echo(
                f"ha: warning: lost the backend ({' '.join(why.split())}):"
                " going on when it is back",
                err=True,
            )
