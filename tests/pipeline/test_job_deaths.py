"""A job that kills its job manager, with real processes: three job managers on one sqlite file.

Each process runs ``CHILD``: the real ``JobManager`` on the embedded sqlite backend, with a
stand-in for Spark (no JVM: what is under test is the process dying, not Spark) and a pipeline
whose batch 0 calls ``os._exit(137)``, as a segfault in a UDF or the OOM killer would end it:
no exception, no goodbye. Its events are JSON lines on stdout. With ``max_attempts=2`` the job
must take down two job managers, no more: the third fails it with the reason and stays active.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from ha.drivers import connect
from ha.pipeline.api.plan import JobPlan
from ha.pipeline.client import list_jobs, submit_job, wait_for_job

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

CHILD = r"""
import json, os, sys
import anyio
from ha.drivers import connect
from ha.pipeline import pipeline
from ha.pipeline.jobmanager import JobManager
from ha.pipeline.spark import WarmSession

url, blobs, name = sys.argv[1:4]


class Context:  # what the job manager asks of a SparkContext around a batch
    def setJobGroup(self, *args, **kwargs): pass
    def setLocalProperty(self, *args): pass
    def cancelJobGroup(self, *args): pass


class Spark:
    sparkContext = Context()


@pipeline("test.dies", batches=lambda params: [0, 1])
def compute(spark, params, batch):
    os._exit(137)  # the process dies in the batch


def emit(event, fields):
    print(json.dumps({"event": event, **fields}, default=str), flush=True)


async def main():
    async with connect(url) as driver:
        spark = WarmSession.of(Spark())
        jm = JobManager(driver, "c1", identity=name, blobs=blobs, spark=spark,
                        poll_interval=0.1, on_event=emit)
        await jm.run()

anyio.run(main)
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the processes do the work: one event loop flavour is enough here


class Manager:
    def __init__(self, name: str, process: anyio.abc.Process) -> None:
        self.name, self.process = name, process
        self.events: list[dict[str, Any]] = []

    async def follow(self) -> None:
        assert self.process.stdout is not None
        stream = BufferedByteReceiveStream(self.process.stdout)
        try:
            while True:
                self.events.append(json.loads(await stream.receive_until(b"\n", 1 << 20)))
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError):
            pass

    def seen(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event]

    @property
    def state(self) -> str | None:
        told = [e["event"] for e in self.events if e["event"] in ("active", "standby", "neutral")]
        return told[-1] if told else None


async def test_a_job_that_kills_its_job_manager_fails_after_max_attempts_deaths(
    tmp_path: Path,
) -> None:
    url = f"sqlite://{tmp_path / 'ha.db'}?session_timeout=1"
    blobs = str(tmp_path / "blobs")
    managers: list[Manager] = []
    async with anyio.create_task_group() as tg:
        try:
            for name in ("jm-1", "jm-2", "jm-3"):
                argv = [sys.executable, "-c", CHILD, url, blobs, name]
                with (tmp_path / f"{name}.log").open("ab") as log:
                    process = await anyio.open_process(argv, stderr=log)
                managers.append(Manager(name, process))
                tg.start_soon(managers[-1].follow)
            with anyio.fail_after(30):
                while sum(m.state is not None for m in managers) < 3:
                    await anyio.sleep(0.05)
            plan = JobPlan("dies", "test.dies", {}, (0, 1), str(tmp_path / "out"), 2, time.time())
            async with connect(url) as client:
                await submit_job(client, "c1", plan)
                with anyio.fail_after(60):
                    status = await wait_for_job(client, "c1", "dies", blobs=blobs, poll=0.1)
                [listed] = await list_jobs(client, "c1", blobs=blobs)
            assert status.state == "failed"
            reason = "the job manager died running it 2 times (at batch 0; max_attempts 2)"
            assert status.error == reason and listed.error == reason
            with anyio.fail_after(10):  # reaped by the event loop a moment after they died
                while sum(m.process.returncode is not None for m in managers) < 2:
                    await anyio.sleep(0.05)
            dead = [m for m in managers if m.process.returncode is not None]
            assert sorted(m.process.returncode for m in dead) == [137, 137]
            [third] = [m for m in managers if m not in dead]
            # The result is stored before the event is told (term._finish), and events reach
            # us through the child's stdout: the last may come a moment after the status.
            with anyio.fail_after(10):
                while not third.seen("job_finished"):
                    await anyio.sleep(0.05)
            assert third.state == "active"
            # the job's events: the second counted one death, the third two, and gave up
            died = sorted(
                (e["deaths"], m in dead) for m in managers for e in m.seen("attempt_died")
            )
            assert died == [(1, True), (2, False)]
            assert not third.seen("batch_started")
            [finished] = third.seen("job_finished")
            assert (finished["outcome"], finished["error"]) == ("failed", reason)
        finally:
            for m in managers:
                if m.process.returncode is None:
                    m.process.terminate()
            with anyio.move_on_after(10):
                for m in managers:
                    await m.process.wait()
            for m in managers:
                if m.process.returncode is None:
                    m.process.kill()
            tg.cancel_scope.cancel()


@pytest.mark.slow  # three Spark JVMs one after the other: about a minute on 2 cores
@pytest.mark.spark
async def test_a_stream_that_kills_its_job_manager_fails_after_max_attempts_deaths(
    tmp_path: Path,
) -> None:
    pytest.importorskip("pyspark")
    import tests.support.dying_stream  # noqa: F401  (registers test.stream_dies here too)
    from ha.pipeline.api.plan import make_plan
    from ha.pipeline.examples.events import generate_events
    from ha.pipeline.local import LocalJobCluster

    generate_events(tmp_path / "in", files=2, rows=20, users=4)
    plan = make_plan(
        "test.stream_dies", {"input": str(tmp_path / "in")}, str(tmp_path / "out"), max_attempts=2
    )
    imports = ["tests.support.dying_stream"]
    async with LocalJobCluster(tmp_path / "jm", session_timeout=2.0, imports=imports) as cluster:
        for name in ("sj-1", "sj-2", "sj-3"):
            await cluster.start(name, cold=True)  # one JVM at a time: each built when elected
        with anyio.fail_after(300):
            await cluster.wait_ready(3, warm=False)
            async with connect(cluster.url) as client:
                await submit_job(client, cluster.cluster_id, plan)
            status = await cluster.wait_job(plan.job_id)
        assert status.state == "failed"
        assert (
            status.error == "the job manager died running it 2 times (at batch 0; max_attempts 2)"
        )
        dead = [w for w in cluster.workers.values() if w.process.returncode is not None]
        assert sorted(w.process.returncode for w in dead) == [137, 137]
        assert cluster.active() not in {w.identity for w in dead}
        assert [e.fields["deaths"] for e in cluster.find("attempt_died")] == [1, 2]
