"""Many elections in one process, held: do they settle, what does an idle elector cost, and
does every leader stay leader while nothing happens?

    .venv/bin/python benchmarks/many_elections.py [--counts 300,1000] [--backends zookeeper,etcd]
        [--loops asyncio,trio] [--session-timeout 4] [--idle 12] [--standbys]
        [--drivers 10 --kill]
        [--ha-root DIR --ha-root DIR2]    # two trees' ha, interleaved (rows A: and B:)
        [--gc-threshold 700,20000]          # the child's gc.set_threshold(N), rows for each

Each (count, backend, loop) runs in a fresh process (``--child``) on one driver (one session),
one contender per election (``--standbys``: a second driver in the same process joins every
election as a standby once the leaders hold). Runs are interleaved (every kind at one count,
then the next count). Per run, one row:

- settle: seconds from starting the electors until every election has its leader (and, with
  ``--standbys``, every standby was told so), and the CPU seconds the process spent on it;
- KiB per elector: resident memory growth from before the electors to after settling, divided
  by the number of electors;
- idle: over ``--idle`` seconds from ``QUIET`` (3 s) after settling (each term writes its
  history in the background as it begins: the last ones are still on their way when the last
  leader is told; counted in the idle CPU, they made it 2.8-4.9 % at 10,000 on ZooKeeper, where
  1.0 % is what the process then costs), the process's CPU (% of one core), how many times
  ``become_active`` was called in all (``starts``: one per election is right; more means
  leaders were stopped and started again) and the oldest the driver's ``last_contact`` got
  (``age``, while settling and while idle; an active stops at 2/3 of the session timeout);
- kill a tenth (``--kill``, with ``--drivers N``): a tenth of the drivers (at least one, never
  two next to each other) crash as a killed process does (``ha.testing.faults().crash()``: the
  client stops, its session is left to expire on the server); of the elections they led, how
  many had their standby take over, and seconds from the crash to the median and the last
  takeover (the target: within the session timeout + 1 s).

CPython's collector: a full collection visits every object of every elector, and while
thousands join it ran every ~77,000 allocations (the default threshold of 700 allocations, times
10, times 10): at 10,000 electors on etcd, two thirds of the settling CPU. ``--gc-threshold N``
runs the children with ``gc.set_threshold(N)`` (700 is Python's default), a row for each, to
show what a process of many elections gains by raising it.

Starts its own ZooKeeper and etcd (Debian's packages, like the tests) unless ``--zookeeper`` /
``--etcd`` give hosts. Prints the load average with the table; results are not kept.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.environ.get("HA_ROOT") or str(ROOT))


SERVER_PID = "MANY_ELECTIONS_SERVER_PID"  # set by a parent that knows the server's process


def server_cpu() -> float:
    """The CPU seconds of the server's process so far (0 when nobody said which it is)."""
    pid = os.environ.get(SERVER_PID)
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# --- the child: one process, many elections --------------------------------------------------


async def child(
    url: str, count: int, idle: float, standbys: bool, limit: float, drivers: int, kill: bool
) -> None:
    from contextlib import AsyncExitStack

    import ha

    # the drivers first, the task group inside: a driver may hold a task group of the task
    # that started it (ZooKeeper), closed in the reverse order of the starts
    second = standbys and drivers == 1  # the standbys' driver, started now, used later
    async with AsyncExitStack() as stack:
        connected = [
            await stack.enter_async_context(ha.connect(url)) for _ in range(drivers + second)
        ]
        await run_child(connected, count, idle, limit, drivers, kill, second)


