"""Session lock files removed or replaced under live processes (sqlite backend).

The kernel lock on ``<db>-sessions/<instance>.<id>.lock`` tells a session's death fast. A tmp
cleaner or an operator may remove those files, or put other files at their paths, while their
processes live: a missing file, or one the session did not make, must read as "unknown" (the
lease decides), never as "dead", or a standby starting then expires the live active and acts
beside it. The live owner makes its file again, which brings the fast detection back.

The contenders are child processes (``tests.processes.test_sqlite_elector``): they print their history,
including every fenced write that landed while active; the verdicts come from that output, the
session table and the lock files, all read from outside.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable

import anyio
import anyio.to_thread
import pytest

from ha.testing import Event, check_history
from tests.support.backends.sqlite import (
    SqliteBackend,
    lock_held,
    remove_lock_files,
    replace_lock_files,
    sqlite_backend,
)
from tests.support.sqlite_db import lease_end, session_ids, stop_outside_write
from tests.support.sqlite_group import Contender, Group, check_fenced_writes, group

__all__ = ("sqlite_backend",)  # the fixture, until tests/conftest.py registers the plugin

# a long lease, so that a takeover before it ends can only come from the kernel lock; quick
# renewals, so that the owner soon looks at its lock file
OPTIONS: dict[str, float] = {"session_timeout": 10, "renew_interval": 0.3, "poll_interval": 0.02}


async def eventually(cond: Callable[[], bool]) -> None:
    with anyio.fail_after(30):  # a hang guard, not a latency check
        while not await anyio.to_thread.run_sync(cond):
            await anyio.sleep(0.02)


def writes(member: Contender) -> int:
    return sum(e.kind == "write" for e in member.events)


async def first_active(g: Group) -> tuple[Contender, int, int]:
    a = await g.add("a")
    await g.until(lambda: a.state == "active" and writes(a) > 0)
    epoch = a.epoch()
    assert epoch is not None
    return a, a.sessions[-1], epoch


async def kill_and_check_fast_takeover(
    g: Group, backend: SqliteBackend, old: Contender, sid: int, epoch: int, new: Contender
) -> None:
    """SIGKILL the old active: ``new`` takes over, through the kernel lock (before the lease)."""
    expires = await lease_end(backend, sid)
    old.process.kill()
    g.extra.append(Event(time.monotonic(), old.name, "stop", epoch))  # its work died with it
    await old.process.wait()
    await g.until(lambda: new.state == "active")
    became = [e for e in new.events if e.kind == "transition" and e.detail["new"] == "active"]
    assert became[-1].t < expires, "the death was seen only when the lease ran out"
    await g.until(lambda: writes(new) > 0)
    check_history(g.history())
    await check_fenced_writes(backend)


@pytest.mark.anyio
async def test_removed_lock_files_do_not_make_a_live_active_look_dead(
    sqlite_backend: SqliteBackend, anyio_backend: str
) -> None:
    async with group(sqlite_backend, anyio_backend, **OPTIONS) as g:
        a, sid, epoch = await first_active(g)
        removed = remove_lock_files(sqlite_backend.file, directory=True)  # a tmp cleaner
        assert any(name.endswith(f".{sid}.lock") for name in removed)

        b = await g.add("b")  # its poller finds a's file missing, or made again by a
        await g.until(lambda: b.state != "neutral")
        # a keeps acting, undisturbed, for 10 more fenced writes (as many polls of b)
        seen = writes(a)
        await g.until(lambda: writes(a) >= seen + 10 or b.state == "active")
        assert b.state == "standby", "the standby took over from a live active"
        assert a.state == "active" and a.epoch() == epoch
        assert sid in await session_ids(sqlite_backend)
        # the owner made its lock file again: a crash of it is seen fast once more
        await eventually(lambda: lock_held(sqlite_backend.file, sid))
        await kill_and_check_fast_takeover(g, sqlite_backend, a, sid, epoch, b)


@pytest.mark.anyio
async def test_lock_file_replaced_by_a_copy_is_not_read_as_a_dead_process(
    sqlite_backend: SqliteBackend, anyio_backend: str
) -> None:
    async with group(sqlite_backend, anyio_backend, **OPTIONS) as g:
        a, sid, epoch = await first_active(g)
        # paused, a cannot make its file again: the copy stays in place while b polls
        await anyio.to_thread.run_sync(stop_outside_write, a.process.pid, sqlite_backend.file)
        try:
            replace_lock_files(sqlite_backend.file)  # same name and bytes, nobody's lock
            b = await g.add("b")
            await g.until(lambda: b.state != "neutral")
            await anyio.sleep(0.3)  # 15 polls of b
            assert not lock_held(sqlite_backend.file, sid)  # the copy is still there
            assert b.state == "standby", "the standby took over from a live active"
            assert sid in await session_ids(sqlite_backend)
        finally:
            a.process.send_signal(signal.SIGCONT)
        # resumed: a is still the active, and puts its own file back in place of the copy
        seen = writes(a)
        await g.until(lambda: writes(a) >= seen + 3 or b.state == "active")
        assert b.state == "standby" and a.state == "active" and a.epoch() == epoch
        await eventually(lambda: lock_held(sqlite_backend.file, sid))
        await kill_and_check_fast_takeover(g, sqlite_backend, a, sid, epoch, b)


@pytest.mark.anyio
async def test_owner_makes_its_removed_lock_file_again_and_says_so_once(
    sqlite_backend: SqliteBackend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "ha.drivers.sqlite")
    async with sqlite_backend.driver(session_timeout=3, renew_interval=0.05) as driver:
        sid = driver.session_id
        assert sid is not None
        remove_lock_files(sqlite_backend.file)
        await eventually(lambda: lock_held(sqlite_backend.file, sid))
        await anyio.sleep(0.2)  # a few more renewals: the file is ours, nothing more to say
        said = [r.getMessage() for r in caplog.records if "lock file" in r.getMessage()]
        assert len(said) == 1 and f"session {sid}" in said[0], said
        assert driver.session_id == sid and driver.connected
    # closed: its file is gone with its session
    assert not lock_held(sqlite_backend.file, sid)
