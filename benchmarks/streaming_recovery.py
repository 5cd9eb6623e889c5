"""Streaming job recovery: SIGKILL of the driver -> its next micro-batch committed, with ``ha``'s
hot standby and with what a user does today, a supervised restart of a plain PySpark driver.
Issue 15's targets: hot standby recovery <= session timeout + 1 s, and >= 10x faster than the
restart.

    .venv/bin/python benchmarks/streaming_recovery.py [--rounds 10] [--session-timeout 2]
    .venv/bin/python benchmarks/streaming_recovery.py --quick          # a smoke run: 2 rounds

Both contenders run the same stream side by side on local[2], each from its own directory of
JSON-lines event files (one file per micro-batch, a trigger every second). During a
contender's round a feeder keeps its directory ``BACKLOG`` files ahead of what the stream has
read, so a restarted query always finds work; between its rounds its stream idles:

- ``ha``: two job manager processes on the embedded sqlite backend (``LocalJobCluster``), one
  active, one hot standby (SparkSession built, a tiny stream already run and the job rehearsed
  in private once it has input: ``--warm-streams``, ``ha.pipeline.jobmanager.rehearsal``; a round
  waits until the standby has rehearsed, as it is ready then, before the micro-batch after
  which it kills the active),
  run ``bench.events.count_every`` (``peers_streaming/ha_stream.py``). Recovery = the standby's
  ``batch_committed`` event (after the fenced commit record and the rename into view) minus
  the kill. After each round a fresh standby is started and waited for until warm. On sqlite
  the kernel frees a killed process's session lock file, so the standby is elected within a
  poll, well before the session timeout (a frozen driver is found only when its lease runs
  out: ``pipeline_recovery.py --fault stop`` measures that for batch jobs).
- ``restart``: ``peers_streaming/plain_stream.py``, the same query without ``ha`` (the same
  ``checkpointLocation`` every time, ``foreachBatch`` writing Parquet), under a supervisor loop
  here that starts it again as soon as it exits (systemd's ``Restart=always`` with
  ``RestartSec=0``; ``spark-submit --supervise`` is no faster). Recovery = the new incarnation's
  first ``batch_written`` minus the kill.

Rounds are interleaved (ha then restart, the order swapped every other round). Each waits for
a micro-batch of the contender's current driver, SIGKILLs that Python driver, waits for the
next micro-batch and checks that the killed driver's Spark JVM exited too. Times are
``time.time()`` taken in each process: one wall clock across the processes of this host.
Beside p50/p90/max and the ratios, the output splits a recovery into steps, by the drivers'
events: ha's ``active``, ``job_started``, ``batch_started``, ``batch_committed``; the plain
driver's SparkSession built, query started, batch written.
At the end the ``ha`` job catches up with its files and is cancelled, and its output must
equal, by digest, an uninterrupted run of ``events.count`` on the same files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers_streaming"
sys.path.insert(0, str(PEERS))

import ha_stream  # noqa: E402  (registers bench.events.count_every)

from ha.drivers import connect  # noqa: E402
from ha.pipeline.api.plan import make_plan  # noqa: E402
from ha.pipeline.client import cancel_job, submit_job  # noqa: E402
from ha.pipeline.commit import committed_batches, output_digest  # noqa: E402
from ha.pipeline.examples.events import generate_events  # noqa: E402
from ha.pipeline.local import Event, LocalJobCluster  # noqa: E402
from ha.pipeline.spark import prepare_environment  # noqa: E402
from tests.support.processes import java_under, running  # noqa: E402

BACKLOG = 2  # unread files kept in each input directory
ROWS, USERS = 500, 50  # per file
JVM_GRACE = 15.0  # seconds a killed driver's JVM may take to exit
JOB = "live"
# The events that mark a recovery's steps, the last one its micro-batch out.
HA_STEPS = ("active", "job_started", "batch_started", "batch_committed")
PLAIN_STEPS = ("session", "started", "batch_written")  # SparkSession built, query started


@dataclass
class Results:
    steps: tuple[str, ...]  # what a recovery goes through; the last: the micro-batch is out
    rounds: list[list[float]] = field(default_factory=list)  # kill -> each step, per round
    jvms_left: int = 0  # rounds whose killed driver's JVM outlived JVM_GRACE (or was not found)

    @property
    def recoveries(self) -> list[float]:
        return [marks[-1] for marks in self.rounds]


async def jvm_fate(pids: list[int], results: Results) -> str:
    """Whether the killed driver's JVMs ``pids`` exit within ``JVM_GRACE`` seconds."""
    if not pids:
        results.jvms_left += 1
        return "not found"
    with anyio.move_on_after(JVM_GRACE):
        while running(pids):
            await anyio.sleep(0.1)
        return "exited"
    results.jvms_left += 1
    return "LEFT RUNNING"


