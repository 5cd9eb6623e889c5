"""A streaming job through failovers: job manager processes with real Spark (local[2]) on the
embedded sqlite backend, one SIGKILLed and one SIGSTOPped then SIGCONTed mid-stream (about 40 s
on 2 idle cores; the ZooKeeper run and the JVM killed or paused alone: ``-m slow``).

The verdicts come from outside the job managers: the output's digest against an uninterrupted
run's, the commit records in the backend against the batch directories on disk, and the
deposed driver's own report that the backend refused its late batch (``Fenced``). One set of
processes for the module (each holds a SparkSession).
"""

from __future__ import annotations

import os
import signal
import sys
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
from tests.cli.helpers import ha_env  # noqa: E402
from tests.support.backends.zookeeper import missing_reason  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.anyio]

SESSION_TIMEOUT = 2.0
FILES = 5


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
    async with LocalJobCluster(
        workdir, session_timeout=SESSION_TIMEOUT, extra_args=["--warm-streams"]
    ) as c:
        for name in ("sj-1", "sj-2", "sj-3"):
            await c.start(name)
        with anyio.fail_after(400):  # JVM start-ups: minutes on a loaded machine
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


async def _kill_then_pause(cluster: LocalJobCluster, events: Path, out: Path, job: str) -> None:
    """SIGKILL the active after a committed micro-batch, then SIGSTOP the next one in the middle
    of a micro-batch and SIGCONT it once a third has committed; check what each left."""
    params = {"input": str(events), "delay_seconds": 0.8}
    await cluster.submit("events.count", params, str(out), job_id=job)

    first = cluster.active()
    assert first is not None
    with anyio.fail_after(120):
        await cluster.wait_event("batch_committed", _of(job, first))
    jvms = _descendants(cluster.workers[first].process.pid)
    assert jvms  # its Spark JVM
    killed_at = cluster.kill(first)
    with anyio.fail_after(60):
        resumed = await cluster.wait_event("batch_started", _of(job, after=killed_at))
    second = resumed.identity

    # Its pipeline sleeps 0.8 s before Spark writes: the SIGSTOP lands inside a micro-batch.
    with anyio.fail_after(60):
        done = await cluster.wait_event("batch_committed", _of(job, second))
        started = await cluster.wait_event("batch_started", _of(job, second, after=done.t))
    stopped_at = cluster.signal(second, signal.SIGSTOP)
    paused_batch, paused_epoch = started.fields["batch"], started.fields["epoch"]
    with anyio.fail_after(60):
        taken = await cluster.wait_event(
            "batch_committed", _of(job, after=stopped_at, not_by=second)
        )
    cluster.signal(second, signal.SIGCONT)
    with anyio.fail_after(60):
        rejected = await cluster.wait_event("batch_rejected", _of(job, second))
    with anyio.fail_after(120):
        status = await cluster.wait_job(job)
    assert status.state == "succeeded", status

    # The deposed driver's late batch was refused by the backend and its epoch never recorded
    # for that batch; every visible batch is exactly what its record names.
    assert rejected.fields["batch"] == paused_batch and rejected.fields["epoch"] == paused_epoch
    assert "epoch" in rejected.fields["error"] and taken.fields["epoch"] > paused_epoch
    records = await _records(cluster, job)
    assert records[paused_batch].epoch > paused_epoch
    await _check_visible(cluster, job, out)
    # The killed driver's JVM did not outlive it (it exits when its parent's pipe closes).
    assert _running(jvms) == []


async def _check_visible(cluster: LocalJobCluster, job: str, out: Path) -> None:
    """Batches in view are exactly the recorded ones, with the recorded bytes, in epoch order."""
    records = await _records(cluster, job)
    assert [r.batch_id for r in records] == committed_batches(out) == list(range(FILES))
    assert [r.epoch for r in records] == sorted(r.epoch for r in records)
    for r in records:
        assert r.sha256 == staged_digest(batch_dir(out, r.batch_id))
    assert not [p for p in (out / STAGING).iterdir() if not p.name.startswith(".trash-")]


async def _reference(cluster: LocalJobCluster, events: Path, ref: Path, job: str) -> str:
    await cluster.submit("events.count", {"input": str(events)}, str(ref), job_id=job)
    with anyio.fail_after(120):
        assert (await cluster.wait_job(job)).state == "succeeded"
    return output_digest(ref)


