"""A streaming job through failovers: job manager processes with real Spark (local[2]) on the
embedded sqlite backend, one SIGKILLed and one SIGSTOPped then SIGCONTed mid-stream.

The verdicts come from outside the job managers: the output's digest against an uninterrupted
run's, the commit records in the backend against the batch directories on disk, and the
deposed driver's own report that the backend refused its late batch (``Fenced``). One set of
processes for the module (each holds a SparkSession).
"""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import pytest

pytest.importorskip("pyspark")

from ha.drivers import connect  # noqa: E402
from ha.pipeline.commit import STAGING, batch_dir, committed_batches, output_digest  # noqa: E402
from ha.pipeline.events import generate_events  # noqa: E402
from ha.pipeline.layout import JobLayout  # noqa: E402
from ha.pipeline.local import Event, LocalJobCluster  # noqa: E402
from ha.pipeline.stream_commit import read_commits, staged_digest  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.anyio]

SESSION_TIMEOUT = 2.0
FILES = 6


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # processes do the work: one event loop flavour is enough here


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("events")
    generate_events(root, files=FILES, rows=300, users=25)
    return root


@pytest.fixture(scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    workdir = tmp_path_factory.mktemp("stream-jobmanagers")
    async with LocalJobCluster(workdir, session_timeout=SESSION_TIMEOUT) as c:
        for name in ("sj-1", "sj-2", "sj-3"):
            await c.start(name)
        with anyio.fail_after(180):
            await c.wait_ready(3)
        yield c


def _of(job: str, who: str | None = None, after: float = 0.0, not_by: str | None = None):  # type: ignore[no-untyped-def]
    def match(e: Event) -> bool:
        return (
            e.fields.get("job") == job
            and (who is None or e.identity == who)
            and (not_by is None or e.identity != not_by)
            and e.t > after
        )

    return match


async def _records(cluster: LocalJobCluster, job: str) -> list:  # type: ignore[type-arg]
    async with connect(cluster.url) as driver:
        return await read_commits(driver, JobLayout(cluster.cluster_id), job)


@pytest.mark.timeout(400)
async def test_killed_then_paused_mid_stream_the_output_equals_an_uninterrupted_run(
    cluster: LocalJobCluster, events: Path, tmp_path: Path
) -> None:
    out, ref = tmp_path / "out", tmp_path / "reference"
    params = {"input": str(events), "delay_seconds": 1.0}
    await cluster.submit("events.count", params, str(out), job_id="chaos")

    # SIGKILL the active after its first committed micro-batch.
    first = cluster.active()
    assert first is not None
    with anyio.fail_after(120):
        await cluster.wait_event("batch_committed", _of("chaos", first))
    jvms = _descendants(cluster.workers[first].process.pid)
    assert jvms  # its Spark JVM
    killed_at = cluster.kill(first)
    with anyio.fail_after(60):
        resumed = await cluster.wait_event("batch_started", _of("chaos", after=killed_at))
    second = resumed.identity

    # SIGSTOP the next active in the middle of a micro-batch (its pipeline sleeps 1 s before
    # Spark writes), and SIGCONT it once the third has committed a micro-batch of its own.
    with anyio.fail_after(60):
        done = await cluster.wait_event("batch_committed", _of("chaos", second))
        started = await cluster.wait_event("batch_started", _of("chaos", second, after=done.t))
    stopped_at = cluster.signal(second, signal.SIGSTOP)
    paused_batch, paused_epoch = started.fields["batch"], started.fields["epoch"]
    with anyio.fail_after(60):
        taken = await cluster.wait_event(
            "batch_committed", _of("chaos", after=stopped_at, not_by=second)
        )
    cluster.signal(second, signal.SIGCONT)
    with anyio.fail_after(60):
        rejected = await cluster.wait_event("batch_rejected", _of("chaos", second))
    with anyio.fail_after(120):
        status = await cluster.wait_job("chaos")
    assert status.state == "succeeded", status

    # The uninterrupted run, by the same cluster.
    await cluster.submit("events.count", {"input": str(events)}, str(ref), job_id="reference")
    with anyio.fail_after(120):
        assert (await cluster.wait_job("reference")).state == "succeeded"

    assert committed_batches(out) == committed_batches(ref) == list(range(FILES))
    assert output_digest(out) == output_digest(ref)
    # The deposed driver's late batch was refused by the backend and its epoch never recorded
    # for that batch; every visible batch is exactly what its record names.
    assert rejected.fields["batch"] == paused_batch and rejected.fields["epoch"] == paused_epoch
    assert "epoch" in rejected.fields["error"] and taken.fields["epoch"] > paused_epoch
    records = await _records(cluster, "chaos")
    assert [r.batch_id for r in records] == list(range(FILES))
    assert records[paused_batch].epoch > paused_epoch
    assert [r.epoch for r in records] == sorted(r.epoch for r in records)
    for r in records:
        assert r.sha256 == staged_digest(batch_dir(out, r.batch_id))
    assert not [p for p in (out / STAGING).iterdir() if not p.name.startswith(".trash-")]
    # The killed driver's JVM did not outlive it (it exits when its parent's pipe closes).
    assert _running(jvms) == []


def _descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (Spark's JVM is a child of the job manager process)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found += [int(child), *_descendants(int(child))]
    return found


def _running(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
                alive.append(pid)
        except OSError:
            continue
    return alive
