"""Leader failover on ZooKeeper, side by side: graceful handover and crash failover latency.

For each contender kind, three contender processes join one election on one ZooKeeper server
(session timeout 2 s). Rounds are interleaved across kinds (round 1 of every kind, then round
2, ...; the order of kinds rotates each round) so that machine noise hits all kinds alike. A
round of a kind is one graceful handover, then (in the second half of the round) one crash:

- graceful: the leader is asked to step down; latency = the next leader's ``LEADER`` time minus
  the old leader's ``RELEASING`` time;
- crash: the leader's process gets SIGKILL; ``kill -> leader`` = the next ``LEADER`` time minus
  the kill; ``seen -> leader`` = the next ``LEADER`` time minus the moment the dead session's
  node disappeared, which is what the client adds once the server has expired the session.

"Seen" is dated by an observer: the harness's own kazoo client on the same server, with an
exists watch on each ephemeral node of the election's queue (``peers_zookeeper/observer.py``).
Its notification stands in for the successor's: ZooKeeper sends the deletion to every watching
session from the same expiry, so the two arrive within a fraction of a millisecond, in either
order. The cost of the approximation: one more client on the server and on the loopback (one
more notification to send, its callback thread in this process), and a ``seen -> leader`` that
can be off by that fraction of a millisecond either way (slightly negative if the observer is
the later of the two). The queue's place is a per-kind setting (``KINDS``): the election path's
children for kazoo, aiozk and Curator; for ``ha``, ``PATH/n/`` (protocol 2's queue) if it holds
ephemeral nodes, else ``PATH/lock`` (protocol 1: only the leader has a node, and its deletion is
what the standbys wait for). Kinds with no known queue (tooz) get no "seen" figures.

After each round the old leader's process is replaced by a fresh one and the election settles
(every contender joined, one leads, its queue holds the expected nodes) before the next kind
runs, so a process starting (a JVM takes about a second of CPU) never overlaps a measurement.
Contenders use only their library's public API (``ha.connect``, ``ha.Elector``,
``elector.run``, ``elector.quit()`` for ``ha``) and speak the line protocol of
``peers_zookeeper/protocol.py``; a new kind is one entry in ``KINDS``. Times come from
CLOCK_MONOTONIC, shared by every process of the machine.

    .venv/bin/python benchmarks/zookeeper_failover.py [--rounds 50] [--kinds ha,kazoo,...]
    .venv/bin/python benchmarks/zookeeper_failover.py --quick          # a smoke run: 5 rounds
    .venv/bin/python benchmarks/zookeeper_failover.py --baseline /tmp/ha-head   # + that tree's ha

The kind ``floor`` (not run by default) is protocol 2's handover made of plain kazoo calls and
nothing else (``peers_zookeeper/floor_contender.py``): no loop, no elector, no fencing; where it
stands beside kazoo's recipe is the best any kazoo-based client of this protocol can do.

``--baseline DIR`` adds the kinds ``ha-base`` and ``ha-base-trio``: ``ha`` imported from DIR (for
example ``git archive HEAD | tar -x -C DIR``), measured in the same run as the working tree's.
Starts its own ZooKeeper (Debian's package, like the tests) unless ``--hosts`` is given.
Needs ``pip install -e '.[bench]'`` (aiozk) and Debian's ``libcurator-recipes-java``; kinds
that cannot run are listed with the reason. Prints one table; results are not kept.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers_zookeeper"
ROOT = HERE.parent
sys.path.insert(0, str(PEERS))

from contenders import Election  # noqa: E402
from observer import Observer, Queue  # noqa: E402
from rounds import Results, percentile, run_rounds  # noqa: E402

CURATOR_JARS = "/usr/share/java/curator-recipes.jar:/usr/share/java/slf4j-nop.jar"
HA_QUEUES = (Queue("n"), Queue("", per_contender=False))  # protocol 2, then protocol 1's lock


@dataclass
class Kind:
    name: str
    # given a build directory: the command that starts one contender, or why it cannot run here
    prepare: Callable[[Path], list[str] | str]
    queues: tuple[Queue, ...] = (Queue(""),)
    env: dict[str, str] = field(default_factory=dict)


def python_kind(
    script: str, module: str, *extra: str, env: dict[str, str] | None = None
) -> Callable[[Path], list[str] | str]:
    def prepare(_build: Path) -> list[str] | str:
        probe = subprocess.run(
            [sys.executable, "-c", f"import {module}"],
            capture_output=True,
            text=True,
            cwd=env.get("HA_ROOT", ROOT) if env else ROOT,
        )
        if probe.returncode:
            return f"cannot import {module}: {probe.stderr.strip().splitlines()[-1]}"
        return [sys.executable, str(PEERS / script), *extra]

    return prepare


def curator(build: Path) -> list[str] | str:
    if not shutil.which("javac"):
        return "javac not found (apt-get install openjdk-17-jdk-headless)"
    if not os.path.exists("/usr/share/java/curator-recipes.jar"):
        return "Curator jars not found (apt-get install libcurator-recipes-java)"
    done = subprocess.run(
        ["javac", "-cp", CURATOR_JARS, "-d", str(build), str(PEERS / "CuratorLatch.java")],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        return f"javac failed: {done.stderr.strip()[-300:]}"
    jvm = ["-Xshare:auto", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx64m"]
    return ["java", *jvm, "-cp", f"{build}:{CURATOR_JARS}", "CuratorLatch"]


def ha_kind(name: str, root: Path, *extra: str) -> Kind:
    env = {"HA_ROOT": str(root)}
    # the probe imports from HA_ROOT (its working directory), as the contender does
    module = "ha.drivers.zookeeper"
    prepare = python_kind("ha_contender.py", module, *extra, env=env)
    return Kind(name, prepare, HA_QUEUES, env)


def kinds_for(ha_root: Path, baseline: Path | None) -> dict[str, Kind]:
    kinds = {
        "ha": ha_kind("ha (asyncio)", ha_root),
        "ha-trio": ha_kind("ha (trio)", ha_root, "--backend", "trio"),
    }
    if baseline:
        kinds["ha-base"] = ha_kind("ha baseline (asyncio)", baseline)
        kinds["ha-base-trio"] = ha_kind("ha baseline (trio)", baseline, "--backend", "trio")
    kinds["kazoo"] = Kind("kazoo Election", python_kind("kazoo_election.py", "kazoo"))
    # protocol 2's requests and watches with nothing else: what any kazoo client of it can do
    floor = python_kind("floor_contender.py", "kazoo")
    kinds["floor"] = Kind("protocol 2 floor (kazoo)", floor, (Queue("n"),))
    kinds["aiozk"] = Kind("aiozk election", python_kind("aiozk_election.py", "aiozk"))
    kinds["curator"] = Kind("Curator LeaderLatch", curator)
    # tooz's leader lock lives under its own namespace layout: no "seen" figures for it
    kinds["tooz"] = Kind("tooz (kazoo driver)", python_kind("tooz_election.py", "tooz"), ())
    return kinds


DEFAULT_KINDS = ("ha", "ha-trio", "ha-base", "ha-base-trio", "kazoo", "aiozk", "curator")


# --- the run ----------------------------------------------------------------------------------


def many_elections(hosts: str, count: int, backend: str, env: dict[str, str]) -> str:
    """``ha``: one process holding ``count`` elections; settle time and memory."""
    done = subprocess.run(
        [sys.executable, str(PEERS / "ha_many.py"), "--hosts", hosts, "--count", str(count)]
        + ["--backend", backend],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PEERS,
        env={**os.environ, **env},
    )
    words = done.stdout.split()
    if done.returncode or len(words) < 6:
        return f"failed: {done.stderr.strip()[-300:]}"
    settled, rss, base = float(words[1]), float(words[3]), float(words[5])
    return f"settled in {settled:.2f} s, RSS {rss:.0f} MiB ({rss - base:+.0f} MiB for the electors)"


def start_server(directory: Path) -> tuple[str, Callable[[], None]]:
    sys.path.insert(0, str(ROOT))
    from tests.support.backends.zookeeper import ZooKeeperServer, missing_reason

    reason = missing_reason()
    if reason:
        raise SystemExit(f"cannot start ZooKeeper: {reason}")
    server = ZooKeeperServer(directory)
    server.start()
    server.wait_serving()
    return server.hosts, server.stop


# --- the table --------------------------------------------------------------------------------


def cells(values: list[float], reference: list[float], digits: int) -> str:
    if not values:
        return f"{'-':>8} {'-':>8} {'':>7}"
    p50, p90 = percentile(values, 0.5), percentile(values, 0.9)
    ratio = f"{p50 / percentile(reference, 0.5):.2f}x" if reference else "-"
    return f"{p50:8.{digits}f} {p90:8.{digits}f} {ratio:>7}"


def table(kinds: dict[str, Kind], results: dict[str, Results], skipped: dict[str, str]) -> None:
    kazoo = results.get("kazoo", Results())
    print(f"{'':<24}{'graceful handover':^26}{'crash: kill -> leader':^26}", end="")
    print(f"{'crash: seen -> leader':^26}")
    print(f"{'contender':<24}", end="")
    print(f"{'p50':>8} {'p90':>8} {'x kazoo':>7} " * 3)
    for key, result in results.items():
        row = f"{kinds[key].name:<24}{cells(result.graceful, kazoo.graceful, 2)} "
        row += f"{cells(result.crash, kazoo.crash, 0)} {cells(result.seen, kazoo.seen, 2)}"
        print(row)
        counts = (len(result.graceful), len(result.crash), len(result.seen))
        if result.failed or len(set(counts)) > 1:
            print(f"{'':<24}samples {counts[0]}/{counts[1]}/{counts[2]} {result.failed or ''}")
    watched = [f"{kinds[k].name}: {', '.join(sorted(r.watched))}" for k, r in results.items()]
    print("seen: dated by the observer on " + "; ".join(w for w in watched if not w.endswith(": ")))
    for key, why in skipped.items():
        print(f"{kinds[key].name:<24}not run: {why}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 5 rounds, --many 50")
    parser.add_argument("--kinds", help=f"comma-separated (default: {','.join(DEFAULT_KINDS)})")
    parser.add_argument("--hosts", help="an existing ZooKeeper (default: start one)")
    parser.add_argument("--session-timeout", type=float, default=2.0)
    parser.add_argument("--many", type=int, default=1000, help="elections in one ha process")
    parser.add_argument("--ha-root", type=Path, default=ROOT, help="the tree ha is imported from")
    parser.add_argument("--baseline", type=Path, help="also measure the ha in this tree")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.many = 5, min(args.many, 50)
    kinds = kinds_for(args.ha_root.resolve(), args.baseline.resolve() if args.baseline else None)
    chosen = [k.strip() for k in (args.kinds or ",".join(DEFAULT_KINDS)).split(",") if k.strip()]
    chosen = [k for k in chosen if k in kinds or args.kinds]
    unknown = set(chosen) - set(kinds)
    if unknown:
        raise SystemExit(f"unknown kinds {sorted(unknown)}; known: {', '.join(kinds)}")

    load_before = os.getloadavg()
    started = time.monotonic()
    results: dict[str, Results] = {}
    skipped: dict[str, str] = {}
    many: list[str] = []
    with tempfile.TemporaryDirectory(prefix="zk-failover-") as tmp:
        build = Path(tmp) / "classes"
        build.mkdir()
        stop: Callable[[], None] = lambda: None  # noqa: E731
        hosts = args.hosts
        if not hosts:
            hosts, stop = start_server(Path(tmp) / "zookeeper")
        elections: dict[str, Election] = {}
        observer = Observer(hosts, args.session_timeout)
        try:
            for key in chosen:
                kind = kinds[key]
                command = kind.prepare(build)
                if isinstance(command, str):
                    skipped[key] = command
                    print(f"{kind.name}: not run ({command})", file=sys.stderr)
                    continue
                log = Path(tmp) / f"{key}.log"
                election = Election(
                    command, hosts, args.session_timeout, log, observer, kind.queues, kind.env
                )
                elections[key] = election
                results[key] = Results()
                election.start()
            print(f"{len(elections)} kinds, {args.rounds} rounds...", file=sys.stderr)
            run_rounds(elections, args.rounds, results)
            for key, backend in (("ha", "asyncio"), ("ha-trio", "trio")):
                if key in elections and args.many:
                    print(f"ha ({backend}): {args.many} elections in one process", file=sys.stderr)
                    result = many_elections(hosts, args.many, backend, kinds[key].env)
                    many.append(f"ha ({backend}), {args.many} elections in one process: {result}")
        finally:
            for election in elections.values():
                election.close()
            observer.close()
            stop()

    minutes = (time.monotonic() - started) / 60
    print(
        f"\nZooKeeper failover, one server, 3 contender processes per kind, session timeout"
        f" {args.session_timeout:g} s, {args.rounds} interleaved rounds, ms (x kazoo: p50 ratio)"
    )
    table(kinds, results, skipped)
    for line in many:
        print(line)
    roots = {kinds[k].env["HA_ROOT"]: kinds[k].name for k in ("ha", "ha-base") if k in results}
    print("; ".join(f"{name.split(' (')[0]} imported from {root}" for root, name in roots.items()))
    load_after = os.getloadavg()
    print(
        f"{os.cpu_count()} CPUs; load average (1/5/15 min) {'/'.join(f'{x:.2f}' for x in load_before)}"
        f" before, {'/'.join(f'{x:.2f}' for x in load_after)} after; {minutes:.1f} min"
    )


if __name__ == "__main__":
    main()
