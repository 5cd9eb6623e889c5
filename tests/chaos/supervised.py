"""Supervised rounds: three ``ha run`` on one backend, attacked, judged by their COMMANDs.

Every backend of the process rounds (sqlite, ZooKeeper, etcd, the Kubernetes fake) can run them.
The seed draws the whole round (``plan``): the session timeout, each supervisor's ``--grace``,
``--hold-on-disconnect``, ``--priority`` and ``--settle`` (only what ``ha run`` accepts, asked of
the code that ``ha run`` validates with, never a copy of its rules), how long each COMMAND
takes to stop after SIGTERM, and the faults:

- ``freeze``: SIGSTOP a supervisor (the active most of the time, else any), SIGCONT later;
- ``freeze_guard``: SIGSTOP the guard between a supervisor and its COMMAND (``_guard.py``);
- ``kill``: SIGKILL a supervisor; ``restart``: start a dead slot again (a new identity);
- ``kill_command``, ``pause_command``: SIGKILL, or SIGSTOP for a while, the active's COMMAND;
- ``failover`` (``ha failover --to X``), ``ha_pause`` (``ha pause``, ``ha resume`` later),
  ``format`` (``ha format --force``): an operator's commands, run as processes;
- the backend's own faults (``envs.py``, ``etcd_env.py``, ``kube_env.py``), but not those that
  end a session before its timeout on purpose (etcd's ``expire``, a Lease taken or deleted):
  the contender rounds excuse what follows them, a COMMAND's heartbeat cannot be excused.

Lengths are 0.3 to 3 session timeouts: within the session and past it. After the faults the
round heals (SIGCONT, links back, ``ha resume``, dead slots started again), a COMMAND must beat
again, then every supervisor is stopped and no COMMAND may outlive them. The heartbeats are
judged by ``containment.check``; a supervisor that exits by itself (``ha run`` gives up, on a
refused fence, a backend down at its start, a fatal error) fails the round too.

A guard may be frozen together with its supervisor (its timer kills it, and COMMAND with it).
Left out on purpose: a guard frozen together with its COMMAND (a frozen cgroup or VM): nothing
on the host can stop COMMAND then, which is what ``--fence`` is for (the README's ``ha run``
section). Two freezes that would overlap so are not applied (the log says "left ...
running"); ``freeze_tree`` does it on purpose, for the harness's self-test.

Replay: ``python -m tests.chaos --supervised --backend KIND --seed N --rounds 1 --loop LOOP``
draws the same plan and schedule (with the same code: the draw asks the validation); which
process a draw hits depends on who leads at that moment, as in the contender rounds.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import anyio
import anyio.abc

import ha
from ha.drivers.base import Driver
from ha.election.names import MAX_PRIORITY
from ha.errors import ConfigurationError
from ha.supervisor import Settings, Supervisor
from tests.chaos import SUPERVISED, Fault, RoundResult
from tests.chaos.containment import check, commands, most_alive, read_beats
from tests.chaos.contender import ELECTION
from tests.chaos.procs import REPO, Env, Fleet, Proc, Tail
from tests.support.witness import Violation

HEARTBEAT = REPO / "tests" / "chaos" / "heartbeat.py"
SLOTS = "abc"
# the session timeout's range, in seconds: shorter ones are accepted too, but on 2 loaded cores
# a scheduling delay of a tenth of a second would be the machine's fault, not ha run's
SESSIONS = (1.0, 3.0)
SPAN = 4.0  # session timeouts of faults per round
FAULTS = 6  # faults per round
LENGTHS = (0.3, 0.7, 1.5, 3.0)  # a fault's length, in session timeouts
SUPERVISOR_KINDS = {
    "freeze": 4,
    "freeze_guard": 2,
    "kill": 2,
    "restart": 1,
    "kill_command": 1,
    "pause_command": 1,
    "failover": 2,
    "ha_pause": 1,
    "format": 1,
}
ENV_KINDS = {
    "sqlite": {"busy": 1, "lockfiles": 1},
    "zookeeper": {"link_pause": 2, "link_drop": 1},
    "etcd": {"member_kill": 1, "member_pause": 1, "member_cut": 1, "link_pause": 2, "link_drop": 1},
    "kubernetes": {
        "api_pause": 1,
        "api_restart": 1,
        "conflicts": 1,
        "watch_expiry": 1,
        "link_pause": 2,
        "link_drop": 1,
    },
}
KINDS = tuple(ENV_KINDS)  # the backends with supervised rounds


@dataclass(frozen=True)
class Options:
    """One supervisor's ``ha run`` options, and how long its COMMAND takes to stop."""

    grace: float
    hold: float  # --hold-on-disconnect
    priority: int
    settle: float
    linger: float  # seconds COMMAND beats on after SIGTERM (past --grace it is killed)
    detach: bool = False  # COMMAND beats from a daemon of its own (the self-test's)

    def argv(self) -> list[str]:
        return [
            "--grace",
            f"{self.grace:g}",
            "--hold-on-disconnect",
            f"{self.hold:g}",
            "--priority",
            str(self.priority),
            "--settle",
            f"{self.settle:g}",
        ]

    def __str__(self) -> str:
        return " ".join(self.argv()) + f" (COMMAND lingers {self.linger:g}s)"


