"""Many elections in one process, held: do they settle, what does an idle elector cost, and
does every leader stay leader while nothing happens?

    .venv/bin/python benchmarks/many_elections.py [--counts 300,1000] [--backends zookeeper,etcd]
        [--loops asyncio,trio] [--session-timeout 4] [--idle 12] [--standbys]
        [--ha-root DIR --ha-root DIR2]    # two trees' ha, interleaved (rows A: and B:)

Each (count, backend, loop) runs in a fresh process (``--child``) on one driver (one session),
one contender per election (``--standbys``: a second driver in the same process joins every
election as a standby once the leaders hold). Runs are interleaved (every kind at one count,
then the next count). Per run, one row:

- settle: seconds from starting the electors until every election has its leader (and, with
  ``--standbys``, every standby was told so), and the CPU seconds the process spent on it;
- KiB per elector: resident memory growth from before the electors to after settling, divided
  by the number of electors;
- idle: over the next ``--idle`` seconds, the process's CPU (% of one core), how many times
  ``become_active`` was called in all (``starts``: one per election is right; more means
  leaders were stopped and started again) and the oldest the driver's ``last_contact`` got
  (``age``, while settling and while idle; an active stops at 2/3 of the session timeout).

Starts its own ZooKeeper and etcd (Debian's packages, like the tests) unless ``--zookeeper`` /
``--etcd`` give hosts. Prints the load average with the table; results are not kept.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.environ.get("HA_ROOT") or str(ROOT))


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# --- the child: one process, many elections --------------------------------------------------


async def child(url: str, count: int, idle: float, standbys: bool, limit: float) -> None:
    import anyio

    import ha

    class Holder:
        """Counts its starts; ``settled`` once ``want`` of them (or of standby notices) came."""

        def __init__(self, want: int) -> None:
            self.starts = self.standby = 0
            self.want = want
            self.settled = anyio.Event()

        def _check(self, n: int) -> None:
            if n >= self.want:
                self.settled.set()

        async def become_active(self, lease: ha.Lease) -> None:
            self.starts += 1
            self._check(self.starts)

        async def become_standby(self) -> None:
            self.standby += 1
            self._check(self.standby)

    tag = f"p{os.getpid()}"
    async with ha.connect(url) as driver, anyio.create_task_group() as tg:
        gc.collect()
        base = rss_kib()
        leaders = Holder(count)
        oldest = [0.0]  # the oldest last_contact seen while settling

        async def contact_age() -> None:
            while True:
                oldest[0] = max(oldest[0], anyio.current_time() - driver.last_contact)
                await anyio.sleep(0.05)

        tg.start_soon(contact_age)
        started, cpu = time.monotonic(), time.process_time()
        electors = [ha.Elector(driver, f"/e{i}", f"{tag}-a") for i in range(count)]
        for elector in electors:
            tg.start_soon(elector.run, leaders)
        with anyio.move_on_after(limit):
            await leaders.settled.wait()
        if standbys and leaders.settled.is_set():
            second = await ha.connect(url).__aenter__()  # closed with the process
            others = Holder(count)
            electors += [ha.Elector(second, f"/e{i}", f"{tag}-b") for i in range(count)]
            for elector in electors[count:]:
                tg.start_soon(elector.run, others)
            with anyio.move_on_after(limit):
                await others.settled.wait()
        settled, cpu = time.monotonic() - started, time.process_time() - cpu
        if not leaders.settled.is_set() or (standbys and not others.settled.is_set()):
            print(f"UNSETTLED {leaders.starts} of {count} active after {settled:.1f} s", flush=True)
            tg.cancel_scope.cancel()
            return
        per = (rss_kib() - base) / len(electors)  # no collection here: it would stall the loop
        starts_before, settling, oldest[0] = leaders.starts, oldest[0], 0.0
        idle_started, idle_cpu = time.monotonic(), time.process_time()
        await anyio.sleep(idle)
        idle_cpu = (time.process_time() - idle_cpu) / (time.monotonic() - idle_started) * 100
        restarts = leaders.starts - starts_before
        print(
            f"RESULT settle {settled:.3f} cpu {cpu:.3f} kib {per:.1f} idle_cpu {idle_cpu:.2f}"
            f" starts {leaders.starts} restarts {restarts} contact_age {oldest[0]:.3f}"
            f" settle_age {settling:.3f}",
            flush=True,
        )
        tg.cancel_scope.cancel()


# --- the parent: servers, interleaved runs, the table ----------------------------------------


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


def one_run(url: str, count: int, loop: str, args: argparse.Namespace, tree: str) -> str:
    command = [sys.executable, __file__, "--child", url, "--count", str(count), "--loop", loop]
    command += ["--idle", str(args.idle), "--limit", str(args.limit)]
    command += ["--standbys"] if args.standbys else []
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
        return f"{key:<24}{count:>7}  {line}"
    v = dict(zip(words[1::2], words[2::2], strict=True))
    starts = int(v["starts"]) / count
    return (
        f"{key:<24}{count:>7}{float(v['settle']):>9.2f}{float(v['cpu']):>8.2f}"
        f"{float(v['kib']):>9.1f}{float(v['idle_cpu']):>9.1f}{starts:>10.2f}"
        f"{float(v.get('settle_age', 'nan')):>8.2f}{float(v['contact_age']):>8.2f}"
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
    parser.add_argument("--rounds", type=int, default=1, help="runs of each kind and count")
    parser.add_argument("--zookeeper", help="ZooKeeper hosts (else one is started here)")
    parser.add_argument("--etcd", help="etcd hosts (else one is started here)")
    parser.add_argument(
        "--ha-root", action="append", default=[], help="import ha from this tree (repeatable)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--loop", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import anyio

        logging.basicConfig(level=logging.CRITICAL)
        run = (child, args.child, args.count, args.idle, args.standbys, args.limit)
        anyio.run(*run, backend=args.loop)
        return
    backends, loops = args.backends.split(","), args.loops.split(",")
    given = {k: getattr(args, k) for k in backends if getattr(args, k)}
    hosts, stops = start_servers(backends, given)
    trees = args.ha_root or [""]
    labels = {
        tree: f"{chr(ord('A') + i)}:" if len(trees) > 1 else "" for i, tree in enumerate(trees)
    }
    try:
        print(f"{'':<24}{'':>7}{'settle':^17}{'':>9}{'idle':^27}")
        print(
            f"{'kind':<24}{'count':>7}{'s':>9}{'cpu s':>8}{'KiB/el':>9}{'cpu %':>9}"
            f"{'starts/el':>10}{'age: settle':>12}{'idle':>6}"
        )
        run = 0
        for count in (int(c) for c in args.counts.split(",")):
            for _ in range(args.rounds):
                for tree, backend, loop in itertools.product(trees, backends, loops):
                    run += 1
                    url = url_of(backend, hosts[backend], args.session_timeout, run)
                    line = one_run(url, count, loop, args, tree)
                    key = f"{labels[tree]}{backend} ({loop})"
                    print(row(key, count, line, args.session_timeout), flush=True)
        for tree, label in labels.items():
            if label:
                print(f"{label} ha from {tree}")
        standby = ", a standby each (second driver)" if args.standbys else ""
        print(
            f"session timeout {args.session_timeout:g} s, one leader per election{standby};"
            f" idle window {args.idle:g} s; load average {' '.join(map(str, os.getloadavg()))}"
        )
    finally:
        for stop in stops:
            stop()


if __name__ == "__main__":
    main()
