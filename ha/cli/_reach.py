"""``ha run`` waits for its backend: a daemon started before its server (at boot, or in a pod
whose etcd is not up yet) tries again, as Patroni and client-go do, instead of exiting.

Only a backend that cannot be reached is tried again (the driver's ``start`` raising a transient
``DriverError``: ``Unavailable`` after its connect timeout); a malformed URL, an unknown scheme, a
missing extra, a ZooKeeper host that does not resolve or denied access still fail at once, in
one line. Each failed try is one log line with the next one's delay; the waits grow to
``RETRY.maximum`` (each try itself bounded by the backend's ``connect_timeout``). SIGINT or
SIGTERM while waiting stops at once, as it stops ``ha run`` (exit 130 after SIGINT, 0 after
SIGTERM); the command's receiver (``_signals.py``) hands them to us while we wait, and to the
supervisor from when the backend is reached.
"""

from __future__ import annotations

import logging
import random
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from ..drivers import connect
from ..drivers.base import Driver
from ..election.timing import Backoff
from ..errors import DriverError
from ._dns import check_hosts_resolve
from ._run import Options, Signals

__all__ = ("RETRY", "reach_driver")

log = logging.getLogger("ha.supervisor")

# between tries: 0.5-1 s, doubling to 5-10 s (Patroni's loop_wait is 10 s): a fleet waiting for
# a restarted server is spread out by the jitter, and notices it is back within 10 s
RETRY = Backoff(initial=1.0, maximum=10.0)


@asynccontextmanager
async def reach_driver(opts: Options, signals: Signals) -> AsyncIterator[Driver | None]:
    """The backend of ``opts``, connected once it can be reached; None when stopped by a
    signal before (``signals``: the command's, SIGINT and SIGTERM). Closed at the block's end;
    in the block, signals are back to ``signals``' default until the caller hands them on."""
    url = opts.backend_url()
    await check_hosts_resolve(url)
    received: list[str] = []
    # The driver is started and closed inside this group's scope: a driver may hold a task
    # group of its own from start to close (ZooKeeper's), which must nest in every scope
    # around it, so no scope of ours may end while it runs.
    async with anyio.create_task_group() as tg:

        def stop(signum: int) -> None:
            received.append(signal.Signals(signum).name)
            tg.cancel_scope.cancel()

        signals.react(stop)  # before the first try
        driver = await _connect(url)  # cancelled by a signal
        signals.react(None)
        if not received:
            try:
                yield driver
            finally:
                await driver.aclose()
            return
        with anyio.CancelScope(shield=True):
            await driver.aclose()  # a signal came as it started: not used
    log.info("%s received while waiting for the backend: stopping", received[0])
    yield None


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
