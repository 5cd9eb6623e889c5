"""Chaos rounds with real processes: contender processes (or ``ha run`` supervisors) on a
sqlite file or ZooKeeper, SIGKILLed, SIGSTOPped and restarted by the harness, with the
backend's own faults (``tests/chaos/envs.py``) and operator commands run as processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.abc

import ha
from ha.errors import HAError
from tests.chaos import SPAN, Fault, RoundResult, choose, schedule
from tests.chaos.contender import ELECTION, leader_epoch
from tests.support.witness import landed, prepare, verdict

REPO = Path(__file__).resolve().parents[2]
CONTENDER = REPO / "tests" / "chaos" / "contender.py"
COMMAND = REPO / "tests" / "chaos" / "command.py"
SESSION = 1.0  # seconds: every contender's session timeout


class Env(Protocol):
    """A backend for process rounds: a namespace per round and the backend's own faults."""

    kind: str
    kinds: tuple[str, ...]  # the faults it applies itself
    live_within: float
    session: float  # the contenders' session timeout; fault lengths are counted in it

    async def begin(self, seed: int, workdir: Path) -> None: ...
    def url(self, identity: str) -> str: ...
    def direct_url(self, session: float) -> str: ...
    def observer_url(self) -> str: ...
    async def apply(self, fault: Fault, fleet: Fleet, tg: anyio.abc.TaskGroup) -> str | None: ...
    async def heal(self) -> None: ...
    async def describe(self) -> str: ...


@dataclass
class Proc:
    slot: str
    identity: str
    process: anyio.abc.Process
    paused: bool = False

    @property
    def alive(self) -> bool:
        return self.process.returncode is None


