"""Spark under random faults: a streaming job on a Spark standalone cluster through SIGKILL and
SIGSTOP of the Python driver and, separately, of its Spark JVM, at seeded random moments.

One soak: a standalone cluster (a master and two workers of one core each,
``tests/support/spark_cluster.py``), job manager processes (``ha.pipeline.jobmanager.worker``, warm
standbys) on sqlite or ZooKeeper, two of them at all times: one that dies is replaced by a
new one. First an uninterrupted run of the stream gives the reference digest. Then each round
submits the same stream again (``FILES`` micro-batches, each sleeping ``DELAY`` seconds before
Spark writes it) and applies its faults one after the other, each at a random moment after a
micro-batch of the job started: the stream's driver (or, by a quarter of the draws, a standby)
SIGKILLed, or SIGSTOPped for ``LENGTHS`` session timeouts then SIGCONTed; its JVM the same.

The verdict comes from outside the job managers (``judge``): the job succeeded; its output's
digest equals the reference's; the batches in view are exactly those of the fenced commit log
in the backend, each with the bytes its record names, the records' epochs in batch order; no
driver reported a commit that the log does not hold or has overwritten with an older epoch
(a deposed write); a refused batch was not recorded with the refused epoch; no SIGKILLed
driver's JVM outlived it; and a job manager that left by itself (its JVM gone) exited with
``EXIT_SPARK_LOST`` (69, EX_UNAVAILABLE: in order, and restarted by a supervisor).

Replay: ``python -m tests.chaos.spark --seed S --rounds 1``; the long run: ``--rounds 50``.
A round's seed fixes its schedule (kinds, moments, targets' draws, lengths); which process a
draw hits depends on who runs the stream then, so a replay repeats the schedule, not every
interleaving. Run it under ``nice -n 10``: it starts seven JVMs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.to_thread

from ha.drivers import connect
from ha.pipeline.api.plan import make_plan
from ha.pipeline.client import submit_job
from ha.pipeline.commit import batch_dir, committed_batches, output_digest
from ha.pipeline.commit.stream_commit import CommitRecord, staged_digest
from ha.pipeline.examples.events import generate_events
from ha.pipeline.jobmanager.worker import EXIT_SPARK_LOST
from ha.pipeline.local import Event, LocalJobCluster
from tests.support.processes import java_under, running
from tests.support.spark_cluster import SparkCluster
from tests.support.spark_cluster import missing_reason as spark_missing
from tests.support.stream_jobs import of_job, read_records
from tests.support.witness import Violation

__all__ = (
    "KINDS",
    "Outcome",
    "SparkFault",
    "SparkSoak",
    "judge",
    "schedule",
    "soak",
    "table",
)

KINDS = ("driver_kill", "driver_stop", "jvm_kill", "jvm_stop")
LENGTHS = (0.3, 1.5, 3.0)  # a stop's length in session timeouts: within the lease, or past it
MOMENT = 3.0  # a fault lands up to this many seconds after a micro-batch started
STANDBY_SHARE = 0.25  # of the draws that hit a standby instead of the stream's driver
SESSION_TIMEOUT = 2.0
FILES = 12  # micro-batches per round (one input file each)
DELAY = 0.8  # seconds each micro-batch sleeps before Spark writes it
CONTENDERS = 2  # job manager processes at all times (the cluster's two cores)
DEAD = ("killed", "exited", "starting")  # states of a job manager no fault is aimed at
ROUND_TIMEOUT = 600.0  # a round's stream must succeed within this, faults and restarts included


@dataclass(frozen=True)
class SparkFault:
    after: float  # seconds after the micro-batch start that arms it
    kind: str
    pick: float  # < STANDBY_SHARE: a standby (if any); else the stream's driver
    length: float  # in session timeouts (stops)

    def __str__(self) -> str:
        return f"{self.kind} +{self.after:.2f}s pick={self.pick:.2f} length={self.length}"


def schedule(seed: int, faults: int) -> list[SparkFault]:
    """A round's faults: every kind once (a seeded order) within the first four, then drawn."""
    rng = random.Random(f"spark-{seed}")
    first = rng.sample(KINDS, len(KINDS))
    faults_ = []
    for i in range(faults):  # one after the other: a shorter schedule is a prefix of a longer
        kind = first[i] if i < len(first) else rng.choice(KINDS)
        after, pick = round(rng.uniform(0, MOMENT), 3), round(rng.random(), 3)
        faults_.append(SparkFault(after, kind, pick, rng.choice(LENGTHS)))
    return faults_


