"""Elector core on the memory backend: handover and failover latency, and scale.

    .venv/bin/python benchmarks/core_memory.py [--rounds 200] [--electors 10000] [--backend trio]

- graceful handover: the active calls quit() -> the next active's become_active is running;
- crash failover: the active's session is expired by the server -> the next one is running;
- scale: N electors, 100 contenders per election, started together, once with a session each
  and once sharing 100 sessions (as processes share one ZooKeeper session for many elections):
  time until every election has one active and all others are standby, and memory per elector
  (resident set growth divided by N).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import time

import anyio
import anyio.lowlevel

import ha
from ha.drivers.memory import MemoryCluster, MemoryDriver

FAST = ha.Timing(backoff=ha.Backoff(initial=0.001, maximum=0.01))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Probe:
    """A contender that notes when its work started."""

    def __init__(self, name: str, marks: dict[str, float]) -> None:
        self.name, self.marks = name, marks

    async def become_active(self, lease: ha.Lease) -> None:
        self.marks[self.name] = time.perf_counter()
        await anyio.sleep_forever()


async def latency(rounds: int, mode: str) -> list[float]:
    cluster = f"bench-{mode}"
    samples: list[float] = []
    marks: dict[str, float] = {}
    async with anyio.create_task_group() as tg:
        drivers = [MemoryDriver(cluster, session_timeout=5.0) for _ in range(3)]
        for d in drivers:
            await d.start()
        electors: dict[int, ha.Elector] = {}

        async def join(i: int) -> None:
            electors[i] = ha.Elector(drivers[i], "/bench", f"n{i}", timing=FAST)
            await tg.start(electors[i].run, Probe(f"n{i}", marks))

        for i in range(3):
            await join(i)
        while not any(e.state is ha.State.ACTIVE for e in electors.values()):
            await anyio.sleep(0.001)
        for _ in range(rounds):
            [leader] = [i for i, e in electors.items() if e.state is ha.State.ACTIVE]
            marks.clear()
            t0 = time.perf_counter()
            if mode == "handover":
                electors[leader].quit()
            else:
                sid = drivers[leader].session_id
                assert sid is not None
                drivers[leader].cluster.expire(sid)
            while not marks:  # the next active's Probe records its start
                await anyio.lowlevel.checkpoint()
            samples.append(min(marks.values()) - t0)
            # bring the old leader back as a standby for the next round
            while electors[leader].state is ha.State.ACTIVE or (
                mode == "handover" and electors[leader]._send is not None
            ):
                await anyio.sleep(0.001)
            if mode == "handover":
                await join(leader)
            while sum(e.state is ha.State.STANDBY for e in electors.values()) < 2:
                await anyio.sleep(0.001)
        for e in electors.values():
            e.quit()
        await anyio.sleep(0.05)
        for d in drivers:
            await d.aclose()
        tg.cancel_scope.cancel()
    MemoryCluster.drop(cluster)
    return samples


async def scale(n: int, sessions: int, per_election: int = 100) -> tuple[float, float]:
    gc.collect()
    before = rss_bytes()
    cluster = "bench-scale"
    drivers = [MemoryDriver(cluster, session_timeout=30.0) for _ in range(sessions)]
    electors = [
        ha.Elector(drivers[i % sessions], f"/scale/{i // per_election}", f"c{i}", timing=FAST)
        for i in range(n)
    ]
    marks: dict[str, float] = {}
    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for d in drivers:
            await d.start()
        for i, e in enumerate(electors):
            tg.start_soon(e.run, Probe(f"c{i}", marks))
        elections = n // per_election
        while True:
            actives = sum(e.state is ha.State.ACTIVE for e in electors)
            standbys = sum(e.state is ha.State.STANDBY for e in electors)
            if actives == elections and standbys == n - elections:
                break
            await anyio.sleep(0.01)
        settled = time.perf_counter() - t0
        gc.collect()
        per_elector = (rss_bytes() - before) / n
        for e in electors:
            e.quit()
        await anyio.sleep(0.1)
        for d in drivers:
            await d.aclose()
    MemoryCluster.drop(cluster)
    return settled, per_elector


async def main(args: argparse.Namespace) -> None:
    print(f"ha core on the memory backend, anyio backend {args.backend}")
    print(f"{'measure':<34}{'p50':>10}{'p99':>10}{'max':>10}")
    for mode, title in (
        ("handover", "graceful handover (quit)"),
        ("crash", "failover (session expired)"),
    ):
        samples = await latency(args.rounds, mode)
        ms = [s * 1000 for s in samples]
        print(
            f"{title + f', {len(ms)} rounds':<34}{statistics.median(ms):>8.3f}ms"
            f"{pct(ms, 0.99):>8.3f}ms{max(ms):>8.3f}ms"
        )


def scale_table(args: argparse.Namespace) -> None:
    for sessions in (args.electors, 100):
        # a fresh process for each, so memory freed by the last run does not hide growth
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--scale-only",
                str(sessions),
                "--electors",
                str(args.electors),
                "--backend",
                args.backend,
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        settled, per = float(out[0]), float(out[1])
        print(
            f"{args.electors} electors on {sessions} sessions: settled in {settled:.2f} s, "
            f"{per / 1024:.1f} KiB per elector"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--electors", type=int, default=10_000)
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    parser.add_argument("--scale-only", type=int, metavar="SESSIONS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scale_only:
        settled, per = anyio.run(scale, args.electors, args.scale_only, backend=args.backend)
        print(settled, per)
    else:
        anyio.run(main, args, backend=args.backend)
        scale_table(args)