class Tail:
    """The witness file's new lines, read incrementally."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.buffer = path, 0, b""
        self.lines: list[dict[str, Any]] = []

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return self.lines
        self.offset += len(chunk)
        *whole, self.buffer = (self.buffer + chunk).split(b"\n")
        self.lines += [json.loads(line) for line in whole if line]
        return self.lines


class Fleet:
    def __init__(self, env: Env, result: RoundResult, workdir: Path, supervised: bool) -> None:
        self.env, self.r, self.workdir, self.supervised = env, result, workdir, supervised
        self.file = workdir / f"witness-{result.backend}-{result.seed}.jsonl"
        # a replay into the same directory starts afresh: the acts of a run stopped halfway
        # would be judged with this one's (275 false violations once, netns etcd seed 3091)
        self.file.unlink(missing_ok=True)
        self.tail = Tail(self.file)
        self.procs: list[Proc] = []
        self.incarnations: dict[str, int] = {}
        self.stops: list[tuple[int, float]] = []  # (pid, time) of every SIGSTOP
        self.expiries: list[tuple[str, float]] = []  # (identity, time) of every forced expiry
        self.epochs: list[tuple[float, int]] = []
        self.background: list[anyio.abc.Process] = []
        self.environ: dict[str, str] = {}  # for every process started, beside HA_URL

    # --- processes ---------------------------------------------------------------------------

    async def start(self, slot: str) -> Proc:
        n = self.incarnations.get(slot, 0)
        self.incarnations[slot] = n + 1
        identity = slot if n == 0 else f"{slot}{n}"
        url = self.env.url(identity)
        argv = self.argv(slot, identity, url)
        environ = {**os.environ, "PYTHONPATH": str(REPO), "HA_URL": url, **self.environ}
        launch = getattr(self.env, "launch", None)  # where it runs: a host (tests/netns)
        if launch is not None:
            argv, environ = await launch(slot, identity, argv, environ)
        log = open(self.workdir / f"{self.r.backend}-{self.r.seed}-{identity}.log", "wb")  # noqa: ASYNC230
        try:
            process = await anyio.open_process(
                argv,
                env=environ,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        finally:
            log.close()
        proc = Proc(slot, identity, process)
        self.procs.append(proc)
        self.r.note(f"start {identity} pid {process.pid}")
        return proc

    def argv(self, slot: str, identity: str, url: str) -> list[str]:
        """How to start the process of ``slot`` (its incarnation ``identity``, on ``url``)."""
        if self.supervised:
            return [
                sys.executable,
                "-m",
                "ha",
                "run",
                ELECTION,
                "--id",
                identity,
                "--grace",
                "0.2",
                "--",
                sys.executable,
                str(COMMAND),
                str(self.file),
                self.r.loop,
            ]
        return [
            sys.executable,
            str(CONTENDER),
            url,
            identity,
            str(self.file),
            self.r.loop,
            str(self.r.seed),
        ]

    def live(self) -> list[Proc]:
        return [p for p in self.procs if p.alive]

    def acting(self, within: float = 0.5) -> dict[str, int]:
        """identity -> pid of whoever acted lately (the active, and its COMMAND's pid)."""
        now = time.monotonic()
        return {
            a["identity"]: a["pid"]
            for a in self.tail.read()[-50:]
            if a["kind"] == "act" and a["end"] > now - within
        }

    def acting_session(self) -> int | None:
        """The session of whoever acted last, if lately."""
        acts = [a for a in self.tail.read()[-50:] if a["kind"] == "act"]
        if acts and acts[-1]["end"] > time.monotonic() - 0.5:
            return int(acts[-1].get("sid") or 0) or None
        return None

    def target(self, pick: float) -> Proc | None:
        """The active most of the time, else any live unpaused process."""
        live = [p for p in self.live() if not p.paused]
        active = [p for p in live if p.identity in self.acting()]
        pool = active if active and pick < 0.7 else live
        return choose(pick, pool) if pool else None  # type: ignore[return-value]

    def stop_pid(self, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
        self.stops.append((pid, time.monotonic()))

    async def cont_later(self, pid: int, delay: float, proc: Proc | None = None) -> None:
        await anyio.sleep(delay)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        if proc is not None:
            proc.paused = False
        self.r.note(f"resume pid {pid}")

    async def command(self, *args: str, whole: bool = False) -> None:
        """An operator's ``ha`` command, as a process; its outcome goes to the log: its last
        line, or with ``whole`` every line (a liveness miss is read from them afterwards)."""
        argv = [sys.executable, "-m", "ha", "--url", self.env.observer_url(), *args]
        result = await anyio.run_process(
            argv, check=False, env={**os.environ, "PYTHONPATH": str(REPO)}
        )
        out = (result.stdout + result.stderr).decode(errors="replace").strip().splitlines()
        if whole:
            self.r.note(f"ha {' '.join(args)} -> exit {result.returncode}:")
            for line in out:
                self.r.note(f"  | {line}")
        else:
            self.r.note(
                f"ha {' '.join(args)} -> exit {result.returncode}: {out[-1] if out else ''}"
            )

    # --- faults ------------------------------------------------------------------------------

    async def apply(self, fault: Fault, tg: anyio.abc.TaskGroup) -> None:
        r, length = self.r, fault.length * self.env.session
        done: str | None = None
        if fault.kind in self.env.kinds:
            done = await self.env.apply(fault, self, tg)
        elif fault.kind == "restart":
            dead = sorted({p.slot for p in self.procs} - {p.slot for p in self.live()})
            if dead:
                proc = await self.start(choose(fault.pick, dead))  # type: ignore[arg-type]
                done = f"restart {proc.identity}"
        elif fault.kind == "format":
            tg.start_soon(self.command, "format", ELECTION, "--force", "--yes")
            done = "format --force"
        elif fault.kind in ("kill", "pause"):
            proc = self.target(fault.pick)
            if proc is not None and fault.kind == "kill":
                proc.process.kill()
                await proc.process.wait()
                done = f"kill {proc.identity}"
            elif proc is not None:
                self.stop_pid(proc.process.pid)
                proc.paused = True
                tg.start_soon(self.cont_later, proc.process.pid, length, proc)
                done = f"pause {proc.identity} {length:.2f}s"
        elif fault.kind in ("kill_command", "pause_command"):
            acting = self.acting()
            if acting:
                identity, pid = choose(fault.pick, sorted(acting.items()))  # type: ignore[misc]
                if fault.kind == "kill_command":
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    done = f"kill COMMAND of {identity} (pid {pid})"
                else:
                    self.stop_pid(pid)
                    tg.start_soon(self.cont_later, pid, length)
                    done = f"pause COMMAND of {identity} (pid {pid}) {length:.2f}s"
        elif fault.kind == "failover":
            acting = self.acting()
            others = [p.identity for p in self.live() if p.identity not in acting]
            if others:
                to = choose(fault.pick, others)
                tg.start_soon(
                    self.command,
                    "failover",
                    ELECTION,
                    "--to",
                    str(to),
                    "--cooldown",
                    "1",
                    "--timeout",
                    "5",
                    "--confirm",
                    "0.3",
                )
                done = f"failover --to {to}"
        else:
            raise ValueError(f"{self.env.kind} has no fault {fault.kind!r}")
        if done:
            if not done.startswith("left"):  # a fault that could not land is not counted
                r.applied[fault.kind] += 1
            r.note(done)

    async def heal(self) -> None:
        await self.env.heal()
        for pid, _ in self.stops:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        for p in self.procs:
            p.paused = False
        await self.restart_dead()

    async def restart_dead(self) -> None:
        for slot in "abc":
            if not any(p.slot == slot for p in self.live()):
                await self.start(slot)

    async def observe(self) -> None:
        """Read the epoch node from outside now and then: the epoch was at least that by then."""
        while True:
            try:
                async with ha.connect(self.env.observer_url()) as d:
                    while True:
                        with contextlib.suppress(HAError):
                            epoch = await leader_epoch(d)
                            if epoch is not None:
                                self.epochs.append((time.monotonic(), epoch))
                        await anyio.sleep(0.05)
            except HAError:
                await anyio.sleep(0.2)

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            for p in self.procs:  # ha run stops its COMMAND on SIGTERM
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.process.pid, signal.SIGCONT)
                    p.process.terminate()
            with anyio.move_on_after(3):
                for p in self.procs:
                    await p.process.wait()
            for p in self.procs:
                if p.process.returncode is None:
                    p.process.kill()
                await p.process.wait()
                await p.process.aclose()
            for pid, _ in self.stops:  # COMMANDs paused when their supervisor went
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)