@dataclass
class Outcome:
    seed: int
    schedule: list[SparkFault]
    applied: Counter[str] = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
    equal: bool = False  # the output's digest equals the reference's
    on_standby: int = 0  # faults applied to a standby rather than the stream's driver
    seconds: float = 0.0
    log: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def note(self, what: str) -> None:
        self.log.append(f"{time.monotonic() - self.started:7.2f} {what}")

    def replay(self) -> str:
        return f"python -m tests.chaos.spark --seed {self.seed} --rounds 1"

    def report(self) -> str:
        lines = [f"spark round, seed {self.seed}: {len(self.violations)} violation(s)"]
        lines += ["schedule:", *(f"  {f}" for f in self.schedule)]
        lines += [f"  {v}" for v in self.violations]
        lines += ["what the soak did:", *(f"  {x}" for x in self.log)]
        lines.append(f"replay: {self.replay()}")
        return "\n".join(lines)


def judge(
    *,
    state: str,
    digest: str,
    reference: str,
    records: list[CommitRecord],
    shown: dict[int, str],
    events: list[Event],
    files: int,
    survivors: list[int],
    exits: dict[str, int | None],
) -> list[Violation]:
    """The round's verdict. ``shown``: each batch directory in view and its digest;
    ``events``: the job's ``batch_committed`` and ``batch_rejected``; ``survivors``: JVMs of
    SIGKILLed drivers still running; ``exits``: the status of each job manager that left by
    itself (its JVM gone)."""
    found: list[Violation] = []
    if state != "succeeded":
        found.append(Violation("stream", f"the job ended {state}, not succeeded"))
    if digest != reference:
        found.append(Violation("digest", f"output {digest[:12]} != reference {reference[:12]}"))
    by_batch = {r.batch_id: r for r in records}
    if sorted(shown) != sorted(by_batch) or sorted(shown) != list(range(files)):
        found.append(
            Violation("log", f"batches in view {sorted(shown)}, recorded {sorted(by_batch)}")
        )
    for batch, sha in sorted(shown.items()):
        if batch in by_batch and by_batch[batch].sha256 != sha:
            found.append(Violation("log", f"batch {batch} in view is not what its record names"))
    epochs = [by_batch[b].epoch for b in sorted(by_batch)]
    if epochs != sorted(epochs):
        found.append(Violation("log", f"record epochs out of batch order: {epochs}"))
    committed = {
        (e.fields["batch"], e.fields["epoch"]) for e in events if e.name == "batch_committed"
    }
    for batch, epoch in sorted(committed):
        record = by_batch.get(batch)
        if record is None or record.epoch < epoch:
            kept = None if record is None else record.epoch
            found.append(
                Violation("deposed", f"batch {batch} committed at epoch {epoch}, the log: {kept}")
            )
    for e in events:
        if e.name == "batch_rejected":
            batch, epoch = e.fields["batch"], e.fields["epoch"]
            record = by_batch.get(batch)
            if record is not None and record.epoch == epoch and (batch, epoch) not in committed:
                found.append(
                    Violation("deposed", f"batch {batch} refused at epoch {epoch} yet recorded")
                )
    if survivors:
        found.append(Violation("jvm", f"JVMs of SIGKILLed drivers still run: {survivors}"))
    for who, code in sorted(exits.items()):
        if code != EXIT_SPARK_LOST:  # left in good order, its Spark gone: restart me
            found.append(Violation("exit", f"{who} left with status {code}, not {EXIT_SPARK_LOST}"))
    return found


