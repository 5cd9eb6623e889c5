"""The elector across real processes on the sqlite backend: crash (SIGKILL) and hang (SIGSTOP).

Each contender is a child process running ``CHILD``: an ``ha.Elector`` whose contender records
its calls in an ``ha.testing.History`` and, while active, keeps writing its epoch to ``/data``
behind ``lease.fence_ops()``. Every history event is printed as a JSON line; the test merges
them (their times are CLOCK_MONOTONIC, one clock for every process) and checks the safety
properties with ``ha.testing.check_history``, plus property 4: fenced writes land in epoch order.
"""

from __future__ import annotations

import os
import signal
import time

import anyio
import anyio.abc
import pytest

from ha.testing import Event, check_history
from tests.support.backends.sqlite import SqliteBackend, sqlite_backend
from tests.support.sqlite_db import lease_end, stop_outside_write
from tests.support.sqlite_group import check_fenced_writes, group

__all__ = ("sqlite_backend",)  # the fixture, until tests/conftest.py registers the plugin


@pytest.mark.anyio
async def test_killed_active_is_replaced_by_a_standby_of_another_process(
    sqlite_backend: SqliteBackend, anyio_backend: str
) -> None:
    # a long lease: only the kernel lock can make the takeover come before it ends
    async with group(sqlite_backend, anyio_backend, session_timeout=6, poll_interval=0.02) as g:
        for name in ("a", "b", "c"):
            await g.add(name)
        await g.until(g.settled)
        (old,) = g.active()
        epoch = old.epoch()
        assert epoch is not None
        await g.until(lambda: old.first("write") is not None)
        expires = await lease_end(sqlite_backend, old.sessions[-1])

        old.process.kill()
        g.extra.append(Event(time.monotonic(), old.name, "stop", epoch))  # its work died with it
        await old.process.wait()
        await g.until(lambda: any(m is not old for m in g.active()))
        (new,) = g.active()
        new_epoch = new.epoch()
        assert new_epoch is not None and new_epoch > epoch
        # fenced the old active, and took over before the old lease could have run out
        fence = new.first("fence", old=old.name)
        assert fence is not None and fence.epoch == epoch
        became = new.first("transition", new="active")
        assert became is not None and became.t < expires
        await g.until(lambda: new.first("write") is not None)
        check_history(g.history())
        await check_fenced_writes(sqlite_backend)


@pytest.mark.anyio
async def test_paused_active_is_replaced_after_its_lease_and_cancelled_on_resume(
    sqlite_backend: SqliteBackend, anyio_backend: str
) -> None:
    async with group(sqlite_backend, anyio_backend, session_timeout=1, poll_interval=0.02) as g:
        for name in ("a", "b"):
            await g.add(name)
        await g.until(g.settled)
        (old,) = g.active()
        epoch = old.epoch()
        assert epoch is not None
        await g.until(lambda: old.first("write") is not None)

        await anyio.to_thread.run_sync(stop_outside_write, old.process.pid, sqlite_backend.file)
        expires = await lease_end(sqlite_backend, old.sessions[-1])  # nobody renews it now
        g.extra.append(Event(expires, old.name, "expire"))
        await g.until(lambda: any(m is not old for m in g.active()))
        (new,) = [m for m in g.active() if m is not old]  # the paused one cannot say
        new_epoch = new.epoch()
        assert new_epoch is not None and new_epoch > epoch
        became = new.first("transition", new="active")
        assert became is not None and became.t > expires  # only once the lease ran out
        await g.until(lambda: new.first("write") is not None)

        paused_at = time.monotonic()
        os.kill(old.process.pid, signal.SIGCONT)
        # on resume: its leadership is cancelled, its session is gone, it rejoins as standby
        await g.until(lambda: any(e.kind == "stop" and e.epoch == epoch for e in old.events))
        first_session = old.sessions[0]
        await g.until(lambda: old.state == "standby" and old.sessions[-1] != first_session)
        left = [
            e
            for e in old.events
            if e.kind == "transition" and e.detail["old"] == "active" and e.t > paused_at
        ]
        assert left and left[0].detail["new"] != "active"
        assert [m.name for m in g.active()] == [new.name]
        await g.until(lambda: sum(e.kind == "write" for e in new.events) >= 3)
        check_history(g.history())
        await check_fenced_writes(sqlite_backend)