@dataclass(frozen=True)
class Plan:
    session: float
    options: dict[str, Options]  # by slot
    faults: list[Fault]  # ``at`` in seconds, ``length`` in session timeouts
    span: float  # seconds of faults
    granted: float  # the session timeout the backend granted (the options were checked with)

    def describe(self) -> list[str]:
        granted = f" (granted {self.granted:g}s)" if self.granted != self.session else ""
        lines = [f"session timeout {self.session:g}s{granted}"]
        return lines + [f"  {slot}: ha run {o}" for slot, o in self.options.items()]


def accepts(driver: Driver, options: Options) -> bool:
    """Whether ``ha run`` takes these options on this (started) driver: built as ``ha run``
    builds its supervisor once connected (``Settings``, then ``Supervisor``, whose timing
    refuses what is unsafe for the session timeout the backend granted)."""
    try:
        settings = Settings(
            ELECTION,
            "check",
            ("true",),
            grace=options.grace,
            priority=options.priority,
            settle=options.settle,
            hold_on_disconnect=options.hold,
        )
        Supervisor(driver, settings)
    except ConfigurationError:
        return False
    return True


def accepted(lo: float, hi: float, ok: Callable[[float], bool], steps: int = 32) -> list[float]:
    """The values of a grid over [lo, hi] that ``ok`` accepts, with the edges of each accepted
    stretch found by bisection (to the millisecond): the extremes validation still takes."""
    grid = [round(lo + (hi - lo) * i / steps, 3) for i in range(steps + 1)]
    marks = [ok(x) for x in grid]
    found = [x for x, m in zip(grid, marks, strict=True) if m]
    for i in range(steps):
        if marks[i] == marks[i + 1]:
            continue
        yes, no = (grid[i], grid[i + 1]) if marks[i] else (grid[i + 1], grid[i])
        while abs(yes - no) > 0.001:
            mid = round((yes + no) / 2, 4)
            if mid in (yes, no):
                break
            yes, no = (mid, no) if ok(mid) else (yes, mid)
        edge = round(yes, 3)
        if ok(edge):
            found.append(edge)
    return sorted(set(found))


def _pick(rng: random.Random, values: list[float]) -> float:
    """One of ``values``: an extreme a third of the time."""
    if rng.random() < 1 / 3:
        return rng.choice([values[0], values[-1]])
    return rng.choice(values)


def draw_options(rng: random.Random, driver: Driver) -> Options:
    session = driver.session_timeout
    priority = rng.choice([0, 0, 1, 2, MAX_PRIORITY])
    settle = round(rng.choice([0.0, rng.uniform(0, 3 * session)]), 3)
    base = Options(0.0, 0.0, priority, settle, 0.0)
    graces = accepted(0, session, lambda g: accepts(driver, replace(base, grace=g)))
    base = replace(base, grace=_pick(rng, graces))
    holds = [0.0]
    if rng.random() < 0.5:
        holds = accepted(0, session, lambda h: accepts(driver, replace(base, hold=h)))
        holds = [h for h in holds if h > 0] or [0.0]
    options = replace(base, hold=_pick(rng, holds))
    linger = rng.choice([0.0, 0.0, round(rng.uniform(0, 2 * options.grace + 0.1), 3)])
    options = replace(options, linger=linger)
    assert accepts(driver, options), options
    return options


async def plan(kind: str, seed: int, env: Env) -> Plan:
    """The round ``seed`` of supervised rounds on ``kind``: everything the seed decides.

    The options are checked against a driver connected with the round's URL, as ``ha run``
    checks them: a backend may grant another session timeout than the URL asks for (etcd
    rounds a lease's TTL up to whole seconds)."""
    rng = random.Random(f"{SUPERVISED}{kind}-{seed}")
    while True:
        session = round(rng.uniform(*SESSIONS), 1)
        try:
            driver = ha.connect(env.direct_url(session))
            break
        except ConfigurationError:  # the backend refuses this session timeout: draw again
            continue
    async with driver:
        options = {slot: draw_options(rng, driver) for slot in SLOTS}
        granted = driver.session_timeout
    weights = {**SUPERVISOR_KINDS, **ENV_KINDS[kind]}
    faults = []
    for at in sorted(rng.uniform(0, SPAN * session) for _ in range(FAULTS)):
        what = rng.choices(list(weights), list(weights.values()))[0]
        faults.append(Fault(round(at, 3), what, round(rng.random(), 3), rng.choice(LENGTHS)))
    return Plan(session, options, faults, SPAN * session, granted)


