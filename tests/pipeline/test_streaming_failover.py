"""A streaming job through failovers: job manager processes with real Spark (local[2]) on the
embedded sqlite backend, one SIGKILLed and one SIGSTOPped then SIGCONTed mid-stream (about 40 s
on 2 idle cores; the ZooKeeper run and the JVM killed or paused alone: ``-m slow``).

The verdicts come from outside the job managers: the output's digest against an uninterrupted
run's, the commit records in the backend against the batch directories on disk, and the
deposed driver's own report that the backend refused its late batch (``Fenced``). One set of
processes for the module (each holds a SparkSession).
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

pytest.importorskip("pyspark")

from ha.pipeline.commit import output_digest  # noqa: E402
from ha.pipeline.examples.events import generate_events  # noqa: E402
from ha.pipeline.local import LocalJobCluster  # noqa: E402
from tests.support.backends.zookeeper import missing_reason  # noqa: E402
from tests.support.cli import ha_env  # noqa: E402
from tests.support.processes import running  # noqa: E402
from tests.support.stream_jobs import (  # noqa: E402
    check_rejected,
    check_visible,
    kill_after_a_commit,
    kill_the_jvm,
    pause_mid_batch,
    pause_the_jvm,
    read_records,
    reference_run,
)

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


async def _kill_then_pause(cluster: LocalJobCluster, events: Path, out: Path, job: str) -> None:
    """SIGKILL the active after a committed micro-batch, then SIGSTOP the next one in the middle
    of a micro-batch and SIGCONT it once a third has committed; check what each left."""
    params = {"input": str(events), "delay_seconds": 0.8}
    await cluster.submit("events.count", params, str(out), job_id=job)

    killed = await kill_after_a_commit(cluster, job)
    # Its pipeline sleeps 0.8 s before Spark writes: the SIGSTOP lands inside a micro-batch.
    paused = await pause_mid_batch(cluster, job, killed.resumed.identity)
    with anyio.fail_after(120):
        status = await cluster.wait_job(job)
    assert status.state == "succeeded", status

    # The deposed driver's late batch was refused by the backend and its epoch never recorded
    # for that batch; every visible batch is exactly what its record names.
    check_rejected(paused, await read_records(cluster, job))
    await check_visible(cluster, job, out, FILES)
    # The killed driver's JVM did not outlive it (it exits when its parent's pipe closes).
    assert running(killed.jvms) == []


async def _reference(cluster: LocalJobCluster, events: Path, ref: Path, job: str) -> str:
    await reference_run(cluster, events, ref, job)
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
    _victim, taken = await kill_the_jvm(cluster, "jvm")

    await pause_the_jvm(cluster, taken.identity, SESSION_TIMEOUT * 2)
    with anyio.fail_after(120):
        assert (await cluster.wait_job("jvm")).state == "succeeded"
    await check_visible(cluster, "jvm", out, FILES)
    assert output_digest(out) == await _reference(
        cluster, events, tmp_path / "reference", "reference-jvm"
    )
