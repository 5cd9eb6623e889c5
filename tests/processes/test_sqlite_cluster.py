"""Real processes on one sqlite file under a seeded random run of SIGKILL, SIGSTOP and restarts.

Three contender slots (a, b, c), each one process at a time; a restarted slot runs a new
incarnation with a new identity (a, a1, a2...), as a new process has no memory of the old one's
leadership. Each process runs ``CHILD``: an ``ha.Elector`` whose contender records its calls
in an ``ha.testing.History`` written as JSON lines (``Event.to_json``) to a file of its own,
and, while active, makes fenced writes: one transaction per write that checks the epoch
(``lease.fence_ops()``), bumps ``/data`` and creates ``/writes/<n>`` holding its epoch.

The test kills, pauses (SIGSTOP, resumed later by SIGCONT, for less or more than the session
timeout) and restarts processes in an order drawn from a seeded ``random.Random`` (the seed is
in the test id; ``HA_SQLITE_CLUSTER_SEED`` picks another). What the test itself knows goes into
the history too: a killed process's open leadership ends at the kill (its work died with it),
and a paused process whose lease ran out before it could run again had its session expired
(its work could not stop itself; fencing protects). Then the merged history (every time is
CLOCK_MONOTONIC, one clock for the machine) must pass ``check_history``, the writes must have
landed in epoch order (property 4, read from the backend's own commit order), and once every
process runs again one of them must be ACTIVE and the others STANDBY (liveness).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
import anyio.to_thread
import pytest

from ha.drivers.sqlite.driver import SqliteDriver
from ha.testing import Event, check_history, faults
from tests.support.backends.sqlite import SqliteBackend, sqlite_backend
from tests.support.sqlite_db import stop_outside_write

__all__ = ("sqlite_backend",)  # the fixture, until tests/conftest.py registers the plugin

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
SESSION = 1.0  # seconds: the lease of every process
STEPS = 10
SEED = int(os.environ.get("HA_SQLITE_CLUSTER_SEED", "0"))

CHILD = r"""
import json, os, sys
import anyio
import ha
from ha.drivers.base import Create, SetData
from ha.drivers.sqlite.driver import SqliteDriver
from ha.errors import HAError, TransactionFailed
from ha.testing import Event, History, Recorder

url, name, path, backend = sys.argv[1:5]
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

class FileHistory(History):
    # one write(2) per event: a line is whole in the file, or absent
    def add(self, *args, **kwargs):
        super().add(*args, **kwargs)
        os.write(fd, (self.events[-1].to_json() + "\n").encode())

class Writer(Recorder):
    def __init__(self, identity, history, driver):
        super().__init__(identity, history)
        self.driver = driver

    async def become_active(self, lease):
        self.history.add(self.identity, "start", lease.epoch)
        try:
            while True:
                try:
                    _, stat = await self.driver.get("/data")
                    n = stat.version
                    await self.driver.transaction([
                        *lease.fence_ops(),
                        SetData("/data", b"%d" % lease.epoch, n),
                        Create("/writes/%09d" % n, b"%d" % lease.epoch),
                    ])
                except TransactionFailed as exc:
                    if exc.index == 0:  # the epoch moved on: we are deposed
                        self.history.add(self.identity, "refused", lease.epoch)
                        lease.report_fenced()
                        await anyio.sleep_forever()
                    continue
                except HAError:
                    await anyio.sleep(0.01)
                    continue
                self.history.add(self.identity, "write", lease.epoch, n=n)
                await anyio.sleep(0.03)
        finally:
            self.history.add(self.identity, "stop", lease.epoch)

async def main():
    history = FileHistory()
    timing = ha.Timing(backoff=ha.Backoff(initial=0.01, maximum=0.2), hook_timeout=1.0)
    async with SqliteDriver.from_url(url) as driver:
        history.add(name, "session", None, sid=driver.session_id, state="connected", pid=os.getpid())
        driver.subscribe(
            None, lambda e: history.add(name, "session", None, sid=e.session_id, state=e.state.value)
        )
        elector = ha.Elector(driver, "/svc", name, timing=timing)
        elector.add_listener(history.transition)
        await elector.run(Writer(name, history, driver))