# --- the fleet of supervisors -----------------------------------------------------------------


def children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the live children of ``pid``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[1]) != pid or fields[0] in (b"Z", b"X"):
                continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                found.append((int(name), f.read().replace(b"\0", b" ").decode(errors="replace")))
        except (OSError, IndexError):
            continue  # gone meanwhile
    return found


def holding(path: Path) -> list[int]:
    """Processes whose command line names ``path``: COMMANDs of a round, and their guards."""
    needle = str(path).encode()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            with contextlib.suppress(OSError):
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if needle in f.read():
                        found.append(int(name))
    return found


class Supervisors(Fleet):
    """``ha run`` processes with the options of the plan; COMMAND is ``heartbeat.py``."""

    def __init__(self, env: Env, result: RoundResult, workdir: Path, plan: Plan) -> None:
        super().__init__(env, result, workdir, supervised=True)
        self.plan = plan
        self.file = workdir / f"beats-{result.backend}-{result.seed}.jsonl"
        self.file.unlink(missing_ok=True)  # a replay into the same directory starts afresh
        self.tail = Tail(self.file)
        self.environ = {"HA_ASYNC_BACKEND": result.loop}
        self.frozen: set[int] = set()  # pids the harness holds stopped now

    def argv(self, slot: str, identity: str, url: str) -> list[str]:
        o = self.plan.options[slot]
        command = [sys.executable, "-I", "-S", str(HEARTBEAT), str(self.file), f"{o.linger:g}"]
        command += ["detach"] if o.detach else []
        ha_run = [sys.executable, "-m", "ha", "run", ELECTION, "--id", identity]
        return [*ha_run, *o.argv(), "--", *command]

    def acting(self, within: float = 0.5) -> dict[str, int]:
        """identity -> pid of the COMMANDs that beat lately."""
        now = time.monotonic()
        return {b["id"]: b["pid"] for b in self.tail.read()[-50:] if b["t"] > now - within}

    def guard(self, proc: Proc) -> int | None:
        """The pid of the guard between ``proc`` and its COMMAND, if one runs."""
        for pid, line in children(proc.process.pid):
            if "_guard.py" in line:
                return pid
        return None

    async def apply(self, fault: Fault, tg: anyio.abc.TaskGroup) -> None:
        length = fault.length * self.env.session
        done: str | None = None
        if fault.kind == "freeze":
            proc = self.target(fault.pick)
            if proc is not None:
                done = self._freeze(proc, proc.process.pid, length, tg)
        elif fault.kind in ("freeze_guard", "freeze_tree"):
            guarded: list[tuple[Proc, int]] = []
            for p in self.live():
                guard = self.guard(p)  # a frozen supervisor's too
                if guard is not None:
                    guarded.append((p, guard))
            acting = self.acting()
            active = [(p, g) for p, g in guarded if p.identity in acting]
            pool = active if active and fault.pick < 0.7 else guarded
            if pool:
                proc, guard = pool[min(int(fault.pick * len(pool)), len(pool) - 1)]
                together = fault.kind == "freeze_tree"
                done = self._freeze(proc, guard, length, tg, together)
                if together:
                    done = f"{done}; {self._freeze(proc, proc.process.pid, length, tg, together)}"
        elif fault.kind == "pause_command":
            acting = self.acting()
            if acting:
                identity, pid = sorted(acting.items())[
                    min(int(fault.pick * len(acting)), len(acting) - 1)
                ]
                proc = next((p for p in self.procs if p.identity == identity), None)
                if proc is not None:
                    done = self._freeze(proc, pid, length, tg)
        elif fault.kind == "ha_pause":
            tg.start_soon(self._pause_election, length)
            done = f"ha pause, ha resume after {length:.2f}s"
        else:
            await super().apply(fault, tg)
            return
        if done:
            if not done.startswith("left"):
                self.r.applied[fault.kind] += 1
            self.r.note(done)

    def _freeze(
        self, proc: Proc, pid: int, length: float, tg: anyio.abc.TaskGroup, together: bool = False
    ) -> str:
        """SIGSTOP ``pid`` (``proc``'s supervisor, guard or COMMAND), SIGCONT after ``length``.

        Not while that would hold a guard frozen with its COMMAND: nothing on the host can stop
        COMMAND then, the limit that ``ha run``'s README states and that ``--fence`` is for
        (``together``: anyway, the self-test's ``freeze_tree``). A guard frozen with its
        supervisor is fair: its timer kills it, and COMMAND with it."""
        guards = [g for g, line in children(proc.process.pid) if "_guard.py" in line]
        commands = [c for g in guards for c, _ in children(g)]
        what = (
            f"the guard of {proc.identity} (pid {pid})"
            if pid in guards
            else f"COMMAND of {proc.identity} (pid {pid})"
            if pid in commands
            else f"supervisor {proc.identity}"
        )
        if pid in guards:
            clash = [c for c in commands if c in self.frozen]
        elif pid in commands:
            clash = [g for g in guards if g in self.frozen]
        else:
            clash = []  # a supervisor: frozen with its guard or not, COMMAND must not outlive
        if clash and not together:
            return f"left {what} running: pid {clash[0]} is frozen (a guard with its COMMAND)"
        self.stop_pid(pid)
        self.frozen.add(pid)
        if pid == proc.process.pid:
            proc.paused = True
        tg.start_soon(self._thaw, pid, length, proc if pid == proc.process.pid else None)
        return f"freeze {what} {length:.2f}s"

    async def _thaw(self, pid: int, length: float, proc: Proc | None) -> None:
        try:
            await self.cont_later(pid, length, proc)
        finally:
            self.frozen.discard(pid)

    async def _pause_election(self, length: float) -> None:
        await self.command("pause", ELECTION)
        await anyio.sleep(length)
        await self.command("resume", ELECTION)

    async def heal(self) -> None:
        await super().heal()
        self.frozen.clear()
        await self.command("resume", ELECTION)

    def exits(self) -> list[str]:
        """The supervisors that ended by themselves (the harness's SIGKILLs aside)."""
        return [
            f"{p.identity} (exit {p.process.returncode})"
            for p in self.procs
            if p.process.returncode not in (None, -signal.SIGKILL)
        ]


