"""HA overhead: the same job run by the job manager with and without per-batch checkpoints.

    .venv/bin/python benchmarks/pipeline_overhead.py [--repeat 3] [--days 8] [--rows 100000]

One job manager process per variant (no standby, so no second JVM competes for the 2 cores),
on the embedded sqlite backend; one warm-up job each, then the click-sessionization job
``--repeat`` times per variant, alternating variants. A job's time is from its
``job_started`` to its ``job_finished`` event (the job manager's clock). With checkpoints,
each batch ends with fenced writes (checkpoint blob + pointer, subsuming the previous one);
without, a failover restarts the job from its first batch. Both variants stage and commit
every batch the same way. Issue 6's target: overhead under 10%.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

import anyio

from ha.pipeline.examples.clicks import generate_clicks
from ha.pipeline.local import Event, LocalJobCluster


async def run_job(
    cluster: LocalJobCluster, params: dict[str, object], out: Path, job: str
) -> float:
    await cluster.submit("clicks.sessionize", params, str(out), job_id=job)
    with anyio.fail_after(1200):
        status = await cluster.wait_job(job)
    assert status.state == "succeeded", status

    def finished(e: Event) -> bool:
        return e.fields.get("job") == job

    with anyio.fail_after(30):
        done = await cluster.wait_event("job_finished", finished)
    return float(done.fields["seconds"])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--days", type=int, default=8)
    parser.add_argument("--rows", type=int, default=100_000, help="clicks per day (batch)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="ha-pipeline-overhead-"))
    try:
        data = workdir / "clicks"
        generate_clicks(data, days=args.days, rows_per_day=args.rows, users=5_000, seed=3)
        params = {"input": str(data)}
        times: dict[str, list[float]] = {"checkpoints": [], "none": []}
        async with (
            LocalJobCluster(workdir / "with", cluster_id="with") as with_ckpt,
            LocalJobCluster(
                workdir / "without", cluster_id="without", extra_args=["--no-checkpoints"]
            ) as without,
        ):
            clusters = {"checkpoints": with_ckpt, "none": without}
            for name, cluster in clusters.items():
                await cluster.start(f"jm-{name}")
                with anyio.fail_after(180):
                    await cluster.wait_ready(1)
                warm = await run_job(cluster, params, workdir / f"warmup-{name}", f"warmup-{name}")
                print(f"  warm-up ({name}): {warm:.2f} s", flush=True)
            for n in range(args.repeat):
                for name, cluster in clusters.items():
                    seconds = await run_job(
                        cluster, params, workdir / f"out-{name}-{n}", f"job-{name}-{n}"
                    )
                    times[name].append(seconds)
                    print(f"  run {n + 1} ({name}): {seconds:.2f} s", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    with_s, without_s = statistics.median(times["checkpoints"]), statistics.median(times["none"])
    overhead = (with_s - without_s) / without_s
    per_batch_ms = (with_s - without_s) / args.days * 1000
    print(f"\njob of {args.days} batches x {args.rows:,} clicks, median of {args.repeat} runs")
    print(f"  with checkpoints:    {with_s:7.2f} s")
    print(f"  without checkpoints: {without_s:7.2f} s")
    print(f"  overhead: {overhead:+.1%} ({per_batch_ms:+.0f} ms per batch); target < 10%")


if __name__ == "__main__":
    anyio.run(main)