anyio.run(main, backend=backend)
"""


@dataclass
class Proc:
    """One incarnation of a slot: a child process and its history file."""

    slot: str
    identity: str
    process: anyio.abc.Process
    file: Path
    paused_at: float | None = None
    expiry: float | None = None  # when paused: the end of its last lease (CLOCK_MONOTONIC)
    killed: bool = False
    extra: list[Event] = field(default_factory=list)  # what the test knows of it

    def events(self) -> list[Event]:
        try:
            text = self.file.read_text()
        except FileNotFoundError:
            return []
        lines = text.split("\n")[:-1]  # a killed writer's partial line has no newline
        return [Event.from_json(line) for line in lines]

    @property
    def running(self) -> bool:
        return self.process.returncode is None and not self.killed

    def state(self, events: list[Event] | None = None) -> str:
        if not self.running:
            return "dead"
        if self.paused_at is not None:
            return "paused"
        moves = [e for e in (events or self.events()) if e.kind == "transition"]
        return moves[-1].detail["new"] if moves else "neutral"

    def open_epochs(self) -> list[int]:
        """Epochs whose work started and has not stopped since (as far as the file says).

        In order: an active that passed its local deadline and came back within its session
        starts its epoch's work again after stopping it once."""
        running: list[int] = []
        for e in self.events():
            if e.kind == "start" and e.epoch is not None:
                running.append(e.epoch)
            elif e.kind == "stop" and e.epoch in running:
                running.remove(e.epoch)
        return running


