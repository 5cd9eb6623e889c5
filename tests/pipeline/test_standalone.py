"""The job manager on a Spark standalone cluster: a master and two workers of one core each on
loopback (``tests/support/spark_cluster.py``), the job managers' sessions on
``spark://127.0.0.1:PORT``.

Default run (about 35 s on 2 loaded cores, most of it the cluster's and one session's start):
the cluster, where the driver listens, and a SIGKILLed job manager whose JVM exits and whose
application the master ends, its executor's core freed.

``-m slow`` (two to three minutes each on 2 loaded cores: three SparkSessions with their
executors and warm-up streams), on sqlite and on ZooKeeper: a streaming job through four
disruptions of its active driver. The Python driver SIGKILLed after a committed micro-batch
(the standby, its session registered with the master before the kill, goes on), the next
active SIGSTOPped inside a micro-batch and SIGCONTed after its successor committed (its late
batch refused), the active's Spark JVM SIGKILLed alone, then its successor's JVM SIGSTOPped
past the session timeout and SIGCONTed (nobody acts meanwhile). The verdicts come from outside
the job managers: the master's JSON (which applications run, which cores are used), the fenced
commit log in the backend, ``/proc``, and the output's digest against an uninterrupted run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from ha.drivers import connect
from ha.pipeline.api.plan import make_plan
from ha.pipeline.client import submit_job
from ha.pipeline.commit import output_digest
from ha.pipeline.examples.events import generate_events
from ha.pipeline.local import LocalJobCluster
from ha.pipeline.spark import SparkSettings, prepare_environment
from tests.support.backends.zookeeper import missing_reason as zookeeper_missing
from tests.support.processes import java_under, running
from tests.support.spark_cluster import SparkCluster, spark_cluster  # noqa: F401
from tests.support.stream_jobs import (
    check_rejected,
    check_visible,
    kill_after_a_commit,
    kill_the_jvm,
    pause_mid_batch,
    pause_the_jvm,
    read_records,
    reference_run,
)

pytestmark = [pytest.mark.spark]

SESSION_TIMEOUT = 2.0
FILES = 8


def test_the_cluster_has_two_alive_workers_of_one_core(spark_cluster: SparkCluster) -> None:  # noqa: F811
    state = spark_cluster.state()
    assert state["status"] == "ALIVE" and state["url"] == spark_cluster.url
    workers = spark_cluster.alive_workers(state)
    assert [(w["cores"], w["memory"]) for w in workers] == [(1, 1024), (1, 1024)]
    assert len(spark_cluster.jvms()) == 3  # the master and the workers, no executor yet


@pytest.mark.parametrize(
    ("master", "driver"),
    [
        ("local[2]", "127.0.0.1"),
        ("spark://127.0.0.1:7077", "127.0.0.1"),
        ("spark://localhost:7077,127.0.0.2:7077", "127.0.0.1"),
        ("spark://spark-master.example:7077", None),
        ("yarn", None),
    ],
)
def test_the_driver_listens_on_loopback_only_when_the_cluster_is_there(
    master: str, driver: str | None
) -> None:
    conf = SparkSettings(master=master).spark_conf()
    assert SparkSettings(master=master).driver_ip() == driver
    if master.startswith("spark://") and driver is not None:
        assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == driver
    else:
        assert "spark.driver.host" not in conf and "spark.driver.bindAddress" not in conf
    chosen = SparkSettings(master="spark://spark-master.example:7077", local_ip="10.0.0.5")
    assert chosen.spark_conf()["spark.driver.host"] == "10.0.0.5"


def test_a_driver_for_a_remote_master_is_not_bound_to_loopback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("SPARK_LOCAL_IP", "JAVA_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        monkeypatch.setenv(name, "")  # restored after the test
        monkeypatch.delenv(name)
    prepare_environment(SparkSettings(master="spark://spark-master.example:7077"))
    assert "SPARK_LOCAL_IP" not in os.environ  # executors elsewhere could not reach 127.0.0.1
    prepare_environment(SparkSettings(master="local[2]"))
    assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # processes do the work: one event loop flavour is enough here


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("events")
    generate_events(root, files=FILES, rows=300, users=25)
    return root


def _app(identity: str) -> str:
    return f"ha-jobmanager-{identity}"  # the name a job manager process gives its session


def _cores_used(spark: SparkCluster, state: dict[str, Any]) -> list[int]:
    return sorted(w["coresused"] for w in spark.alive_workers(state))


def _running_apps(spark: SparkCluster, state: dict[str, Any]) -> set[str]:
    return {name for name, st in spark.applications(state).items() if st == "RUNNING"}


async def _master_shows(spark: SparkCluster, done: Callable[[dict[str, Any]], bool]) -> None:
    await anyio.to_thread.run_sync(spark.wait_until, done, abandon_on_cancel=True)


@pytest.mark.anyio
async def test_a_killed_drivers_application_leaves_the_master(
    spark_cluster: SparkCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    """One job manager with its session on the cluster (an application with one executor),
    SIGKILLed: its JVM exits, the master ends its application and frees the executor's core."""
    spark = spark_cluster
    url = f"sqlite://{tmp_path / 'ha.db'}?session_timeout={SESSION_TIMEOUT}"
    async with LocalJobCluster(tmp_path, url=url, master=spark.url) as jobs:
        await jobs.start("one")
        with anyio.fail_after(300):
            await jobs.wait_ready(1)
        with anyio.fail_after(60):  # the executor is granted once the application registered
            await _master_shows(spark, lambda s: _cores_used(spark, s) == [0, 1])
        assert _running_apps(spark, spark.state()) == {_app("one")}
        jvms = java_under(jobs.workers["one"].process.pid)
        assert jvms  # its Spark JVM
        jobs.kill("one")
        with anyio.fail_after(60):
            await _master_shows(spark, lambda s: _app("one") not in _running_apps(spark, s))
            await _master_shows(spark, lambda s: _cores_used(spark, s) == [0, 0])
            while running(jvms):
                await anyio.sleep(0.1)
        assert spark.applications()[_app("one")] in ("FINISHED", "KILLED")