async def supervised_round(
    env: Env,
    seed: int,
    workdir: Path,
    loop: str,
    drawn: Plan | None = None,
) -> RoundResult:
    """One round: the plan of ``seed``, or ``drawn`` (the harness's self-test)."""
    await env.begin(seed, workdir)
    drawn = drawn or await plan(env.kind, seed, env)
    env.session = drawn.session
    r = RoundResult(f"{SUPERVISED}{env.kind}", seed, loop, drawn.faults, drawn.describe())
    fleet = Supervisors(env, r, workdir, drawn)
    healed = None
    ended: list[str] = []
    live_within = env.live_within + 2 * drawn.session
    try:
        async with anyio.create_task_group() as tg:
            for slot in SLOTS:
                await fleet.start(slot)
            with anyio.move_on_after(30):  # a hang guard: the check judges the rest
                while not fleet.acting(1e9):
                    await anyio.sleep(0.05)
            r.note("first beat")
            t0 = anyio.current_time()
            for fault in r.schedule:
                await anyio.sleep_until(t0 + fault.at)
                await fleet.apply(fault, tg)
            await anyio.sleep_until(t0 + drawn.span)
            await fleet.heal()
            healed = time.monotonic()
            r.note("healed")
            with anyio.move_on_after(live_within + 1):
                while not any(b["t"] >= healed for b in fleet.tail.read()[-50:]):
                    await fleet.restart_dead()  # a supervisor may end on a fatal error
                    await anyio.sleep(0.05)
            if not any(b["t"] >= healed for b in fleet.tail.read()):
                await fleet.command("status", ELECTION, whole=True)  # for the report
                await fleet.command("history", ELECTION, "--limit", "5", whole=True)
                r.note(f"backend: {await env.describe()}")
            await anyio.sleep(0.2)
            ended = fleet.exits()  # before they are stopped
            await fleet.close()
            tg.cancel_scope.cancel()
    finally:
        await fleet.close()
        survivors = await _survivors(fleet.file)
    beats = read_beats(fleet.file)
    r.violations = check(beats, healed_at=healed, live_within=live_within)
    runs = commands(beats)
    r.note(f"{len(runs)} COMMANDs ran, at most {most_alive(runs)} at once")
    if survivors is not None:
        r.violations.append(survivors)
    for exit in ended:  # a daemon that gives up leaves the service headless (issue 26, 6 and 7)
        r.violations.append(Violation("supervisor exit", f"{exit} without being stopped"))
    r.figures.acts = len(beats)
    r.figures.epochs = len({b["epoch"] for b in beats})
    r.figures.identities = {b["id"] for b in beats}
    r.seconds = time.monotonic() - r.started
    return r


async def _survivors(file: Path) -> Violation | None:
    """A COMMAND (or its guard) alive 2 s after every supervisor has gone is a violation; it
    is killed so that nothing outlives the round."""
    with anyio.move_on_after(2):
        while holding(file):
            await anyio.sleep(0.05)
    left = holding(file)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if not left:
        return None
    return Violation("survivor", f"pids {left} ran 2s after every supervisor had exited")