class SparkSoak:
    """The cluster, the job managers and the reference digest, across rounds."""

    def __init__(self, jobs: LocalJobCluster, events: Path, workdir: Path, files: int) -> None:
        self.jobs = jobs
        self.events = events
        self.workdir = workdir
        self.files = files
        self.reference = ""
        self._names = 0
        self._left: set[str] = set()  # job managers whose exit a round judged, or SIGKILLed

    async def keep_contenders(self) -> None:
        """Forever: a new job manager for each one that died (killed, or left without Spark)."""
        while True:
            live = [
                w
                for w in self.jobs.workers.values()
                if w.state not in ("killed", "exited") and w.process.returncode is None
            ]
            for _ in range(CONTENDERS - len(live)):
                self._names += 1
                await self.jobs.start(f"jm-{self._names}")
            await anyio.sleep(0.2)

    async def ready(self) -> None:
        with anyio.fail_after(900):  # JVM start-ups: minutes on a loaded machine
            await self.jobs.wait_ready(CONTENDERS)

    async def run_reference(self) -> None:
        await self.ready()
        out = self.workdir / "reference"
        await self.jobs.submit("events.count", {"input": str(self.events)}, str(out), job_id="ref")
        with anyio.fail_after(300):
            status = await self.jobs.wait_job("ref")
        if status.state != "succeeded":
            raise RuntimeError(f"the uninterrupted run ended {status.state}: {status}")
        self.reference = output_digest(out)

    async def round(self, seed: int, faults: int) -> Outcome:
        outcome = Outcome(seed, schedule(seed, faults))
        await self.ready()
        job, out = f"soak-{seed}", self.workdir / f"out-{seed}"
        params = {"input": str(self.events), "delay_seconds": DELAY}
        # every death of a driver running the job counts against its attempts: not our subject
        plan = make_plan("events.count", params, str(out), job_id=job, max_attempts=1000)
        async with connect(self.jobs.url) as driver:
            await submit_job(driver, self.jobs.cluster_id, plan)
        outcome.note(f"submitted {job}")
        orphans: list[int] = []  # JVMs under SIGKILLed drivers
        mark = time.time()
        for fault in outcome.schedule:
            if not await self._next_batch(job, mark):
                outcome.note(f"the stream ended (or stalled) before {fault}")
                break
            await anyio.sleep(fault.after)
            done = await self._apply(fault, job, outcome, orphans)
            if done:
                outcome.applied[fault.kind] += 1
            mark = time.time()
        state = "unfinished"
        with anyio.move_on_after(ROUND_TIMEOUT):
            state = (await self.jobs.wait_job(job)).state
        outcome.note(f"job {state}")
        with anyio.move_on_after(30):  # a killed driver's JVM exits once its pipe closes
            while running(orphans):
                await anyio.sleep(0.2)
        outcome.violations = judge(
            state=state,
            digest=output_digest(out),
            reference=self.reference,
            records=await read_records(self.jobs, job),
            shown={b: staged_digest(batch_dir(out, b)) for b in committed_batches(out)},
            events=[e for e in self.jobs.events if of_job(job)(e)],
            files=self.files,
            survivors=running(orphans),
            exits=await self._exits(),
        )
        outcome.equal = output_digest(out) == self.reference
        outcome.seconds = time.monotonic() - outcome.started
        return outcome

    async def _exits(self) -> dict[str, int | None]:
        """The status of each job manager that left by itself since the last round."""
        found: dict[str, int | None] = {}
        for w in list(self.jobs.workers.values()):
            if w.state == "exited" and w.identity not in self._left:
                self._left.add(w.identity)
                found[w.identity] = None
                with anyio.move_on_after(30):
                    found[w.identity] = await w.process.wait()
        return found

    async def _next_batch(self, job: str, after: float) -> bool:
        """Wait for a micro-batch of ``job`` to start after ``after``; False once it finished,
        or stalled (the verdict then finds it unfinished)."""
        with anyio.move_on_after(ROUND_TIMEOUT):
            while not self.jobs.find("job_finished", of_job(job)):
                if self.jobs.find("batch_started", of_job(job, after=after)):
                    return True
                await anyio.sleep(0.05)
        return False

    def _target(self, job: str, pick: float) -> tuple[str, bool] | None:
        """The identity running ``job`` now, or by ``pick`` a standby (True)."""
        live = [w.identity for w in self.jobs.workers.values() if w.state not in DEAD]
        started = self.jobs.find("batch_started", of_job(job))
        runner = started[-1].identity if started else self.jobs.active()
        workers = self.jobs.workers.values()
        standbys = sorted(
            w.identity for w in workers if w.state == "standby" and w.identity != runner
        )
        if pick < STANDBY_SHARE and standbys:
            at = min(int(pick / STANDBY_SHARE * len(standbys)), len(standbys) - 1)
            return standbys[at], True
        return (runner, False) if runner in live else None

    async def _apply(
        self, fault: SparkFault, job: str, outcome: Outcome, orphans: list[int]
    ) -> bool:
        target = self._target(job, fault.pick)
        if target is None:
            outcome.note(f"{fault}: no target")
            return False
        who, standby = target
        pid = self.jobs.workers[who].process.pid
        if fault.kind.startswith("jvm"):
            jvms = java_under(pid)
            if not jvms:
                outcome.note(f"{fault}: {who} has no JVM yet")
                return False
            pid = jvms[0]
        outcome.note(f"{fault} on {'standby ' if standby else ''}{who} (pid {pid})")
        outcome.on_standby += standby
        try:
            if fault.kind == "driver_kill":
                orphans += java_under(pid)
                self._left.add(who)  # its state reads "exited" once its pipe closes
                self.jobs.kill(who)
            elif fault.kind == "jvm_kill":
                os.kill(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGSTOP)
                try:
                    await anyio.sleep(fault.length * SESSION_TIMEOUT)
                finally:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)
                outcome.note(f"  continued {who}")
        except ProcessLookupError:  # it was leaving (its JVM gone): missed
            outcome.note(f"  {who} (pid {pid}) was gone")
            return False
        return True


