"""A hot standby whose Spark JVM dies leaves the election (found by the Spark soak,
``tests/chaos/spark.py``, seed 0: a standby's JVM SIGKILLed, then the active's driver).

Before, such a standby stayed in the election as if warm. Elected, it could run nothing: its
stream failed at once with the JVM gone, it left, and the job counted the term as one more
death of a job manager running it (``attempts``), though nothing of the job ran there; with
the default ``max_attempts`` of 3, one crash of the active and one dead standby are two of the
three. And a job manager whose JVM was killed (standby or active) exited with status 1 and a
Py4J traceback, stopping a session that had no JVM left; then with status 0, which a
supervisor's restart on failure takes for a deliberate stop: now EX_UNAVAILABLE (69). Real
job manager processes on local[2] and sqlite, real SIGKILLs of their JVMs.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import pytest

pytest.importorskip("pyspark")

from ha.pipeline.examples.events import generate_events  # noqa: E402
from ha.pipeline.local import LocalJobCluster  # noqa: E402
from tests.support.processes import running  # noqa: E402
from tests.support.stream_jobs import jvm_of, kill_the_jvm  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.anyio]

EXIT_SPARK_LOST = 69  # EX_UNAVAILABLE: the documented status (worker.py), pinned here


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # processes do the work: one event loop flavour is enough here


@pytest.mark.timeout(600)
async def test_a_standby_that_could_not_build_spark_leaves_the_election(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the soak too (seed 103): a standby's JVM SIGKILLed while it started. Its
    session never built, and a WarmSession does not build twice; it stayed a standby, and
    elected it failed its term and gave the lead up at once, over and over (tens of epochs a
    second) until its elector gave up and the process died with a traceback. Here the standby
    has no Java at all (JAVA_HOME without bin/java), which fails its build at once."""
    async with LocalJobCluster(tmp_path, session_timeout=2.0) as jobs:
        await jobs.start("a")
        with anyio.fail_after(400):
            await jobs.wait_ready(1)
        monkeypatch.setenv("JAVA_HOME", str(tmp_path))  # for the process started next
        await jobs.start("b")
        with anyio.fail_after(60):
            lost = await jobs.wait_event("spark_lost", lambda e: e.identity == "b")
            code = await jobs.workers["b"].process.wait()
        assert "JAVA_HOME has no bin/java" in lost.fields["error"] and code == EXIT_SPARK_LOST
        assert jobs.active() == "a" and jobs.find("active", lambda e: e.identity == "b") == []


@pytest.mark.timeout(600)
async def test_a_standby_whose_jvm_died_leaves_the_election(tmp_path: Path) -> None:
    async with LocalJobCluster(tmp_path, session_timeout=2.0) as jobs:
        for name in ("a", "b"):
            await jobs.start(name)
        with anyio.fail_after(400):  # JVM start-ups: minutes on a loaded machine
            active = await jobs.wait_ready(2)
        [standby] = [name for name in jobs.workers if name != active]
        jvm = jvm_of(jobs, standby)
        os.kill(jvm, signal.SIGKILL)
        with anyio.fail_after(60):
            lost = await jobs.wait_event("spark_lost", lambda e: e.identity == standby)
            code = await jobs.workers[standby].process.wait()
        assert "epoch" not in lost.fields  # it never led
        assert code == EXIT_SPARK_LOST  # it left in good order, and a supervisor restarts it
        assert running([jvm]) == []
        # the active is left alone: still active, its own JVM alive
        assert jobs.active() == active and running([jvm_of(jobs, active)])
        assert jobs.find("spark_lost", lambda e: e.identity == active) == []

        # The active's JVM killed in a stream: it leaves too, and it also ends in good order
        # (before, stopping its session raised Py4J's ConnectionRefusedError: exit status 1),
        # with the same status.
        await jobs.start("c")
        with anyio.fail_after(400):
            await jobs.wait_ready(2)
        generate_events(tmp_path / "in", files=4, rows=100, users=5)
        params = {"input": str(tmp_path / "in"), "delay_seconds": 0.5}
        await jobs.submit("events.count", params, str(tmp_path / "out"), job_id="s")
        victim, _ = await kill_the_jvm(jobs, "s")
        with anyio.fail_after(60):
            assert await jobs.workers[victim].process.wait() == EXIT_SPARK_LOST
            assert (await jobs.wait_job("s")).state == "succeeded"
