"""Chaos rounds judged by the witness (``tests/support/witness.py``), not by the electors' own history.

A round: three contenders start on a fresh namespace, a seeded schedule of faults runs for
``SPAN`` seconds, then everything heals and some contender must act again within a bound;
then the witness file and the records that landed in the backend are judged (``verdict``).

Backends (``--backend``): ``memory`` (electors in this process, the memory driver's faults and
loop stalls), ``sqlite`` (contender processes on one file), ``supervised`` (``ha run``
processes on sqlite, with ``ha failover --to``), ``zookeeper`` (one server, a fault proxy per
client), ``ensemble`` (three servers, quorum links through a fault proxy when available),
``etcd`` (a 3-member etcd cluster, three fault-proxy links per client: ``tests/chaos/etcd_env.py``),
``kubernetes`` (the FAKE API server, a fault-proxy link per client: ``tests/chaos/kube_env.py``).

Replay one round: ``python -m tests.chaos --backend sqlite --seed 1234 --rounds 1``; the long
run: ``--rounds 1000`` (or ``HA_CHAOS_ROUNDS=1000 pytest -m slow tests/chaos/test_chaos.py``).
A round's seed fixes its schedule (times, kinds, lengths, target draws); which process a draw
hits depends on who leads then, so a replay repeats the schedule, not every interleaving.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field

from tests.support.witness import Figures, Violation

SPAN = 3.0  # seconds of faults per round
SUPERVISED = (
    "supervised-"  # the prefix of a backend's supervised rounds (tests/chaos/supervised.py)
)
FAULTS = 5  # faults per round
LENGTHS = (0.3, 0.7, 1.5)  # a fault's length in session timeouts: within the lease, or past it
# twice as long: a cut follower serves its clients until syncLimit (5 s) runs out, a cut-off
# client's session must have time to expire and the others to take over
LONGER = ("follower_cut", "leader_isolated", "link_pause", "member_cut")

KINDS: dict[str, dict[str, int]] = {
    "memory": {
        "crash": 2,
        "partition": 2,
        "freeze": 1,
        "disconnect": 1,
        "expire": 2,
        "stall": 2,
        "restart": 1,
    },
    "sqlite": {"kill": 2, "pause": 3, "restart": 1, "busy": 2, "lockfiles": 1, "format": 1},
    "supervised": {
        "kill": 2,
        "kill_command": 1,
        "pause_command": 1,
        "restart": 1,
        "failover": 3,
        "format": 1,
        "busy": 1,
    },
    "zookeeper": {
        "kill": 2,
        "pause": 3,
        "restart": 1,
        "link_pause": 2,
        "link_drop": 2,
        "format": 1,
    },
    "ensemble": {
        "kill": 1,
        "pause": 2,
        "restart": 1,
        "server_restart": 2,
        "follower_cut": 2,
        "leader_isolated": 2,
    },
    "etcd": {
        "kill": 1,
        "pause": 2,
        "restart": 1,
        "format": 1,
        "member_kill": 2,
        "member_pause": 2,
        "member_cut": 2,
        "link_pause": 2,
        "link_drop": 1,
        "expire": 1,
    },
    "kubernetes": {
        "kill": 2,
        "pause": 2,
        "restart": 1,
        "format": 1,
        "api_pause": 2,
        "api_restart": 1,
        "conflicts": 2,
        "watch_expiry": 2,
        "lease_taken": 1,
        "lease_deleted": 1,
        "link_pause": 2,
        "link_drop": 1,
    },
}


@dataclass(frozen=True)
class Fault:
    at: float  # seconds into the faults phase
    kind: str
    pick: float  # draws the target among the candidates of the moment
    length: float  # in session timeouts (pauses, cuts, busy spells, stalls)

    def __str__(self) -> str:
        return f"+{self.at:.2f}s {self.kind} pick={self.pick:.2f} length={self.length}"


def schedule(backend: str, seed: int, faults: int = FAULTS, span: float = SPAN) -> list[Fault]:
    rng = random.Random(f"{backend}-{seed}")
    kinds = list(KINDS[backend])
    weights = list(KINDS[backend].values())
    faults_: list[Fault] = []
    for t in sorted(rng.uniform(0, span) for _ in range(faults)):
        kind = rng.choices(kinds, weights)[0]
        pick, length = round(rng.random(), 3), rng.choice(LENGTHS)
        if kind in LONGER:
            length *= 2
        faults_.append(Fault(round(t, 3), kind, pick, length))
    return faults_


def choose(pick: float, items: list) -> object:  # type: ignore[type-arg]
    return items[min(int(pick * len(items)), len(items) - 1)]


@dataclass
class RoundResult:
    backend: str
    seed: int
    loop: str
    schedule: list[Fault]
    setup: list[str] = field(default_factory=list)  # what the seed drew besides the faults
    log: list[str] = field(default_factory=list)
    applied: Counter[str] = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
    figures: Figures = field(default_factory=Figures)
    seconds: float = 0.0
    started: float = field(default_factory=time.monotonic)

    def note(self, what: str) -> None:
        self.log.append(f"{time.monotonic() - self.started:7.3f} {what}")

    def replay(self) -> str:
        kind = self.backend.removeprefix(SUPERVISED)
        flag = "--supervised " if kind != self.backend else ""
        package = "tests.chaos"
        if kind.startswith("netns-"):  # tests/netns: hosts as network namespaces
            package, kind = "tests.netns", kind.removeprefix("netns-")
        return (
            f"python -m {package} {flag}--backend {kind} --seed {self.seed} "
            f"--rounds 1 --loop {self.loop}"
        )

    def report(self) -> str:
        lines = [
            f"{self.backend} round, seed {self.seed}, {self.loop}: "
            f"{len(self.violations)} violation(s); replay: {self.replay()}",
            *self.setup,
            "schedule:",
        ]
        lines += [f"  {f}" for f in self.schedule]
        kinds = Counter(v.kind for v in self.violations)
        lines.append("violations: " + (", ".join(f"{k} x{n}" for k, n in kinds.items()) or "none"))
        for kind in kinds:  # the first few of each kind
            lines += [f"  {v}" for v in [v for v in self.violations if v.kind == kind][:5]]
        lines += ["what the harness did:"] + [f"  {x}" for x in self.log]
        return "\n".join(lines)


def table(results: list[RoundResult], seconds: float) -> str:
    """The summary: one row per backend."""
    rows = [
        ("backend", "rounds", "faults by kind", "acts", "landed", "refused", "violations", "time")
    ]
    for backend in dict.fromkeys(r.backend for r in results):
        mine = [r for r in results if r.backend == backend]
        kinds: Counter[str] = Counter()
        for r in mine:
            kinds.update(r.applied)
            if r.figures.stalls:
                kinds["own_stall"] += r.figures.stalls  # the contenders' loop stalls
        rows.append(
            (
                backend,
                str(len(mine)),
                " ".join(f"{k}={n}" for k, n in sorted(kinds.items())),
                str(sum(r.figures.acts for r in mine)),
                str(sum(r.figures.landed for r in mine)),
                str(sum(r.figures.refused for r in mine)),
                str(sum(len(r.violations) for r in mine)),
                f"{sum(r.seconds for r in mine):.0f}s",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    out.append(f"total {len(results)} rounds in {seconds:.0f}s")
    return "\n".join(out)
