"""Leader failover on ZooKeeper, side by side: graceful handover and crash failover latency.

For each contender kind, three contender processes join one election on one ZooKeeper server
(session timeout 2 s). Each round:

- graceful: the leader is asked to step down; latency = the next leader's ``LEADER`` time minus
  the old leader's ``RELEASING`` time;
- crash: the leader's process gets SIGKILL; latency = the next ``LEADER`` time minus the kill.

The old leader's process is then replaced by a fresh one, so three contenders are always in
the election. Contenders speak the line protocol of ``peers_zookeeper/protocol.py``; a new kind
is one entry in ``KINDS``. Times come from CLOCK_MONOTONIC, shared by every process.

    .venv/bin/python benchmarks/zookeeper_failover.py [--rounds 30] [--kinds kazoo,curator,tooz]

Starts its own ZooKeeper (Debian's package, like the tests) unless ``--hosts`` is given.
Prints one table; results are not kept.
"""

from __future__ import annotations

import argparse
import itertools
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers_zookeeper"
ROOT = HERE.parent
CURATOR_CP = "/usr/share/java/curator-recipes.jar:/usr/share/java/slf4j-nop.jar"


@dataclass
class Kind:
    name: str
    # given a build directory: the command that starts one contender, or why it cannot run here
    prepare: Callable[[Path], list[str] | str]


