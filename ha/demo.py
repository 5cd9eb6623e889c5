"""``ha demo``: three contenders, a crash and a hang, and how long each failover took.

By default three contender *processes* share the embedded backend (a fresh temporary SQLite
file). Each runs an ``Elector`` and writes its transitions, plus notes of what its work did,
to one JSON-lines journal that the demo reads. Faults are real signals: SIGKILL for a crash,
SIGSTOP/SIGCONT for a hang. With ``--url memory://NAME`` the contenders run in this process
(a crash is a crashed driver, a hang a partitioned one).

``python -m ha.demo worker URL PATH ID JOURNAL`` is one contender process.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any
from urllib.parse import urlsplit

import anyio
import anyio.abc
import anyio.to_thread
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .drivers import connect, driver_class
from .drivers.memory import MemoryDriver
from .election.elector import Elector
from .election.journal import JournalWriter
from .election.lease import Lease
from .election.nodes import decode_breadcrumb
from .errors import ConfigurationError, HAError
from .supervisor import Child, spawn

__all__ = ("Model", "ProcessContenders", "InProcessContenders", "run_demo", "worker_main")

IDENTITIES = ("c1", "c2", "c3")
SETTLE_TIMEOUT = 30.0  # seconds to wait for any expected step before giving up


# --- the contender's work: what an active does, and notes about it -------------------------------

Note = Callable[[str, str], None]


class DemoWork:
    """A contender whose work is to wait; it notes when the work starts, stops and fences."""

    def __init__(self, note: Note) -> None:
        self.note = note

    async def become_active(self, lease: Lease) -> None:
        self.note("work", f"work started (epoch {lease.epoch})")
        try:
            await anyio.sleep_forever()
        finally:
            self.note("stopped", f"work of epoch {lease.epoch} cancelled")

    async def fence_old_active(self, breadcrumb: bytes) -> None:
        crumb = decode_breadcrumb(breadcrumb)
        who = "an unreadable breadcrumb" if crumb is None else f"{crumb.identity.decode()}"
        epoch = "" if crumb is None else f" (epoch {crumb.epoch})"
        self.note("fenced", f"fenced {who}{epoch} before taking over")


# --- the model: what the demo knows of each contender --------------------------------------------


@dataclass(slots=True)
class Row:
    identity: str
    state: str = "starting"
    epoch: int | None = None
    since: float = field(default_factory=time.time)
    pid: int | None = None
    note: str = ""


class Model:
    """Rows per contender, built from journal records; waiters wake on every change."""

    def __init__(self, identities: tuple[str, ...]) -> None:
        self.rows = {i: Row(i) for i in identities}
        self.records: list[dict[str, Any]] = []
        self.log: list[str] = []
        self._changed = anyio.Event()

    def apply(self, record: dict[str, Any]) -> None:
        row = self.rows.get(str(record.get("identity")))
        if row is None:
            return
        self.records.append(record)
        ts = float(record.get("ts", time.time()))
        if "to" in record:
            row.state, row.epoch, row.since = record["to"], record.get("epoch"), ts
            epoch = f" epoch {row.epoch}" if row.epoch is not None else ""
            self.say(
                f"{row.identity}: {record['from']} -> {record['to']}{epoch} ({record['cause']})"
            )
        elif "note" in record:
            row.note = str(record.get("text", ""))
            if record.get("pid"):
                row.pid = int(record["pid"])
            if record["note"] != "started":
                self.say(f"{row.identity}: {row.note}")
        self._changed.set()

    def mark(self, identity: str, state: str, text: str) -> None:
        """A state the contender cannot report itself (killed, frozen)."""
        row = self.rows[identity]
        row.state, row.since, row.epoch = state, time.time(), row.epoch
        self.say(text)
        self._changed.set()

    def say(self, text: str) -> None:
        self.log.append(time.strftime("%H:%M:%S ") + text)

    def active(self) -> list[Row]:
        return [r for r in self.rows.values() if r.state == "active"]

    def settled(self) -> str | None:
        """The one active when every live contender is active or standby, else None."""
        states = [r.state for r in self.rows.values()]
        if states.count("active") == 1 and all(s in ("active", "standby") for s in states):
            return self.active()[0].identity
        return None

    async def wait_for(self, what: str, check: Callable[[], Any]) -> Any:
        """Wait until ``check()`` is truthy; return it. Raises DemoFailed on timeout."""
        with anyio.move_on_after(SETTLE_TIMEOUT):
            while True:
                self._changed = anyio.Event()
                found = check()
                if found:
                    return found
                await self._changed.wait()
        raise DemoFailed(f"timed out after {SETTLE_TIMEOUT:g}s waiting for {what}")

    def transition_after(
        self, ts: float, predicate: Callable[[dict[str, Any]], bool]
    ) -> dict[str, Any] | None:
        for record in self.records:
            if "to" in record and record["ts"] >= ts and predicate(record):
                return record
        return None

    def note_after(self, ts: float, identity: str, kind: str) -> dict[str, Any] | None:
        for record in self.records:
            if (
                record.get("note") == kind
                and record.get("identity") == identity
                and record["ts"] >= ts
            ):
                return record
        return None


class DemoFailed(HAError):
    """The demo did not see what it expected in time."""


# --- the contenders: processes, or tasks of this process -----------------------------------------


class Contenders(ABC):
    """Three contenders and the faults the demo injects; records flow into ``model``."""

    crash_name = "SIGKILL"
    hang_name = "SIGSTOP"
    resume_name = "SIGCONT"

    def __init__(self, url: str, path: str, model: Model) -> None:
        self.url = url
        self.path = path
        self.model = model

    @abstractmethod
    async def start(self, identity: str) -> None: ...

    @abstractmethod
    async def crash(self, identity: str) -> None: ...

    @abstractmethod
    async def hang(self, identity: str) -> None: ...

    @abstractmethod
    async def resume(self, identity: str) -> None: ...

    @abstractmethod
    async def pump(self) -> None:
        """Feed records into the model until cancelled."""

    @abstractmethod
    async def aclose(self) -> None: ...

    @property
    @abstractmethod
    def session_timeout(self) -> float: ...

    def pid(self, identity: str) -> int | None:
        return None


class ProcessContenders(Contenders):
    """Each contender is a process (``python -m ha.demo worker``) sharing a journal file."""

    def __init__(self, url: str, path: str, model: Model, workdir: str) -> None:
        super().__init__(url, path, model)
        self.journal = os.path.join(workdir, "journal.jsonl")  # workers create it
        self.children: dict[str, Child] = {}
        self._file: IO[str] | None = None
        self._buffer = ""
        self._timeout = connect(url).session_timeout

    @property
    def session_timeout(self) -> float:
        return self._timeout

    def pid(self, identity: str) -> int | None:
        child = self.children.get(identity)
        return None if child is None else child.pid

    async def start(self, identity: str) -> None:
        argv = [sys.executable, "-m", "ha.demo", "worker", self.url, self.path, identity]
        self.children[identity] = await spawn([*argv, self.journal])

    async def crash(self, identity: str) -> None:
        child = self.children.pop(identity)
        os.kill(child.pid, signal.SIGKILL)
        await child.wait()

    async def hang(self, identity: str) -> None:
        os.kill(self.children[identity].pid, signal.SIGSTOP)

    async def resume(self, identity: str) -> None:
        os.kill(self.children[identity].pid, signal.SIGCONT)

    def _read(self) -> list[dict[str, Any]]:
        if self._file is None:
            try:
                self._file = open(self.journal, encoding="utf-8")  # noqa: SIM115 - kept open
            except FileNotFoundError:
                return []  # no worker has written yet
        self._buffer += self._file.read()
        *lines, self._buffer = self._buffer.split("\n")
        records = []
        for line in lines:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a writer killed mid-line
        return records

    async def pump(self) -> None:
        while True:
            for record in await anyio.to_thread.run_sync(self._read):
                self.model.apply(record)
            await anyio.sleep(0.02)

    async def aclose(self) -> None:
        # standbys first, the active last: otherwise each quit hands the lead to the next
        order = sorted(self.children, key=lambda i: self.model.rows[i].state == "active")
        with anyio.CancelScope(shield=True):
            for child in self.children.values():
                child.signal_group(signal.SIGCONT)
            for identity in order:
                await self.children[identity].stop(2.0)  # SIGTERM: the worker quits cleanly
            self.children.clear()

    def close_journal(self) -> None:
        """After ``pump`` has stopped."""
        if self._file is not None:
            self._file.close()
            self._file = None


class InProcessContenders(Contenders):
    """Each contender is a task of this process with its own memory driver (``memory://``)."""

    crash_name = "crash"
    hang_name = "partition"
    resume_name = "heal"

    def __init__(self, url: str, path: str, model: Model, tg: anyio.abc.TaskGroup) -> None:
        super().__init__(url, path, model)
        self.tg = tg
        self.drivers: dict[str, MemoryDriver] = {}
        self.scopes: dict[str, anyio.CancelScope] = {}
        self._timeout = connect(url).session_timeout

    @property
    def session_timeout(self) -> float:
        return self._timeout

    def _note(self, identity: str) -> Note:
        def note(kind: str, text: str) -> None:
            record = {"ts": time.time(), "identity": identity, "note": kind, "text": text}
            self.model.apply(record)

        return note

    async def start(self, identity: str) -> None:
        await self.tg.start(self._contender, identity)

    async def _contender(
        self, identity: str, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        driver = connect(self.url)
        assert isinstance(driver, MemoryDriver)
        with anyio.CancelScope() as scope:
            self.scopes[identity] = scope
            self.drivers[identity] = driver
            async with driver:
                elector = Elector(driver, self.path, identity)
                async with elector.transitions() as stream, anyio.create_task_group() as tg:
                    task_status.started()

                    async def follow() -> None:
                        async for t in stream:
                            self.model.apply(t.to_json())

                    tg.start_soon(follow)
                    await elector.run(DemoWork(self._note(identity)))
                    tg.cancel_scope.cancel()

    async def crash(self, identity: str) -> None:
        self.drivers[identity].crash()  # no goodbye: the session dies when it times out
        self.scopes.pop(identity).cancel()

    async def hang(self, identity: str) -> None:
        self.drivers[identity].partition()

    async def resume(self, identity: str) -> None:
        self.drivers[identity].heal()

    async def pump(self) -> None:
        await anyio.sleep_forever()  # records arrive directly

    async def aclose(self) -> None:
        order = sorted(self.scopes, key=lambda i: self.model.rows[i].state == "active")
        for identity in order:
            self.scopes[identity].cancel()


# --- the scenario ------------------------------------------------------------------------------


@dataclass(slots=True)
class Failover:
    round: int
    fault: str
    old: str
    new: str
    latency: float  # seconds from the fault to the new active's become_active
    detail: str = ""
    crash: bool = False


async def crash_round(cont: Contenders, model: Model, number: int) -> Failover:
    """Kill the active; measure until another one is active; restart the dead one."""
    old = await model.wait_for("one active and two standbys", model.settled)
    t0 = time.time()
    await cont.crash(old)
    model.mark(old, "killed", f"{old}: {cont.crash_name} (it was active)")
    record = await model.wait_for(
        "a new active after the crash",
        lambda: model.transition_after(t0, lambda r: r["to"] == "active" and r["identity"] != old),
    )
    latency = record["ts"] - t0
    if latency < cont.session_timeout / 2:
        how = "its death was noticed at once"
    else:
        how = "its session timed out"
    await cont.start(old)
    await model.wait_for(f"{old} to come back as a standby", model.settled)
    return Failover(number, cont.crash_name, old, record["identity"], latency, how, crash=True)


async def hang_round(cont: Contenders, model: Model, number: int) -> Failover:
    """Freeze the active past its lease; measure the failover; thaw it and see it stop."""
    old = await model.wait_for("one active and two standbys", model.settled)
    t0 = time.time()
    await cont.hang(old)
    model.mark(old, "frozen", f"{old}: {cont.hang_name} (it was active)")
    record = await model.wait_for(
        "a new active after the hang",
        lambda: model.transition_after(t0, lambda r: r["to"] == "active" and r["identity"] != old),
    )
    latency = record["ts"] - t0
    new = record["identity"]
    resumed = time.time()
    await cont.resume(old)
    model.mark(old, "thawed", f"{old}: {cont.resume_name}")
    # frozen, it notices on resuming; partitioned (in-process), it may have noticed already
    lost = await model.wait_for(
        f"{old} to notice it lost the lead",
        lambda: model.transition_after(
            t0, lambda r: r["identity"] == old and r["from"] == "active"
        ),
    )
    stopped = model.note_after(t0, old, "stopped")
    fenced = model.note_after(t0, new, "fenced")
    what = "stopped its work" if stopped is not None else "lost the lead"
    if lost["ts"] < resumed:
        detail = f"{old} {what} by itself ({lost['cause']}) before its lease ran out"
    else:
        detail = f"{old} {what} on resuming ({lost['cause']})"
    if fenced is not None:
        detail += f"; {new} {fenced['text']}"
    await model.wait_for(f"{old} to rejoin as a standby", model.settled)
    return Failover(number, cont.hang_name, old, new, latency, detail)


def check_epochs(model: Model) -> str | None:
    """Safety: every new active's epoch is above the previous one's. A problem, or None."""
    last = 0
    for record in model.records:
        if record.get("to") == "active":
            if record["epoch"] is None or record["epoch"] <= last:
                return f"epoch went from {last} to {record['epoch']} ({record['identity']})"
            last = record["epoch"]
    return None


# --- the view --------------------------------------------------------------------------------

STYLES = {"active": "bold green", "standby": "cyan", "killed": "red", "frozen": "magenta"}


def render(model: Model, title: str) -> Group:
    table = Table(title=title, title_justify="left", expand=False)
    for column in ("contender", "pid", "state", "epoch", "in state", "last note"):
        table.add_column(column)
    now = time.time()
    for row in model.rows.values():
        table.add_row(
            row.identity,
            "" if row.pid is None else str(row.pid),
            Text(row.state, style=STYLES.get(row.state, "")),
            "" if row.epoch is None else str(row.epoch),
            f"{now - row.since:5.1f}s",
            row.note,
        )
    return Group(table, Text("\n".join(model.log[-8:]), style="dim"))


def summary(failovers: list[Failover], session_timeout: float) -> Table:
    table = Table(title="failovers", title_justify="left")
    for column in ("round", "fault", "old active", "new active", "latency", "what happened"):
        table.add_column(column)
    for f in failovers:
        table.add_row(str(f.round), f.fault, f.old, f.new, f"{f.latency * 1000:.0f} ms", f.detail)
    return table


# --- the demo ----------------------------------------------------------------------------------


async def run_demo(
    url: str | None = None,
    *,
    path: str = "/demo",
    rounds: int = 1,
    console: Console | None = None,
) -> int:
    """Run the demo; returns the exit code (0: every failover happened and epochs increased)."""
    console = console or Console(highlight=False)
    workdir = await anyio.to_thread.run_sync(lambda: tempfile.mkdtemp(prefix="ha-demo-"))
    try:
        if url is None:
            url = f"sqlite://{workdir}/demo.db"
        if urlsplit(url).scheme != "memory" and not driver_class(url).capabilities.cross_process:
            raise ConfigurationError(
                f"{url}: this backend cannot be shared between processes; use memory://NAME"
                " to run the demo in one process"
            )
        return await _demo(url, path, rounds, console, workdir)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(lambda: shutil.rmtree(workdir, ignore_errors=True))


async def _demo(url: str, path: str, rounds: int, console: Console, workdir: str) -> int:
    model = Model(IDENTITIES)
    failovers: list[Failover] = []
    live_view = console.is_terminal
    where = "in this process" if url.startswith("memory:") else "as processes"
    title = f"ha demo: 3 contenders {where} on {url}, election {path}"
    if not live_view:
        console.print(title)
    async with anyio.create_task_group() as tg:
        cont: Contenders
        if url.startswith("memory:"):
            cont = InProcessContenders(url, path, model, tg)
        else:
            cont = ProcessContenders(url, path, model, workdir)
        shown = 0

        async def show() -> None:
            nonlocal shown
            if live_view:
                with Live(render(model, title), console=console, refresh_per_second=8) as live:
                    while True:
                        live.update(render(model, title))
                        await anyio.sleep(0.1)
            while True:  # not a terminal: the log, line by line
                for line in model.log[shown:]:
                    console.print(line)
                shown = len(model.log)
                await anyio.sleep(0.05)

        try:
            tg.start_soon(cont.pump)
            tg.start_soon(show)
            for identity in IDENTITIES:
                await cont.start(identity)
            for number in range(1, rounds + 1):
                failovers.append(await crash_round(cont, model, number))
                failovers.append(await hang_round(cont, model, number))
        except DemoFailed as exc:
            model.say(f"FAILED: {exc}")
            problem: str | None = str(exc)
        else:
            problem = check_epochs(model)
        finally:
            await cont.aclose()
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.15)  # let the pump and the view catch up
            tg.cancel_scope.cancel()
    if isinstance(cont, ProcessContenders):
        cont.close_journal()
    if not live_view:
        for line in model.log[shown:]:
            console.print(line)
    console.print(summary(failovers, cont.session_timeout))
    if problem is not None:
        console.print(f"[red]demo failed[/]: {problem}")
        return 1
    crash = max(f.latency for f in failovers if f.crash) * 1000
    hang = max(f.latency for f in failovers if not f.crash) * 1000
    console.print(
        f"[green]ok[/]: {len(failovers)} failovers, epochs always increased."
        f" Worst crash failover {crash:.0f} ms, worst hang failover {hang:.0f} ms"
        f" (session timeout {cont.session_timeout:g}s)."
    )
    return 0


# --- one contender process ---------------------------------------------------------------------


async def _worker(url: str, path: str, identity: str, journal: str, notes: IO[str]) -> None:
    def note(kind: str, text: str) -> None:
        record = {"ts": time.time(), "identity": identity, "note": kind, "text": text}
        record["pid"] = os.getpid()
        notes.write(json.dumps(record) + "\n")  # one write, O_APPEND: lines never interleave
        notes.flush()

    note("started", f"pid {os.getpid()}")
    async with connect(url) as driver:
        elector = Elector(driver, path, identity, journal=JournalWriter(journal))
        async with anyio.create_task_group() as tg:

            async def quit_on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for _ in signals:
                        elector.quit()
                        return

            tg.start_soon(quit_on_signal)
            await elector.run(DemoWork(note))
            tg.cancel_scope.cancel()


def worker_main(argv: list[str]) -> None:
    if len(argv) != 5 or argv[0] != "worker":
        sys.exit("usage: python -m ha.demo worker URL PATH IDENTITY JOURNAL")
    # the demo shows what the journal says; the elector's own warnings would garble its view
    logging.getLogger("ha").addHandler(logging.NullHandler())
    logging.getLogger("ha").propagate = False
    _, url, path, identity, journal = argv
    with open(journal, "a", encoding="utf-8") as notes:
        anyio.run(_worker, url, path, identity, journal, notes)


if __name__ == "__main__":
    worker_main(sys.argv[1:])