class Feeder:
    """Keeps each armed input directory ``BACKLOG`` event files ahead of what its stream has
    read. A directory is armed during its contender's rounds only: between them its stream
    idles, which keeps the job short and its load off the other contender's rounds."""

    def __init__(self) -> None:
        self.inputs: dict[Path, Callable[[], int]] = {}  # directory -> micro-batches done
        self.fed: dict[Path, int] = {}
        self.armed: set[Path] = set()

    def add(self, directory: Path, done: Callable[[], int]) -> None:
        self.inputs[directory] = done
        self.fed[directory] = 0

    async def run(self) -> None:
        while True:
            for directory in self.armed:
                done = self.inputs[directory]
                while self.fed[directory] - done() < BACKLOG:
                    # file N has the same rows, and mtime, in every directory
                    generate_events(
                        directory, files=1, rows=ROWS, users=USERS, first=self.fed[directory]
                    )
                    self.fed[directory] += 1
            await anyio.sleep(0.1)


class Supervised:
    """A command started again as soon as it exits, with its JSON-line events on stdout."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.argv, self.log = argv, log
        self.incarnation = 0
        self.process: anyio.abc.Process | None = None
        self.events: list[tuple[int, dict[str, Any]]] = []  # (incarnation, event)
        self._changed = anyio.Event()

    async def run(self) -> None:
        while True:
            self.incarnation += 1
            with self.log.open("ab") as log:
                process = await anyio.open_process(self.argv, stdout=subprocess.PIPE, stderr=log)
            self.process = process
            try:
                await self._follow(process, self.incarnation)  # until the driver dies
            except BaseException:  # the benchmark is over: stop for good
                with anyio.CancelScope(shield=True):
                    if process.returncode is None:
                        process.kill()
                    await process.aclose()
                raise
            await process.aclose()  # reaps it; the loop starts the next one at once

    async def _follow(self, process: anyio.abc.Process, incarnation: int) -> None:
        assert process.stdout is not None
        stream = BufferedByteReceiveStream(process.stdout)
        try:
            while True:
                line = await stream.receive_until(b"\n", 1 << 20)
                self.events.append((incarnation, json.loads(line)))
                self._changed.set()
                self._changed = anyio.Event()
        except (anyio.EndOfStream, anyio.IncompleteRead):
            return

    def kill(self) -> float:
        assert self.process is not None
        killed_at = time.time()
        self.process.send_signal(signal.SIGKILL)
        return killed_at

    def first_after(self, name: str, after: float) -> dict[str, Any]:
        return next(e for _, e in self.events if e["event"] == name and e["t"] > after)

    def batches_done(self) -> int:
        return 1 + max((e["batch"] for _, e in self.events if "batch" in e), default=-1)

    async def wait_batch(self, after: float, incarnation: int = 0) -> dict[str, Any]:
        """The first batch written after ``after`` by incarnation ``incarnation`` or a later one."""
        while True:
            for n, e in self.events:
                if e["event"] == "batch_written" and e["t"] > after and n >= incarnation:
                    return e
            await self._changed.wait()


async def ha_round(cluster: LocalJobCluster, results: Results) -> str:
    victim = cluster.active()
    assert victim is not None
    await wait_rehearsed(cluster)  # on the round's input; then killed right after a commit
    since = time.time()

    def mine(e: Event) -> bool:
        return e.identity == victim and e.fields.get("job") == JOB and e.t > since

    with anyio.fail_after(120):
        await cluster.wait_event("batch_committed", mine)
    jvms = java_under(cluster.workers[victim].process.pid)
    killed_at = cluster.kill(victim)

    def next_one(e: Event) -> bool:
        return e.identity != victim and e.fields.get("job") == JOB and e.t > killed_at

    with anyio.fail_after(120):
        event = await cluster.wait_event("batch_committed", next_one)
    heir = event.identity

    def step(name: str) -> float:
        [first, *_] = cluster.find(
            name,
            lambda e: e.identity == heir and e.t > killed_at and e.fields.get("job", JOB) == JOB,
        )
        return first.t - killed_at

    results.rounds.append([*map(step, HA_STEPS[:-1]), event.t - killed_at])
    fate = await jvm_fate(jvms, results)
    return (
        f"ha: {victim} killed, {event.identity} committed batch {event.fields['batch']} after "
        f"{results.recoveries[-1]:.3f} s; killed JVM {fate}"
    )


async def restart_round(peer: Supervised, results: Results) -> str:
    since = time.time()
    with anyio.fail_after(120):
        await peer.wait_batch(since, peer.incarnation)
    assert peer.process is not None
    jvms = java_under(peer.process.pid)
    old = peer.incarnation
    killed_at = peer.kill()
    with anyio.fail_after(180):
        event = await peer.wait_batch(killed_at, old + 1)
    marks = [peer.first_after(name, killed_at)["t"] - killed_at for name in PLAIN_STEPS[:-1]]
    results.rounds.append([*marks, event["t"] - killed_at])
    fate = await jvm_fate(jvms, results)
    return (
        f"restart: driver killed, restarted driver wrote batch {int(event['batch'])} after "
        f"{results.recoveries[-1]:.3f} s; killed JVM {fate}"
    )


async def wait_rehearsed(cluster: LocalJobCluster) -> None:
    """Until every standby has rehearsed the job (``stream_rehearsal``): a standby is ready
    once its first micro-batch of the job would find the query's code compiled."""

    def rehearsed(identity: str) -> bool:
        return bool(cluster.find("stream_rehearsed", lambda e: e.identity == identity))

    with anyio.fail_after(120):
        while not all(rehearsed(w.identity) for w in cluster.workers.values()
                      if w.state == "standby"):  # fmt: skip
            await anyio.sleep(0.1)