class Fleet:
    def __init__(self, backend: SqliteBackend, anyio_backend: str, logs: Path) -> None:
        self.backend, self.anyio_backend, self.logs = backend, anyio_backend, logs
        self.url = f"{backend.url()}?session_timeout={SESSION}&poll_interval=0.02"
        self.procs: list[Proc] = []
        self.incarnations: dict[str, int] = {}
        self.log: list[str] = []  # what the test did, for the failure message

    def note(self, what: str) -> None:
        self.log.append(f"{time.monotonic():.3f} {what}")

    async def start(self, slot: str) -> Proc:
        n = self.incarnations.get(slot, 0)
        self.incarnations[slot] = n + 1
        identity = slot if n == 0 else f"{slot}{n}"
        file = self.logs / f"{identity}.jsonl"
        stderr = open(self.logs / f"{identity}.stderr", "wb")  # noqa: ASYNC230 - a local file
        try:
            process = await anyio.open_process(
                [sys.executable, "-c", CHILD, self.url, identity, str(file), self.anyio_backend],
                env={**os.environ, "PYTHONPATH": str(REPO)},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        finally:
            stderr.close()
        proc = Proc(slot, identity, process, file)
        self.procs.append(proc)
        self.note(f"start {identity} pid {process.pid}")
        return proc

    def live(self) -> list[Proc]:
        return [p for p in self.procs if p.running]

    def states(self) -> dict[str, str]:
        return {p.identity: p.state() for p in self.live()}

    def active(self) -> list[Proc]:
        return [p for p in self.live() if p.state() == "active"]

    def settled(self) -> bool:
        states = sorted(self.states().values())
        return bool(states) and states == ["active"] + ["standby"] * (len(states) - 1)

    async def until(self, cond: Callable[[], bool], within: float = 30.0) -> None:
        with anyio.fail_after(within):  # a hang guard, not a latency check
            while not cond():
                await anyio.sleep(0.02)

    def _lease_end(self, pid: int) -> float | None:
        """The end of the latest lease held by process ``pid``, as the database holds it."""
        with contextlib.closing(
            sqlite3.connect(self.backend.file, timeout=5.0, isolation_level=None)
        ) as conn:
            row = conn.execute(
                "SELECT max(expires_at) FROM sessions WHERE pid = ?", (pid,)
            ).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    async def kill(self, proc: Proc) -> None:
        now = time.monotonic()
        os.kill(proc.process.pid, signal.SIGKILL)
        proc.killed = True
        await proc.process.wait()
        self.note(f"kill {proc.identity}")
        self._account_pause(proc, now)
        for epoch in proc.open_epochs():  # its work died with it
            proc.extra.append(Event(now, proc.identity, "stop", epoch))

    async def pause(self, proc: Proc) -> None:
        pid = proc.process.pid
        await anyio.to_thread.run_sync(stop_outside_write, pid, self.backend.file)
        proc.paused_at = time.monotonic()
        # nobody renews its leases now: the latest one ends when the database says
        proc.expiry = await anyio.to_thread.run_sync(self._lease_end, pid)
        self.note(f"pause {proc.identity} (lease ends {proc.expiry})")

    async def resume(self, proc: Proc) -> None:
        if proc.paused_at is None or not proc.running:
            return
        now = time.monotonic()
        self._account_pause(proc, now)
        os.kill(proc.process.pid, signal.SIGCONT)
        proc.paused_at = None
        self.note(f"resume {proc.identity}")

    def _account_pause(self, proc: Proc, now: float) -> None:
        """A pause that outlived the lease: the session was expired while the work was frozen."""
        if proc.paused_at is not None and proc.expiry is not None and proc.expiry < now:
            proc.extra.append(Event(proc.expiry, proc.identity, "expire"))
        proc.paused_at = proc.expiry = None

    def history(self) -> list[Event]:
        events = [e for p in self.procs for e in p.events() + p.extra]
        return sorted(events, key=lambda e: e.t)

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            for proc in self.procs:
                if proc.process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.process.pid, signal.SIGKILL)
                await proc.process.wait()
                await proc.process.aclose()

    def report(self) -> str:
        lines = ["what the test did:", *self.log, "history:"]
        for e in self.history():
            lines.append(f"{e.t:.3f} {e.identity} {e.kind} {e.epoch} {json.dumps(e.detail)}")
        return "\n".join(lines)


@contextlib.asynccontextmanager
async def fleet(
    backend: SqliteBackend, anyio_backend: str, logs: Path
) -> AsyncIterator[tuple[Fleet, anyio.abc.TaskGroup]]:
    async with SqliteDriver.from_url(backend.url(), poll_interval=0.02) as driver:
        await driver.create("/data", b"0")
        await driver.create("/writes", b"")
    f = Fleet(backend, anyio_backend, logs)
    try:
        async with anyio.create_task_group() as tg:
            yield f, tg
            tg.cancel_scope.cancel()
    finally:
        await f.close()


async def landed_writes(backend: SqliteBackend) -> list[tuple[int, int]]:
    """(sequence number, epoch) of every write that landed, in the backend's commit order."""
    async with SqliteDriver.from_url(backend.url(), poll_interval=0.02) as driver:
        names = await driver.children("/writes")
        writes = []
        for name in names:  # zero-padded: name order is commit order
            data, _ = await driver.get(f"/writes/{name}")
            writes.append((int(name), int(data)))
    return writes