async def _four_disruptions(
    spark: SparkCluster, url: str, workdir: Path, events: Path, name: str
) -> None:
    job, out, ref = f"standalone-{name}", workdir / "out", workdir / "reference"
    async with LocalJobCluster(
        workdir, url=url, master=spark.url, extra_args=["--warm-streams"]
    ) as jobs:
        try:
            await _disrupt(spark, jobs, events, job, out, ref)
        finally:  # what each job manager told, for whoever reads a failure
            lines = [
                json.dumps({"who": e.identity, "event": e.name, **e.fields}, default=str)
                for e in jobs.events
            ]
            (workdir / "events.jsonl").write_text("\n".join(lines) + "\n")


async def _disrupt(
    spark: SparkCluster, jobs: LocalJobCluster, events: Path, job: str, out: Path, ref: Path
) -> None:
    prefix = job.removeprefix("standalone-")
    for name in (f"{prefix}-1", f"{prefix}-2"):
        await jobs.start(name)
    with anyio.fail_after(300):  # JVM start-ups: minutes on a loaded machine
        await jobs.wait_ready(2)
    # The warm standby's session is registered before any kill: two applications run,
    # one executor (one core) each.
    state = spark.state()
    assert _running_apps(spark, state) == {_app(w) for w in jobs.workers}
    assert _cores_used(spark, state) == [1, 1]

    params = {"input": str(events), "delay_seconds": 0.8}
    # Three of the disruptions leave the job's attempt open, and a loaded machine can add a
    # term (a connection lost and found again): more than the default max_attempts (3) deaths
    # in a row may be counted, and that bound is not what this test is about.
    plan = make_plan("events.count", params, str(out), job_id=job, max_attempts=10)
    async with connect(jobs.url) as driver:
        await submit_job(driver, jobs.cluster_id, plan)
    # 1. The active's Python driver SIGKILLed after a committed micro-batch: the standby,
    # warm before the kill, goes on; the killed driver's JVM exits and its application
    # leaves the master's running ones, its executor released.
    killed = await kill_after_a_commit(jobs, job)
    warm = {e.identity: e.t for e in reversed(jobs.find("spark_warm"))}
    assert warm[killed.resumed.identity] < killed.killed_at
    gone = _app(killed.victim)
    with anyio.fail_after(60):
        await _master_shows(spark, lambda s: spark.applications(s)[gone] != "RUNNING")
    state = spark.state()
    assert spark.applications(state)[gone] in ("FINISHED", "KILLED")
    assert _cores_used(spark, state) == [0, 1]
    # A new standby takes the freed core (it registers now, its session cold).
    await jobs.start(f"{prefix}-3")

    # 2. The next active SIGSTOPped inside a micro-batch, SIGCONTed once a successor has
    # committed: its late batch is refused by the backend (it rejoins as a standby).
    paused = await pause_mid_batch(jobs, job, killed.resumed.identity, takeover=240)
    with anyio.fail_after(60):
        while jobs.workers[paused.victim].state != "standby":
            await anyio.sleep(0.1)

    # 3. The active's Spark JVM SIGKILLed alone: its job manager leaves the election and
    # the standby, the one paused before, finishes the stream.
    lost, taken = await kill_the_jvm(jobs, job)
    assert taken.identity == paused.victim
    # 4. And its successor's JVM SIGSTOPped alone past the session timeout, then SIGCONTed:
    # nobody acts meanwhile (its Python driver keeps the lease), nothing is committed.
    await pause_the_jvm(jobs, taken.identity, SESSION_TIMEOUT * 2)
    with anyio.fail_after(180):
        status = await jobs.wait_job(job)
    assert status.state == "succeeded", status
    with anyio.fail_after(60):
        await _master_shows(spark, lambda s: spark.applications(s)[_app(lost)] != "RUNNING")

    check_rejected(paused, await read_records(jobs, job))
    await check_visible(jobs, job, out, FILES)
    assert running(killed.jvms) == []
    await reference_run(jobs, events, ref, f"{job}-reference")
    assert output_digest(out) == output_digest(ref)


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.timeout(900)
async def test_a_stream_through_four_disruptions_on_sqlite(
    spark_cluster: SparkCluster,  # noqa: F811
    events: Path,
    tmp_path: Path,
) -> None:
    url = f"sqlite://{tmp_path / 'ha.db'}?session_timeout={SESSION_TIMEOUT}"
    await _four_disruptions(spark_cluster, url, tmp_path, events, "sq")


@pytest.mark.slow
@pytest.mark.zookeeper
@pytest.mark.anyio
@pytest.mark.timeout(900)
async def test_a_stream_through_four_disruptions_on_zookeeper(
    spark_cluster: SparkCluster,  # noqa: F811
    zookeeper_server: Any,
    events: Path,
    tmp_path: Path,
) -> None:
    reason = zookeeper_missing()
    if reason:
        pytest.skip(reason)
    url = f"zk://{zookeeper_server.hosts}/standalone-{tmp_path.name}?session_timeout={SESSION_TIMEOUT}"
    await _four_disruptions(spark_cluster, url, tmp_path, events, "zk")