async def submit(
    cluster: LocalJobCluster, pipeline: str, input_dir: Path, out: Path, job: str
) -> None:
    # Every kill ends a driver mid-job: the job must not run out of attempts because of them.
    plan = make_plan(pipeline, {"input": str(input_dir)}, str(out), job_id=job, max_attempts=1000)
    async with connect(cluster.url) as driver:
        await submit_job(driver, cluster.cluster_id, plan)


async def run(rounds: int, session_timeout: float, workdir: Path) -> dict[str, Results]:
    prepare_environment()  # JAVA_HOME etc., inherited by every Spark driver started below
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(PEERS), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    ha_in, plain_in = workdir / "ha-in", workdir / "plain-in"
    ha_in.mkdir()
    plain_in.mkdir()
    out = workdir / "ha-out"
    results = {"ha": Results(HA_STEPS), "restart": Results(PLAIN_STEPS)}
    peer = Supervised(
        [
            sys.executable, str(PEERS / "plain_stream.py"), str(plain_in),
            str(workdir / "plain-out"), str(workdir / "plain-checkpoint"),
            f"--interval={ha_stream.INTERVAL}",
        ],
        workdir / "plain.log",
    )  # fmt: skip
    cluster = LocalJobCluster(
        workdir / "ha",
        session_timeout=session_timeout,
        imports=["ha_stream"],
        extra_args=["--warm-streams"],
    )
    serial = 0

    async def start_standby() -> None:
        nonlocal serial
        serial += 1
        await cluster.start(f"jm-{serial}")

    def ha_done() -> int:
        found = cluster.find("batch_committed", lambda e: e.fields.get("job") == JOB)
        return 1 + max((int(e.fields["batch"]) for e in found), default=-1)

    feeder = Feeder()
    feeder.add(ha_in, ha_done)
    feeder.add(plain_in, peer.batches_done)
    async with cluster, anyio.create_task_group() as tg:
        tg.start_soon(feeder.run)
        tg.start_soon(peer.run)
        await start_standby()
        await start_standby()
        with anyio.fail_after(400):  # three JVMs starting on two cores
            await cluster.wait_ready(2, warm=True)
        await submit(cluster, ha_stream.NAME, ha_in, out, JOB)
        for n in range(rounds):
            order = ("ha", "restart") if n % 2 == 0 else ("restart", "ha")
            for kind in order:
                source = ha_in if kind == "ha" else plain_in
                feeder.armed.add(source)
                if kind == "ha":
                    line = await ha_round(cluster, results["ha"])
                else:
                    line = await restart_round(peer, results["restart"])
                feeder.armed.discard(source)
                print(f"  round {n + 1}/{rounds} {line}", flush=True)
                if kind == "ha":  # a fresh hot standby in place of the killed job manager
                    await start_standby()
                    with anyio.fail_after(300):
                        await cluster.wait_ready(2, warm=True)

        fed = feeder.fed[ha_in]
        with anyio.fail_after(120):
            while ha_done() < fed:
                await anyio.sleep(0.2)
        async with connect(cluster.url) as driver:
            await cancel_job(driver, cluster.cluster_id, JOB)
        with anyio.fail_after(120):
            assert (await cluster.wait_job(JOB)).state == "cancelled"
        ref = workdir / "ha-reference"
        await submit(cluster, "events.count", ha_in, ref, "reference")
        with anyio.fail_after(300):
            status = await cluster.wait_job("reference")
        assert status.state == "succeeded", status
        tg.cancel_scope.cancel()
    same = committed_batches(out) == list(range(fed)) and output_digest(out) == output_digest(ref)
    print(f"  ha: {fed} micro-batches, output identical to an uninterrupted run: {same}")
    written = sorted(int(p.name.split("-")[1]) for p in (workdir / "plain-out").glob("batch-*"))
    print(
        f"  restart: batches 0..{written[-1]} written, none missing: {written == list(range(len(written)))}"
    )
    if not same:
        raise SystemExit("the ha job's output differs from an uninterrupted run's")
    return results