def python_kind(script: str, module: str, *extra: str) -> Callable[[Path], list[str] | str]:
    def prepare(_build: Path) -> list[str] | str:
        probe = subprocess.run(
            [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, cwd=ROOT
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
        ["javac", "-cp", CURATOR_CP, "-d", str(build), str(PEERS / "CuratorLatch.java")],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        return f"javac failed: {done.stderr.strip()[-300:]}"
    jvm = ["-Xshare:auto", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx64m"]
    return ["java", *jvm, "-cp", f"{build}:{CURATOR_CP}", "CuratorLatch"]


KINDS = {
    "ha": Kind("ha (asyncio)", python_kind("ha_contender.py", "ha.drivers.zookeeper")),
    "ha-trio": Kind(
        "ha (trio)", python_kind("ha_contender.py", "ha.drivers.zookeeper", "--backend", "trio")
    ),
    "kazoo": Kind("kazoo Election", python_kind("kazoo_election.py", "kazoo")),
    "curator": Kind("Curator LeaderLatch", curator),
    "tooz": Kind("tooz (kazoo driver)", python_kind("tooz_election.py", "tooz")),
}


# --- contender processes ----------------------------------------------------------------------


@dataclass
class Contender:
    name: str
    process: subprocess.Popen[str]
    joined: bool = False


@dataclass
class Election:
    """Three (or ``size``) contender processes of one kind on one election path."""

    command: list[str]
    hosts: str
    session_timeout: float
    log: Path
    size: int = 3
    path: str = field(default_factory=lambda: f"/bench/{uuid.uuid4().hex[:10]}")
    contenders: dict[str, Contender] = field(default_factory=dict)
    lines: queue.Queue[tuple[str, str, int]] = field(default_factory=queue.Queue)
    names: itertools.count[int] = field(default_factory=itertools.count)
    leader: str | None = None

    def spawn(self) -> None:
        name = f"c{next(self.names)}"
        process = subprocess.Popen(
            [
                *self.command,
                "--hosts",
                self.hosts,
                "--path",
                self.path,
                "--id",
                name,
                "--session-timeout",
                str(self.session_timeout),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log.open("a"),
            text=True,
            cwd=PEERS,
        )
        self.contenders[name] = Contender(name, process)
        threading.Thread(target=self._read, args=(name, process), daemon=True).start()

    def _read(self, name: str, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            word, _, stamp = line.strip().partition(" ")
            if stamp.isdigit():
                self.lines.put((name, word, int(stamp)))
        self.lines.put((name, "EXITED", time.monotonic_ns()))

    def next_line(self, timeout: float = 60.0) -> tuple[str, str, int]:
        try:
            name, word, stamp = self.lines.get(timeout=timeout)
        except queue.Empty:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-15:])
            raise RuntimeError(
                f"no contender said anything for {timeout} s; stderr:\n{tail}"
            ) from None
        if word == "JOINED" and name in self.contenders:
            self.contenders[name].joined = True
        elif word == "LEADER":
            self.leader = name
        return name, word, stamp

    def wait_settled(self) -> None:
        """Until every contender has joined and one leads."""
        while not (
            self.leader in self.contenders and all(c.joined for c in self.contenders.values())
        ):
            self.next_line()
        time.sleep(0.2)  # let the newest contender's election node reach the server

    def replace(self, name: str) -> None:
        contender = self.contenders.pop(name)
        contender.process.wait(timeout=30)
        if self.leader == name:
            self.leader = None
        self.spawn()

    def graceful_round(self) -> float:
        self.wait_settled()
        old = self.leader
        assert old is not None
        process = self.contenders[old].process
        assert process.stdin is not None
        process.stdin.write("release\n")
        process.stdin.flush()
        released = elected = None
        while released is None or elected is None:
            name, word, stamp = self.next_line()
            if word == "RELEASING" and name == old:
                released = stamp
            elif word == "LEADER" and name != old:
                elected = stamp
        self.replace(old)
        return (elected - released) / 1e6

    def crash_round(self) -> float:
        self.wait_settled()
        old = self.leader
        assert old is not None
        killed = time.monotonic_ns()
        os.kill(self.contenders[old].process.pid, signal.SIGKILL)
        while True:
            name, word, stamp = self.next_line()
            if word == "LEADER" and name != old:
                break
        self.replace(old)
        return (stamp - killed) / 1e6

    def close(self) -> None:
        for contender in self.contenders.values():
            if contender.process.poll() is None:
                contender.process.kill()
            contender.process.wait(timeout=30)


# --- the run ----------------------------------------------------------------------------------


def percentiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return statistics.median(ordered), p90, ordered[-1]


def run_kind(
    command: list[str], hosts: str, rounds: int, session_timeout: float, log: Path
) -> dict[str, list[float]]:
    election = Election(command, hosts, session_timeout, log)
    try:
        for _ in range(election.size):
            election.spawn()
        graceful = [election.graceful_round() for _ in range(rounds)]
        crash = [election.crash_round() for _ in range(rounds)]
        return {"graceful": graceful, "crash": crash}
    finally:
        election.close()


def many_elections(hosts: str, count: int, backend: str) -> str:
    """``ha``: one process holding ``count`` elections; settle time and memory."""
    done = subprocess.run(
        [
            sys.executable,
            str(PEERS / "ha_many.py"),
            "--hosts",
            hosts,
            "--count",
            str(count),
            "--backend",
            backend,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PEERS,
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--hosts", help="an existing ZooKeeper (default: start one)")
    parser.add_argument("--session-timeout", type=float, default=2.0)
    parser.add_argument("--many", type=int, default=1000, help="elections in one ha process")
    args = parser.parse_args()
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise SystemExit(f"unknown kinds {sorted(unknown)}; known: {', '.join(KINDS)}")

    with tempfile.TemporaryDirectory(prefix="zk-failover-") as tmp:
        build = Path(tmp) / "classes"
        build.mkdir()
        stop: Callable[[], None] = lambda: None  # noqa: E731
        hosts = args.hosts
        if not hosts:
            hosts, stop = start_server(Path(tmp) / "zookeeper")
        rows: list[tuple[str, str]] = []
        many: list[str] = []
        try:
            for key in kinds:
                kind = KINDS[key]
                command = kind.prepare(build)
                if isinstance(command, str):
                    rows.append((kind.name, f"skipped: {command}"))
                    print(f"{kind.name}: skipped ({command})", file=sys.stderr)
                    continue
                print(
                    f"{kind.name}: {args.rounds} graceful + {args.rounds} crash rounds...",
                    file=sys.stderr,
                )
                log = Path(tmp) / f"{key}.log"
                results = run_kind(command, hosts, args.rounds, args.session_timeout, log)
                g, c = percentiles(results["graceful"]), percentiles(results["crash"])
                rows.append(
                    (
                        kind.name,
                        f"{g[0]:12.1f} {g[1]:9.1f} {g[2]:9.1f}   {c[0]:9.0f} {c[1]:9.0f} {c[2]:9.0f}",
                    )
                )
            for key, backend in (("ha", "asyncio"), ("ha-trio", "trio")):
                if key in kinds and args.many:
                    print(
                        f"ha ({backend}): {args.many} elections in one process...", file=sys.stderr
                    )
                    result = many_elections(hosts, args.many, backend)
                    many.append(f"ha ({backend}), {args.many} elections in one process: {result}")
        finally:
            stop()

    print(
        f"\nZooKeeper failover, 3 contender processes, session timeout {args.session_timeout:g} s,"
        f" {args.rounds} rounds each (ms)"
    )
    print(
        f"{'contender':<22} {'graceful p50':>12} {'p90':>9} {'max':>9}   {'crash p50':>9} {'p90':>9} {'max':>9}"
    )
    for name, cells in rows:
        print(f"{name:<22} {cells}")
    for line in many:
        print(line)


if __name__ == "__main__":
    main()
