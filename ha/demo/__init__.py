"""``ha demo``: three contenders, a crash and a hang, and how long each failover took.

By default three contender *processes* share the embedded backend (a fresh temporary SQLite
file). Each runs an ``Elector`` and writes its transitions, plus notes of what its work did,
to one JSON-lines journal that the demo reads. Faults are real signals: SIGKILL for a crash,
SIGSTOP/SIGCONT for a hang. With ``--url memory://NAME`` the contenders run in this process
(a crash is a crashed driver, a hang a partitioned one).

This module is the story (the rounds, the view, the verdict); ``model.py`` is what the demo
knows of each contender, ``contenders.py`` the contenders and their faults.
``python -m ha.demo worker URL PATH ID JOURNAL`` is one contender process.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..drivers import driver_class
from ..errors import ConfigurationError
from .contenders import Contenders, InProcessContenders, ProcessContenders, worker_main
from .model import DemoFailed, Model

__all__ = ("InProcessContenders", "Model", "ProcessContenders", "run_demo", "worker_main")

IDENTITIES = ("c1", "c2", "c3")


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


async def _fail_active(
    model: Model, inject: Callable[[str], Awaitable[None]], state: str, fault: str, what: str
) -> tuple[str, float, dict[str, Any]]:
    """Once the election is settled, inject a fault into the active and wait for another one.

    (the old active, when the fault was injected, the new active's transition record).
    """
    old = await model.wait_for("one active and two standbys", model.settled)
    t0 = time.time()
    await inject(old)
    model.mark(old, state, f"{old}: {fault} (it was active)")
    record = await model.wait_for(
        f"a new active after the {what}",
        lambda: model.transition_after(t0, lambda r: r["to"] == "active" and r["identity"] != old),
    )
    return old, t0, record


async def crash_round(cont: Contenders, model: Model, number: int) -> Failover:
    """Kill the active; measure until another one is active; restart the dead one."""
    old, t0, record = await _fail_active(model, cont.crash, "killed", cont.crash_name, "crash")
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
    old, t0, record = await _fail_active(model, cont.hang, "frozen", cont.hang_name, "hang")
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
    """Safety: every new active's epoch is above the previous one's; only a leader back within
    its session (it kept its queue node) is active again with its own. A problem, or None."""
    last, owner = 0, None
    for record in model.records:
        if record.get("to") == "active":
            epoch, who = record["epoch"], record["identity"]
            if epoch is None or epoch < last or (epoch == last and who != owner):
                return f"epoch went from {last} to {epoch} ({who})"
            last, owner = epoch, who
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