async def run_child(
    connected: list[Any],
    count: int,
    idle: float,
    limit: float,
    drivers: int,
    kill: bool,
    second: bool,
) -> None:
    import random

    import anyio

    import ha
    from ha.testing import faults

    class Holder:
        """Counts its starts (and when each election last started here); ``settled`` once
        ``want`` of them (or of standby notices) came."""

        def __init__(self, want: int) -> None:
            self.starts = self.standby = 0
            self.want = want
            self.settled = anyio.Event()
            self.started: dict[str, float] = {}

        def _check(self, n: int) -> None:
            if n >= self.want:
                self.settled.set()

        async def become_active(self, lease: ha.Lease) -> None:
            self.starts += 1
            self.started[lease.election] = time.monotonic()
            self._check(self.starts)

        async def become_standby(self) -> None:
            self.standby += 1
            self._check(self.standby)

    tag = f"p{os.getpid()}"
    async with anyio.create_task_group() as tg:
        gc.collect()
        base = rss_kib()
        leaders = Holder(count)
        oldest = [0.0]  # the oldest last_contact seen while settling

        async def contact_age() -> None:
            while True:
                contact = min(d.last_contact for d in alive)
                oldest[0] = max(oldest[0], anyio.current_time() - contact)
                await anyio.sleep(0.05)

        alive = list(connected)  # the drivers not killed
        tg.start_soon(contact_age)
        started, cpu, server = time.monotonic(), time.process_time(), server_cpu()
        # election i: its leader on driver i % drivers, its standby on the next one
        electors = [
            ha.Elector(connected[i % drivers], f"/e{i}", f"{tag}-{i % drivers}a")
            for i in range(count)
        ]
        for elector in electors:
            tg.start_soon(elector.run, leaders)
        with anyio.move_on_after(limit):
            await leaders.settled.wait()
        others = Holder(count)
        if (second or drivers > 1) and leaders.settled.is_set():
            behind = [connected[(i + 1) % len(connected)] for i in range(count)]
            electors += [
                ha.Elector(d, f"/e{i}", f"{tag}-{i % drivers}b") for i, d in enumerate(behind)
            ]
            for elector in electors[count:]:
                tg.start_soon(elector.run, others)
            with anyio.move_on_after(limit):
                await others.settled.wait()
        settled, cpu = time.monotonic() - started, time.process_time() - cpu
        server = server_cpu() - server
        if not leaders.settled.is_set() or (len(electors) > count and not others.settled.is_set()):
            print(
                f"UNSETTLED {leaders.starts} of {count} active, {others.standby} standing by,"
                f" after {settled:.1f} s",
                flush=True,
            )
            tg.cancel_scope.cancel()
            return
        per = (rss_kib() - base) / len(electors)  # no collection here: it would stall the loop
        starts_before, settling, oldest[0] = leaders.starts, oldest[0], 0.0
        await anyio.sleep(QUIET)  # the last terms' history writes are still on their way
        idle_started, idle_cpu = time.monotonic(), time.process_time()
        await anyio.sleep(idle)
        idle_cpu = (time.process_time() - idle_cpu) / (time.monotonic() - idle_started) * 100
        restarts = leaders.starts - starts_before
        result = (
            f"RESULT settle {settled:.3f} cpu {cpu:.3f} kib {per:.1f} idle_cpu {idle_cpu:.2f}"
            f" starts {leaders.starts} restarts {restarts} contact_age {oldest[0]:.3f}"
            f" settle_age {settling:.3f} server_cpu {server:.3f}"
        )
        if kill and drivers > 1:
            # a random tenth of the drivers (at least one) die as a killed process does: their
            # leaders' sessions end on the server, the standbys on the next drivers take over
            # (never two next to each other: a standby of the one is on the other)
            doomed = random.sample(range(0, drivers - 1, 2), max(1, drivers // 10))
            lost = [f"/e{i}" for i in range(count) if i % drivers in doomed]
            alive = [d for i, d in enumerate(connected) if i not in doomed]
            killed = time.monotonic()
            for i in doomed:
                await faults(connected[i]).crash()
            timeout = connected[0].session_timeout
            with anyio.move_on_after(3 * timeout + 5):
                while not all(others.started.get(e, 0) > killed for e in lost):
                    await anyio.sleep(0.05)
            took = sorted(others.started.get(e, math.inf) - killed for e in lost)
            done = sum(t < math.inf for t in took)
            result += f" kill_n {len(lost)} kill_done {done} kill_max {took[-1]:.3f}"
            result += f" kill_p50 {took[len(took) // 2]:.3f} session {timeout:g}"
        print(result, flush=True)
        tg.cancel_scope.cancel()


# --- the parent: servers, interleaved runs, the table ----------------------------------------


QUIET = 3.0  # seconds from settling to the idle window (see the module's doc)


def start_servers(
    backends: list[str], given: dict[str, str]
) -> tuple[dict[str, str], list[Callable[[], None]]]:
    from tests.support.backends.etcd import EtcdServer
    from tests.support.backends.zookeeper import ZooKeeperServer

    hosts, stops = dict(given), []
    if "zookeeper" in backends and "zookeeper" not in hosts:
        server = ZooKeeperServer(Path(tempfile.mkdtemp(prefix="many-zk-")))
        server.start()
        server.wait_serving()
        hosts["zookeeper"] = server.hosts
        stops.append(server.stop)
    if "etcd" in backends and "etcd" not in hosts:
        etcd = EtcdServer()
        etcd.start()
        hosts["etcd"] = etcd.hosts
        stops.append(etcd.remove)
    return hosts, stops


def url_of(backend: str, hosts: str, session_timeout: float, run: int) -> str:
    scheme = {"zookeeper": "zk", "etcd": "etcd"}[backend]
    return f"{scheme}://{hosts}/many-{os.getpid()}-{run}?session_timeout={session_timeout:g}"


def one_run(
    url: str, count: int, loop: str, args: argparse.Namespace, tree: str, threshold: str
) -> str:
    command = [sys.executable, __file__, "--child", url, "--count", str(count), "--loop", loop]
    command += ["--gc", threshold] if threshold else []
    command += ["--idle", str(args.idle), "--limit", str(args.limit)]
    command += ["--standbys"] if args.standbys else []
    command += ["--drivers", str(args.drivers)] + (["--kill"] if args.kill else [])
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=args.limit * 2 + args.idle + 60,
            env={**os.environ, "HA_ROOT": tree} if tree else None,
        )
    except subprocess.TimeoutExpired:
        return "timed out"
    lines = done.stdout.strip().splitlines()
    if not lines:
        return f"failed: {done.stderr.strip()[-300:]}"
    return lines[-1]


def row(key: str, count: int, line: str, session_timeout: float) -> str:
    words = line.split()
    if words[:1] != ["RESULT"]:
        return f"{key:<32}{count:>7}  {line}"
    v = dict(zip(words[1::2], words[2::2], strict=True))
    starts = int(v["starts"]) / count
    return (
        f"{key:<32}{count:>7}{float(v['settle']):>9.2f}{float(v['cpu']):>8.2f}"
        f"{float(v['kib']):>9.1f}{float(v['idle_cpu']):>9.1f}{starts:>10.2f}"
        f"{float(v.get('settle_age', 'nan')):>8.2f}{float(v['contact_age']):>8.2f}"
    ) + (
        f"{v['kill_done']:>7}/{v['kill_n']:<6}{float(v['kill_p50']):>7.2f}{float(v['kill_max']):>7.2f}"
        if "kill_n" in v
        else ""
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", default="300,1000")
    parser.add_argument("--backends", default="zookeeper,etcd")
    parser.add_argument("--loops", default="asyncio,trio")
    parser.add_argument("--session-timeout", type=float, default=4.0)
    parser.add_argument("--idle", type=float, default=12.0, help="seconds watched after settling")
    parser.add_argument("--limit", type=float, default=60.0, help="seconds allowed to settle")
    parser.add_argument("--standbys", action="store_true", help="a standby for every election")
    parser.add_argument(
        "--drivers", type=int, default=1, help="drivers (sessions) the leaders are spread over"
    )
    parser.add_argument(
        "--kill", action="store_true", help="then kill a tenth of the drivers (needs --drivers)"
    )
    parser.add_argument("--rounds", type=int, default=1, help="runs of each kind and count")
    parser.add_argument("--zookeeper", help="ZooKeeper hosts (else one is started here)")
    parser.add_argument("--etcd", help="etcd hosts (else one is started here)")
    parser.add_argument(
        "--ha-root", action="append", default=[], help="import ha from this tree (repeatable)"
    )
    parser.add_argument(
        "--gc-threshold",
        default="",
        help="the children's gc.set_threshold, comma-separated: a row for each (default: Python's)",
    )
    parser.add_argument("--gc", help=argparse.SUPPRESS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--loop", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import anyio

        logging.basicConfig(level=logging.CRITICAL)
        if args.gc:
            gc.set_threshold(int(args.gc))
        run = (child, args.child, args.count, args.idle, args.standbys, args.limit)
        run += (args.drivers, args.kill)
        anyio.run(*run, backend=args.loop)
        return
    backends, loops = args.backends.split(","), args.loops.split(",")
    given = {k: getattr(args, k) for k in backends if getattr(args, k)}
    hosts, stops = start_servers(backends, given)
    trees = args.ha_root or [""]
    thresholds = args.gc_threshold.split(",") if args.gc_threshold else [""]
    labels = {
        tree: f"{chr(ord('A') + i)}:" if len(trees) > 1 else "" for i, tree in enumerate(trees)
    }
    try:
        kill = f"{'kill a tenth: re-elected':^28}" if args.kill else ""
        print(f"{'':<32}{'':>7}{'settle':^17}{'':>9}{'idle':^27}{'':>8}{kill}")
        print(
            f"{'kind':<32}{'count':>7}{'s':>9}{'cpu s':>8}{'KiB/el':>9}{'cpu %':>9}"
            f"{'starts/el':>10}{'age: settle':>12}{'idle':>6}"
            + (f"{'of':>12}{'p50 s':>8}{'max s':>7}" if args.kill else "")
        )
        run = 0
        for count in (int(c) for c in args.counts.split(",")):
            for _ in range(args.rounds):
                kinds = itertools.product(thresholds, trees, backends, loops)
                for threshold, tree, backend, loop in kinds:
                    run += 1
                    url = url_of(backend, hosts[backend], args.session_timeout, run)
                    line = one_run(url, count, loop, args, tree, threshold)
                    gc_note = f" gc {threshold}" if threshold else ""
                    key = f"{labels[tree]}{backend} ({loop}){gc_note}"
                    print(row(key, count, line, args.session_timeout), flush=True)
        for tree, label in labels.items():
            if label:
                print(f"{label} ha from {tree}")
        standby = ", a standby each (second driver)" if args.standbys else ""
        if args.drivers > 1:
            standby = (
                f", leaders spread over {args.drivers} drivers (sessions), election i led on"
                f" driver i % {args.drivers} with its standby on the next"
            )
            if args.kill:
                standby += (
                    f"; then {max(1, args.drivers // 10)} driver(s) crash (faults().crash():"
                    " the session left to expire), re-elected = its standby leads"
                )
        print(
            f"session timeout {args.session_timeout:g} s, one leader per election{standby};"
            f" idle window {args.idle:g} s; load average {' '.join(map(str, os.getloadavg()))}"
        )
    finally:
        for stop in stops:
            stop()


if __name__ == "__main__":
    main()