@pytest.mark.anyio
async def test_a_kill_ends_an_epoch_whose_work_started_again(
    sqlite_backend: SqliteBackend, anyio_backend: str, tmp_path: Path
) -> None:
    """The harness's own accounting: an active that passed its local deadline and came back
    within its session starts its epoch's work a second time; killing it ends that work, so
    a successor that fenced it and starts after the kill is no violation. (A CI run under
    load reported one: the kill's stop was dropped because the epoch had stopped once.)"""
    f = Fleet(sqlite_backend, anyio_backend, tmp_path)
    process = await anyio.open_process([sys.executable, "-c", "import time; time.sleep(60)"])
    c = Proc("c", "c", process, tmp_path / "c.jsonl")
    f.procs.append(c)
    t = time.monotonic()
    won = {"old": "neutral", "new": "active", "cause": "won the election"}
    lost = {"old": "active", "new": "neutral", "cause": "local deadline passed"}
    back = {"old": "neutral", "new": "active", "cause": "first in the queue, nobody to fence"}
    lines = [
        Event(t - 0.5, "c", "transition", 10, won),
        Event(t - 0.4, "c", "start", 10),
        Event(t - 0.3, "c", "stop", 10),
        Event(t - 0.2, "c", "transition", None, lost),
        Event(t - 0.1, "c", "transition", 10, back),
        Event(t - 0.05, "c", "start", 10),
    ]
    c.file.write_text("".join(e.to_json() + "\n" for e in lines))
    try:
        await f.kill(c)
    finally:
        await f.close()
    after = time.monotonic() + 0.01
    successor = [
        Event(after, "a", "fence", 10, {"old": "c"}),
        Event(after, "a", "transition", 23, won),
        Event(after + 0.001, "a", "start", 23),
    ]
    check_history(f.history() + successor)