@pytest.mark.timeout(900)
async def test_killed_then_paused_mid_stream_the_output_equals_an_uninterrupted_run(
    cluster: LocalJobCluster, events: Path, tmp_path: Path
) -> None:
    out, ref = tmp_path / "out", tmp_path / "reference"
    await _kill_then_pause(cluster, events, out, "chaos")

    # The uninterrupted run, by the same cluster, submitted with `ha jobs submit --wait`: one
    # plain line per committed micro-batch (its stdout is not a terminal).
    submit = [
        sys.executable, "-m", "ha", "--url", cluster.url, "jobs", "submit", "events.count",
        "-p", f"input={events}", "-o", str(ref), "--job-id", "reference",
        "--cluster", cluster.cluster_id, "--blobs", cluster.blobs, "--wait", "--timeout", "150",
    ]  # fmt: skip
    with anyio.fail_after(160):
        done_cli = await anyio.run_process(submit, env=ha_env(tmp_path), check=False)
    lines = done_cli.stdout.decode().splitlines()
    assert done_cli.returncode == 0, lines + done_cli.stderr.decode().splitlines()[-5:]
    progress = [line for line in lines if "committed" in line]
    assert progress == [f"job reference: batch {n} committed ({n + 1})" for n in range(FILES)]
    assert lines[-1] == f"job reference succeeded: {FILES}/{FILES} batches, output {ref}"
    assert output_digest(out) == output_digest(ref)


@pytest.fixture(scope="module")
async def zk_cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper_server):  # type: ignore[no-untyped-def]
    # Only for the slow test below: three more job managers with Spark, on ZooKeeper.
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("stream-jobmanagers-zk")
    url = f"zk://{zookeeper_server.hosts}/stream-{workdir.name}?session_timeout={SESSION_TIMEOUT}"
    async with LocalJobCluster(workdir, url=url, extra_args=["--warm-streams"]) as c:
        for name in ("zk-1", "zk-2", "zk-3"):
            await c.start(name)
        with anyio.fail_after(180):
            await c.wait_ready(3)
        yield c


@pytest.mark.slow
@pytest.mark.zookeeper
@pytest.mark.timeout(600)
async def test_on_zookeeper_too(zk_cluster: LocalJobCluster, events: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    await _kill_then_pause(zk_cluster, events, out, "chaos-zk")
    assert output_digest(out) == await _reference(
        zk_cluster, events, tmp_path / "reference", "reference-zk"
    )


def _jvm_of(cluster: LocalJobCluster, identity: str) -> int:
    [jvm] = [
        pid
        for pid in _descendants(cluster.workers[identity].process.pid)
        if Path(f"/proc/{pid}/comm").read_text().strip() == "java"
    ]
    return jvm


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_the_jvm_killed_or_paused_alone(
    cluster: LocalJobCluster, events: Path, tmp_path: Path
) -> None:
    """Spark's JVM is a process of its own. Killed: its job manager leaves the election and a
    standby finishes the stream. Paused past the session timeout: the Python driver keeps its
    lease, so no one else acts meanwhile, and nothing is committed until it resumes."""
    await cluster.start("sj-4")  # a standby more: the earlier test killed one
    with anyio.fail_after(180):
        await cluster.wait_ready(3)
    out = tmp_path / "out"
    params = {"input": str(events), "delay_seconds": 1.0}
    await cluster.submit("events.count", params, str(out), job_id="jvm")
    victim = cluster.active()
    assert victim is not None
    with anyio.fail_after(120):
        await cluster.wait_event("batch_committed", _of("jvm", victim))
    os.kill(_jvm_of(cluster, victim), signal.SIGKILL)
    with anyio.fail_after(60):
        await cluster.wait_event("spark_lost", _of("jvm", victim))
        await cluster.workers[victim].exited.wait()
        taken = await cluster.wait_event("batch_committed", _of("jvm", not_by=victim))

    holder = taken.identity
    jvm = _jvm_of(cluster, holder)
    os.kill(jvm, signal.SIGSTOP)
    paused_at = len(cluster.events)
    await anyio.sleep(SESSION_TIMEOUT * 2)
    during = cluster.events[paused_at:]
    os.kill(jvm, signal.SIGCONT)
    assert [e for e in during if e.name in ("active", "batch_committed")] == []
    assert cluster.active() == holder
    with anyio.fail_after(120):
        assert (await cluster.wait_job("jvm")).state == "succeeded"
    await _check_visible(cluster, "jvm", out)
    assert output_digest(out) == await _reference(
        cluster, events, tmp_path / "reference", "reference-jvm"
    )


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
