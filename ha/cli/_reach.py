"""``ha run`` waits for its backend: a daemon started before its server (at boot, or in a pod
whose etcd is not up yet) tries again, as Patroni and client-go do, instead of exiting.

Only a backend that cannot be reached is tried again (the driver's ``start`` raising a transient
``DriverError``: ``Unavailable`` after its connect timeout); a malformed URL, an unknown scheme, a
missing extra, a ZooKeeper host that does not resolve or denied access still fail at once, in
one line. Each failed try is one log line with the next one's delay; the waits grow to
``RETRY.maximum`` (each try itself bounded by the backend's ``connect_timeout``). SIGINT or
SIGTERM while waiting stops at once, as it stops ``ha run`` (exit 0); the supervisor handles them
from when the backend is reached.
"""

from __future__ import annotations

import logging
import random
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc

from ..drivers import connect
from ..drivers.base import Driver
from ..election.timing import Backoff
from ..errors import DriverError
from ._dns import check_hosts_resolve
from ._run import Options

__all__ = ("RETRY", "reach_driver")

log = logging.getLogger("ha.supervisor")

# between tries: 0.5-1 s, doubling to 5-10 s (Patroni's loop_wait is 10 s): a fleet waiting for
# a restarted server is spread out by the jitter, and notices it is back within 10 s
RETRY = Backoff(initial=1.0, maximum=10.0)


@asynccontextmanager
async def reach_driver(opts: Options) -> AsyncIterator[Driver | None]:
    """The backend of ``opts``, connected once it can be reached; None when stopped by a
    signal before. Closed at the block's end."""
    url = opts.backend_url()
    await check_hosts_resolve(url)
    # The driver is started and closed inside this group's scope: a driver may hold a task
    # group of its own from start to close (ZooKeeper's), which must nest in every scope
    # around it, so no scope of ours may end while it runs.
    async with anyio.create_task_group() as tg:
        signals = _Signals(tg.cancel_scope)
        await tg.start(signals.watch)  # before the first try
        driver = await _connect(url)  # cancelled by a signal
        await signals.close()  # the supervisor handles them from now on
        if signals.received is None:
            try:
                yield driver
            finally:
                await driver.aclose()
            return
        with anyio.CancelScope(shield=True):
            await driver.aclose()  # a signal came as it started: not used
    log.info("%s received while waiting for the backend: stopping", signals.received)
    yield None


class _Signals:
    """SIGINT and SIGTERM cancel ``scope`` until ``close()``; ``received``: the signal's name."""

    def __init__(self, scope: anyio.CancelScope) -> None:
        self.scope = scope
        self.received: str | None = None
        self._listening = anyio.CancelScope()
        self._closed = anyio.Event()

    async def watch(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        try:
            with self._listening, anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as s:
                task_status.started()
                async for signum in s:
                    self.received = signal.Signals(signum).name
                    self.scope.cancel()
                    return
        finally:
            self._closed.set()

    async def close(self) -> None:
        """Stop listening; return once the handlers are given back (on asyncio a receiver
        closed later would remove the handlers the supervisor installs)."""
        self._listening.cancel()
        with anyio.CancelScope(shield=True):
            await self._closed.wait()


async def _connect(url: str) -> Driver:
    rng = random.Random()
    attempt = 0
    while True:
        driver = connect(url)  # a malformed URL raises here, at once
        try:
            await driver.start()  # cleans up after itself when it fails or is cancelled
        except DriverError as exc:
            if not exc.transient:
                raise
            attempt += 1
            delay = RETRY.delay(attempt, rng)
            log.warning(
                "cannot reach the backend (%s): try %d, trying again in %.3gs", exc, attempt, delay
            )
            await anyio.sleep(delay)
            continue
        if attempt:
            log.info("reached the backend after %d failed tries", attempt)
        return driver
