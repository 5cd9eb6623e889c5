"""A sqlite election database seen from outside the driver: lease ends, session ids, and child
processes holding a driver, one of them stopped between two writes."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.abc
import anyio.to_thread
from anyio.streams.buffered import BufferedByteReceiveStream

from tests.support.backends.sqlite import SqliteBackend

REPO = Path(__file__).resolve().parents[2]


def raw(backend: SqliteBackend) -> sqlite3.Connection:
    return sqlite3.connect(backend.file, timeout=5.0, isolation_level=None, check_same_thread=False)


async def lease_end(backend: SqliteBackend, sid: int) -> float:
    """The session's expires_at (CLOCK_MONOTONIC) as the database holds it."""

    def read() -> float:
        with contextlib.closing(raw(backend)) as conn:
            row = conn.execute("SELECT expires_at FROM sessions WHERE id = ?", (sid,)).fetchone()
        assert row is not None, f"session {sid} is not in the table"
        return float(row[0])

    return await anyio.to_thread.run_sync(read)


async def session_ids(backend: SqliteBackend) -> set[int]:
    def read() -> set[int]:
        with contextlib.closing(raw(backend)) as conn:
            return {sid for (sid,) in conn.execute("SELECT id FROM sessions")}

    return await anyio.to_thread.run_sync(read)


CHILD = r"""
import sys
import anyio
from ha.drivers.base import Create, SetData
from ha.drivers.sqlite.driver import SqliteDriver
from ha.errors import BadVersion, NodeExists

def say(*words):
    print(*words, flush=True)

async def member(driver, name):
    driver.subscribe(None, lambda e: say("event", e.state.value, e.session_id))
    await driver.ensure_path("/members")
    await driver.create("/members/" + name, name.encode(), ephemeral=True)
    say("ready", driver.session_id)
    await anyio.sleep_forever()

async def writer(driver, _):
    # every transaction moves the counter and adds an item together
    await driver.ensure_path("/items")
    try:
        await driver.create("/counter", b"0")
    except NodeExists:
        pass
    say("ready", driver.session_id)
    while True:
        data, stat = await driver.get("/counter")
        n = int(data)
        await driver.transaction(
            [SetData("/counter", b"%d" % (n + 1), stat.version), Create("/items/%d" % n, b"x" * 500)]
        )
        if n % 10 == 0:
            say("wrote", n)

async def increment(driver, count):
    say("ready", driver.session_id)
    await anyio.to_thread.run_sync(sys.stdin.readline)  # start together
    conflicts = 0
    for _ in range(int(count)):
        while True:
            data, stat = await driver.get("/counter")
            try:
                await driver.set("/counter", b"%d" % (int(data) + 1), stat.version)
                break
            except BadVersion:
                conflicts += 1
    say("done", conflicts)

async def open_only(driver, _):
    say("opened")

async def member_stopping_in_reap(driver, name):
    # a member that, told "stop" on stdin, stops itself (SIGSTOP) in its poller's next reap:
    # after the poller read the sessions table, before the reaper reads the clock
    import signal, threading
    from ha.drivers.sqlite.liveness import Liveness
    armed = []
    reap = Liveness.reap
    def stopping_reap(self, *args):
        if armed:
            armed.clear()
            # this thread stops at once (os.kill would let it run on until another thread
            # of the process takes the signal and stops the group)
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
        return reap(self, *args)
    Liveness.reap = stopping_reap
    async with anyio.create_task_group() as tg:
        tg.start_soon(member, driver, name)
        while True:
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
            if line.strip() == "stop":
                armed.append(True)

async def main(mode, url, arg):
    try:
        driver = SqliteDriver.from_url(url)
        async with driver:
            await globals()[mode](driver, arg)
    except Exception as exc:
        say("error", type(exc).__name__, str(exc))

anyio.run(main, *sys.argv[1:4])
"""


class Child:
    """A child process running ``CHILD``; its stdout read line by line."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        assert process.stdout is not None
        self.stdout = BufferedByteReceiveStream(process.stdout)

    @property
    def pid(self) -> int:
        return self.process.pid

    async def line(self) -> str:
        with anyio.fail_after(30):
            return (await self.stdout.receive_until(b"\n", 1 << 16)).decode()

    async def expect(self, *prefix: str) -> list[str]:
        """Read lines until one starts with the words ``prefix``; return its words."""
        while True:
            words = (await self.line()).split()
            if words[: len(prefix)] == list(prefix):
                return words
            if words[:1] == ["error"]:
                raise AssertionError(f"child failed: {' '.join(words)}")

    async def send(self, text: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(text.encode())

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)


@contextlib.asynccontextmanager
async def child(mode: str, url: str, arg: str = "") -> AsyncIterator[Child]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = await anyio.open_process(
        [sys.executable, "-c", CHILD, mode, url, arg], env=env, stderr=subprocess.DEVNULL
    )
    try:
        yield Child(process)
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()  # also ends a stopped process
            await process.wait()
            await process.aclose()


def _stopped(pid: int) -> bool:
    tasks = os.listdir(f"/proc/{pid}/task")
    states = []
    for task in tasks:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/stat") as f:
            states.append(f.read().rsplit(")", 1)[1].split()[0])
    return bool(states) and all(state in "tT" for state in states)


def stop_outside_write(pid: int, database: Path) -> None:
    """SIGSTOP ``pid`` at a moment it does not hold SQLite's write lock (see the driver's limits)."""
    with contextlib.closing(sqlite3.connect(database, timeout=0, isolation_level=None)) as probe:
        for _ in range(200):
            os.kill(pid, signal.SIGSTOP)
            while not _stopped(pid):
                time.sleep(0.001)
            try:
                probe.execute("BEGIN IMMEDIATE")
                probe.execute("ROLLBACK")
                return
            except sqlite3.OperationalError:  # it (or someone) writes: let it finish
                os.kill(pid, signal.SIGCONT)
                time.sleep(0.005)
    raise AssertionError("could not stop the child outside a write transaction")