async def process_round(
    env: Env,
    seed: int,
    workdir: Path,
    loop: str,
    supervised: bool = False,
    faults: list[Fault] | None = None,
) -> RoundResult:
    """One round; ``faults``: a schedule drawn elsewhere (tests/netns), else ``schedule``'s."""
    backend = "supervised" if supervised else env.kind
    r = RoundResult(backend, seed, loop, schedule(backend, seed) if faults is None else faults)
    await env.begin(seed, workdir)
    async with ha.connect(env.observer_url()) as d:
        await prepare(d)
    # the witness's times are monotonic, the servers' logs wall-clock: one reading of both
    r.note(f"clock: monotonic {time.monotonic():.3f} is wall {time.time():.3f}")
    fleet = Fleet(env, r, workdir, supervised)
    healed = None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(fleet.observe)
            for slot in "abc":
                await fleet.start(slot)
            with anyio.move_on_after(30):  # a hang guard: the verdict judges the rest
                while not fleet.acting(1e9):
                    await anyio.sleep(0.05)
            r.note("first act")
            t0 = anyio.current_time()
            for fault in r.schedule:
                await anyio.sleep_until(t0 + fault.at)
                await fleet.apply(fault, tg)
            await anyio.sleep_until(t0 + SPAN)
            await fleet.heal()
            healed = time.monotonic()
            r.note("healed")
            with anyio.move_on_after(env.live_within + 1):
                while not any(
                    a["kind"] == "act" and a["begin"] >= healed for a in fleet.tail.read()
                ):
                    await fleet.restart_dead()  # a process may end on a fatal election error
                    await anyio.sleep(0.05)
            if not any(a["kind"] == "act" and a["begin"] >= healed for a in fleet.tail.read()):
                await fleet.command("status", ELECTION, whole=True)  # for the report
                await fleet.command("history", ELECTION, "--limit", "5", whole=True)
                r.note(f"backend: {await env.describe()}")
            await anyio.sleep(0.2)
            await fleet.close()
            tg.cancel_scope.cancel()
    finally:
        await fleet.close()
    async with ha.connect(env.observer_url()) as d:
        records = await landed(d)
    r.violations = verdict(
        fleet.tail.read(),
        records,
        stops=fleet.stops,
        expiries=fleet.expiries,
        window=SESSION,
        epochs_seen=fleet.epochs,
        healed_at=healed,
        live_within=env.live_within,
        figures=r.figures,
    )
    r.seconds = time.monotonic() - r.started
    return r