def table(outcomes: list[Outcome], seconds: float) -> str:
    kinds: Counter[str] = Counter()
    for o in outcomes:
        kinds.update(o.applied)
    equal = sum(o.equal for o in outcomes)
    standby = sum(o.on_standby for o in outcomes)
    return "\n".join(
        [
            f"rounds {len(outcomes)}, faults {sum(kinds.values())}: "
            + " ".join(f"{k}={kinds[k]}" for k in KINDS)
            + f" ({standby} of them on a standby)",
            f"digests equal in {equal} of {len(outcomes)}; "
            f"violations {sum(len(o.violations) for o in outcomes)}; {seconds:.0f}s",
        ]
    )


async def soak(
    workdir: Path,
    seeds: list[int],
    *,
    faults: int = len(KINDS),
    files: int = FILES,
    url: str | None = None,
    on_round: Callable[[Outcome], None] = lambda o: None,
) -> list[Outcome]:
    """Start the cluster and the job managers under ``workdir``, run the reference, then one
    round per seed; stop everything it started."""
    events = workdir / "events"
    generate_events(events, files=files, rows=300, users=25)
    spark = SparkCluster(workdir / "spark")
    # On this thread, not a worker thread: the cluster's JVMs die with the thread that started
    # them (PR_SET_DEATHSIG), and anyio ends its idle worker threads. Nothing runs meanwhile.
    spark.start()
    url = url or f"sqlite://{workdir / 'ha.db'}?session_timeout={SESSION_TIMEOUT}"
    outcomes: list[Outcome] = []
    try:
        async with LocalJobCluster(
            workdir / "jobs", url=url, master=spark.url, extra_args=["--warm-streams"]
        ) as jobs:
            runner = SparkSoak(jobs, events, workdir, files)
            async with anyio.create_task_group() as tg:
                tg.start_soon(runner.keep_contenders)
                try:
                    await runner.run_reference()
                    for seed in seeds:
                        outcomes.append(await runner.round(seed, faults))
                        (workdir / f"round-{seed}.txt").write_text(outcomes[-1].report() + "\n")
                        on_round(outcomes[-1])
                finally:
                    _write_events(jobs, workdir / "events.jsonl")
                    tg.cancel_scope.cancel()
    finally:
        left = await anyio.to_thread.run_sync(spark.stop)
        if left:
            raise RuntimeError(f"JVMs of the Spark cluster still run after its stop: {left}")
    return outcomes


def _write_events(jobs: LocalJobCluster, path: Path) -> None:
    lines = [
        json.dumps({"who": e.identity, "event": e.name, **e.fields}, default=str)
        for e in jobs.events
    ]
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.spark", description=__doc__)
    parser.add_argument("--seed", type=int, default=0, help="round i runs seed SEED+i")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--faults", type=int, default=len(KINDS), help="faults per round")
    parser.add_argument("--files", type=int, default=FILES, help="micro-batches per round")
    parser.add_argument("--backend", choices=["sqlite", "zookeeper"], default="sqlite")
    parser.add_argument("--keep", type=Path, help="keep logs and outputs in this directory")
    args = parser.parse_args()
    if (reason := spark_missing()) is not None:
        parser.error(f"a Spark standalone cluster needs: {reason}")
    if args.rounds < 1 or args.faults < 0 or args.files < 2:
        parser.error("--rounds must be at least 1, --faults at least 0, --files at least 2")
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="ha-spark-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.WARNING)
    started = time.monotonic()

    def say(o: Outcome) -> None:
        mark = "ok" if not o.violations else f"{len(o.violations)} VIOLATIONS"
        kinds = " ".join(f"{k}={n}" for k, n in sorted(o.applied.items()))
        print(
            f"seed {o.seed}: {mark}, digest equal {o.equal} ({o.seconds:.0f}s; {kinds})", flush=True
        )
        if o.violations:
            print(o.report(), flush=True)

    async def run() -> list[Outcome]:
        seeds = list(range(args.seed, args.seed + args.rounds))
        if args.backend == "sqlite":
            return await soak(workdir, seeds, faults=args.faults, files=args.files, on_round=say)
        from tests.support.backends.zookeeper import ZooKeeperServer, missing_reason

        if (why := missing_reason()) is not None:
            parser.error(f"ZooKeeper: {why}")
        server = ZooKeeperServer(workdir / "zookeeper")
        server.start()
        try:
            server.wait_serving()
            url = f"zk://{server.hosts}/spark-soak?session_timeout={SESSION_TIMEOUT}"
            return await soak(
                workdir, seeds, faults=args.faults, files=args.files, url=url, on_round=say
            )
        finally:
            server.stop()

    outcomes = anyio.run(run)
    print(table(outcomes, time.monotonic() - started))
    bad = [o for o in outcomes if o.violations]
    print(f"logs and outputs: {workdir}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