@pytest.mark.anyio
@pytest.mark.parametrize("seed", [SEED])
async def test_random_kills_pauses_and_restarts_of_real_processes(
    sqlite_backend: SqliteBackend, anyio_backend: str, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(f"{seed}-{anyio_backend}")
    logs = tmp_path / "histories"
    logs.mkdir()
    async with fleet(sqlite_backend, anyio_backend, logs) as (f, tg):
        try:
            for slot in "abc":
                await f.start(slot)
            await f.until(f.settled)
            await run_faults(f, tg, rng)
            # heal: every paused process runs again, every dead slot is started again
            for proc in f.procs:
                await f.resume(proc)
            for slot in "abc":
                if not any(p.slot == slot for p in f.live()):
                    await f.start(slot)
            # liveness: one ACTIVE, the others STANDBY (30 s is a hang guard: a failover
            # takes a session timeout plus a backoff)
            await f.until(f.settled)
            (leader,) = f.active()
            healed = time.monotonic()
            await f.until(lambda: any(e.kind == "write" and e.t > healed for e in leader.events()))
            history = f.history()
            check_history(history)
        except BaseException as exc:
            exc.add_note(f.report())
            raise
    writes = await landed_writes(sqlite_backend)
    epochs = [epoch for _, epoch in writes]
    assert [n for n, _ in writes] == list(range(len(writes))), "a write is missing"
    assert epochs == sorted(epochs), f"a deposed active's write landed late: {epochs}"
    # the run was not vacuous: leadership changed hands and processes were killed and paused
    winners = {e.identity for e in history if e.kind == "start"}
    assert len(winners) >= 2, f"no failover happened:\n{f.report()}"
    # read again: while the fleet closed, the leader's kill could let a standby take over (the
    # kernel lock frees at once) and write before its own kill
    # (a process may also start, and be killed, before it writes)
    final = f.history()
    assert max(epochs) in {e.epoch for e in final if e.kind == "start"}


async def run_faults(f: Fleet, tg: anyio.abc.TaskGroup, rng: random.Random) -> None:
    """STEPS random faults; the active is the target more often than not."""

    async def resume_later(proc: Proc, delay: float) -> None:
        await anyio.sleep(delay)
        await f.resume(proc)

    for _ in range(STEPS):
        live = [p for p in f.live() if p.paused_at is None]
        dead_slots = sorted({"a", "b", "c"} - {p.slot for p in f.live()})
        actions = ["kill", "pause", "pause"] if live else []
        actions += ["restart"] * (2 if dead_slots else 0)
        if not actions:
            actions = ["wait"]
        action = rng.choice(actions)
        if action == "restart":
            await f.start(rng.choice(dead_slots))
        elif action in ("kill", "pause"):
            active = [p for p in live if p.state() == "active"]
            target = rng.choice(active if active and rng.random() < 0.7 else live)
            if action == "kill":
                await f.kill(target)
            else:
                await f.pause(target)
                # shorter than the lease (nobody may take over) or longer (somebody must)
                delay = rng.choice([0.3 * SESSION, 1.5 * SESSION])
                tg.start_soon(resume_later, target, delay)
        await anyio.sleep(rng.choice([0.1, 0.4, 1.0]))


@pytest.mark.anyio
async def test_a_renewal_that_commits_before_the_reap_is_not_undone(tmp_path: Path) -> None:
    """Deterministic: a's renewal reads the clock just before its lease ends and commits just
    after b's poller read the sessions and saw the lease ended (trace callbacks, which SQLite
    calls as a statement starts, before it takes any lock: a's renewal, one statement, starts
    b's poll once the lease has ended; b's write transaction waits until a has written). The
    driver internals are called directly."""
    path = tmp_path / "ha.db"
    async with (
        SqliteDriver(path, session_timeout=1.0, poll_interval=0.05) as a,
        SqliteDriver(path, session_timeout=1.0, poll_interval=0.05) as b,
    ):
        faults(a).freeze()  # the background loops stop at their next call; the test drives them
        faults(b).freeze()
        await anyio.sleep(0.3)
        sid_a, sid_b = a.session_id, b.session_id
        assert sid_a is not None and sid_b is not None

        def lease_end() -> float | None:
            with contextlib.closing(sqlite3.connect(path, timeout=5.0)) as conn:
                row = conn.execute(
                    "SELECT expires_at FROM sessions WHERE id = ?", (sid_a,)
                ).fetchone()
            return None if row is None else float(row[0])

        def race() -> tuple[tuple[bool, float], float, bool]:
            end = lease_end()
            assert end is not None
            assert a._files.bg is not None and b._files.bg is not None
            b._session._poll(sid_b, [])  # b knows a's lease as it is now
            reaper_waits, a_has_written = threading.Event(), threading.Event()

            def reaper_step(sql: str) -> None:
                if sql == "BEGIN IMMEDIATE" and not reaper_waits.is_set():
                    reaper_waits.set()  # b decided a is dead and asks for the write lock
                    a_has_written.wait(5.0)  # before it takes it: a's renewal goes first

            reaper: list[threading.Thread] = []

            def renewal_step(sql: str) -> None:
                # the renewal's one statement starts: its clock was read, no lock taken yet
                if not sql.startswith("UPDATE sessions SET expires_at") or reaper:
                    return
                while time.monotonic() <= end:  # the old lease ends while a renews it
                    time.sleep(0.001)
                reaper.append(threading.Thread(target=b._session._poll, args=(sid_b, [])))
                reaper[0].start()
                reaper_waits.wait(5.0)

            b._files.bg.set_trace_callback(reaper_step)
            a._files.bg.set_trace_callback(renewal_step)
            # the clock read comes before the end by a margin no scheduling delay of this
            # thread eats (20 ms did on a loaded machine: the renewal read it after the end)
            time.sleep(max(0.0, end - time.monotonic() - 0.2))
            try:
                renewed = a._session._renew(sid_a)
            finally:
                a_has_written.set()
                a._files.bg.set_trace_callback(None)
                for thread in reaper:
                    thread.join()
                b._files.bg.set_trace_callback(None)
            return renewed, end, reaper_waits.is_set()

        (alive, renewed_at), end, b_asked = await anyio.to_thread.run_sync(race)
        faults(a).thaw()
        faults(b).thaw()
        assert renewed_at < end, "the renewal read the clock after the lease end"
        assert b_asked, "b did not see a's lease run out"
        assert alive, "the renewal itself must succeed: it read the clock before the lease end"
        # a now counts on its lease until renewed_at + session_timeout: it must still exist
        assert lease_end() is not None, "b ended the session a had just renewed"
