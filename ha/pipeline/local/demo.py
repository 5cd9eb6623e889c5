"""The pipeline demo (``ha demo --pipeline``): a job survives the SIGKILL of its active.

``run_pipeline_demo``: three job managers (``LocalJobCluster``), a click-stream
sessionization job submitted, the active killed (SIGKILL) in the middle of the job, the job
finishing on the new active, the output compared byte for byte with that of an uninterrupted
run of the same job, and the recovery time printed (SIGKILL to the next batch starting on the
new active). ``progress`` tells each batch as it is committed (``ha demo --pipeline`` shows
them with ``ha.report.progress``: a bar on a terminal, a line each elsewhere).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import anyio

from ..client import JobStatus
from ..commit.output import output_digest
from .cluster import Event, LocalJobCluster

__all__ = ("DemoResult", "Progress", "run_pipeline_demo")

# progress(total) -> a context giving on_batch(line), for each of ``total`` committed batches
Progress = Callable[[int], AbstractContextManager[Callable[[str], None]]]


@dataclass(frozen=True, slots=True)
class DemoResult:
    status: JobStatus
    reference: JobStatus
    identical: bool
    kills: list[tuple[str, float]]  # who was killed, and the recovery time in seconds
    digest: str


async def run_pipeline_demo(
    workdir: Path | str,
    *,
    days: int = 8,
    rows_per_day: int = 20_000,
    kills: int = 1,
    processes: int = 3,
    session_timeout: float = 2.0,
    say: Callable[[str], None] = print,
    progress: Progress | None = None,
) -> DemoResult:
    """The demo: kill the active ``kills`` times mid-job; compare with an uninterrupted run.

    ``progress(total)`` is entered once the job managers are up; its ``on_batch(line)`` hears
    each batch committed, the job's then the reference run's (``total``: both jobs' batches),
    once each, in the order the job managers report them."""
    from ..examples.clicks import generate_clicks

    if processes < kills + 1:
        raise ValueError("need more job manager processes than kills")
    workdir = Path(workdir)
    data = workdir / "clicks"
    generate_clicks(data, days=days, rows_per_day=rows_per_day, seed=1)
    say(f"generated {days} days x {rows_per_day:,} clicks in {data}")
    params = {"input": str(data), "delay_seconds": 0.5}
    async with LocalJobCluster(workdir, session_timeout=session_timeout) as cluster:
        for n in range(processes):
            await cluster.start(f"jm-{n + 1}")
        say(f"starting {processes} job managers (each builds its SparkSession: hot standby)")
        with anyio.fail_after(300):
            active = await cluster.wait_ready(processes)
        say(f"active: {active}; submitting the job")
        batches = days  # one batch per day of clicks
        with (progress or _no_progress)(2 * batches) as on_batch:
            told = _Batches(cluster, on_batch)
            async with anyio.create_task_group() as tg:
                tg.start_soon(told.follow, "demo", batches)
                await cluster.submit(
                    "clicks.sessionize", params, str(workdir / "out"), job_id="demo"
                )
                recoveries = await _kill_actives(cluster, active, kills, say)
                with anyio.fail_after(600):
                    status = await cluster.wait_job("demo")
                await told.wait_told("demo")
                say(f"job {status.state}: {status.batches_done}/{status.batches} batches")
                say("running the same job again without interruption, for comparison")
                tg.start_soon(told.follow, "reference", batches)
                await cluster.submit(
                    "clicks.sessionize", params, str(workdir / "reference"), job_id="reference"
                )
                with anyio.fail_after(600):
                    reference = await cluster.wait_job("reference")
                await told.wait_told("reference")
                tg.cancel_scope.cancel()  # a job that did not succeed leaves its follower
    digest = output_digest(workdir / "out")
    identical = status.state == "succeeded" and digest == output_digest(workdir / "reference")
    say(
        "output identical, byte for byte, to the uninterrupted run"
        if identical
        else "OUTPUT DIFFERS from the uninterrupted run"
    )
    return DemoResult(status, reference, identical, recoveries, digest)


async def _kill_actives(
    cluster: LocalJobCluster, active: str, kills: int, say: Callable[[str], None]
) -> list[tuple[str, float]]:
    """SIGKILL the active ``kills`` times, each after it committed a batch of the job; the
    recovery time of each: from the kill to the next batch starting on another process."""
    recoveries: list[tuple[str, float]] = []
    for _ in range(kills):
        victim = cluster.active() or active

        def committed(e: Event, victim: str = victim) -> bool:
            return e.identity == victim and e.fields.get("job") == "demo"

        with anyio.fail_after(300):
            await cluster.wait_event("batch_committed", committed)
        killed_at = cluster.kill(victim)
        say(f"SIGKILL {victim} in the middle of the job")

        def resumed_elsewhere(e: Event, victim: str = victim, t: float = killed_at) -> bool:
            return e.identity != victim and e.t > t

        with anyio.fail_after(120):
            resumed = await cluster.wait_event("batch_started", resumed_elsewhere)
        recovery = resumed.t - killed_at
        recoveries.append((victim, recovery))
        say(
            f"{resumed.identity} resumed the job at batch {resumed.fields['batch']} "
            f"{recovery:.2f} s after the kill"
        )
    return recoveries


class _Batches:
    """Tells ``on_batch`` each batch the job managers report committed, once (a batch is
    committed once, whoever runs it; this only guards the telling)."""

    def __init__(self, cluster: LocalJobCluster, on_batch: Callable[[str], None]) -> None:
        self.cluster = cluster
        self.on_batch = on_batch
        self.done: dict[str, anyio.Event] = {}

    async def follow(self, job_id: str, batches: int) -> None:
        done = self.done.setdefault(job_id, anyio.Event())
        told: set[int] = set()

        def new(e: Event) -> bool:
            return e.fields.get("job") == job_id and e.fields.get("batch") not in told

        while len(told) < batches:
            event = await self.cluster.wait_event("batch_committed", new)
            told.add(int(event.fields["batch"]))
            self.on_batch(f"{job_id}: batch {event.fields['batch']} committed on {event.identity}")
        done.set()

    async def wait_told(self, job_id: str) -> None:
        """Until every batch of a finished job was told: its last events may trail its status
        by a moment (at most 10 s: a job that failed has batches never committed)."""
        with anyio.move_on_after(10):
            await self.done.setdefault(job_id, anyio.Event()).wait()


def _no_progress(total: int) -> AbstractContextManager[Callable[[str], None]]:
    return nullcontext(lambda line: None)


def _main() -> None:  # python -m ha.pipeline.local.demo [WORKDIR]
    import tempfile

    workdir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="ha-pipeline-demo-")
    result = anyio.run(lambda: run_pipeline_demo(workdir))
    sys.exit(0 if result.identical else 1)


if __name__ == "__main__":
    _main()