def p90(values: list[float]) -> float:
    return (
        statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) > 1 else values[0]
    )


NAMES = {"ha": "ha hot standby", "restart": "supervised restart"}


def report(results: dict[str, Results], rounds: int, session_timeout: float) -> None:
    stats = {
        kind: (statistics.median(r.recoveries), p90(r.recoveries), max(r.recoveries))
        for kind, r in results.items()
    }
    print(f"\nrecovery: SIGKILL of the driver -> next micro-batch committed, {rounds} rounds each")
    print(f"{'contender':20} {'p50 s':>8} {'p90 s':>8} {'max s':>8}")
    for kind, (p50, p90_, top) in stats.items():
        print(f"{NAMES[kind]:20} {p50:8.3f} {p90_:8.3f} {top:8.3f}")
    ratios = [r / h for r, h in zip(stats["restart"], stats["ha"], strict=True)]
    print(f"{'ratio restart/ha':20} {ratios[0]:7.1f}x {ratios[1]:7.1f}x {ratios[2]:7.1f}x")
    print("\nwhere the time goes: each step's own time, p50 s (from the step before; the kill)")
    for kind, r in results.items():
        spans = [
            [b - a for a, b in zip([0.0, *marks[:-1]], marks, strict=True)] for marks in r.rounds
        ]
        steps = [
            f"{name} {statistics.median(s[i] for s in spans):.3f}" for i, name in enumerate(r.steps)
        ]
        print(f"{NAMES[kind]:20} " + ", ".join(steps))
    ha = results["ha"].recoveries
    target = session_timeout + 1
    print(
        f"\ntarget: ha <= session timeout + 1 s = {target:g} s: "
        f"{'met' if max(ha) <= target else 'not met'} at max, "
        f"{'met' if statistics.median(ha) <= target else 'not met'} at p50"
    )
    verdict = "met" if ratios[0] >= 10 else "not met"
    print(f"target: restart/ha >= 10x: {verdict} at p50 ({ratios[0]:.1f}x)")
    for kind, r in results.items():
        print(
            f"{NAMES[kind]}: the killed driver's JVM still ran {JVM_GRACE:g} s after the kill "
            f"(or was not found) in {r.jvms_left} of {len(r.recoveries)} rounds"
        )
    print(f"load average (1, 5, 15 min) at the end: {os.getloadavg()}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--session-timeout", type=float, default=2.0)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 rounds")
    args = parser.parse_args()
    rounds = 2 if args.quick else args.rounds
    if rounds < 1:
        parser.error(f"--rounds must be at least 1, got {rounds}")
    workdir = Path(tempfile.mkdtemp(prefix="ha-streaming-recovery-"))
    print(f"load average (1, 5, 15 min) at the start: {os.getloadavg()}", flush=True)
    try:
        results = await run(rounds, args.session_timeout, workdir)
    except BaseException:
        print(f"failed: its processes' logs are kept in {workdir}", file=sys.stderr)
        raise
    shutil.rmtree(workdir, ignore_errors=True)
    report(results, rounds, args.session_timeout)
    sys.stdout.flush()


if __name__ == "__main__":
    anyio.run(main)
