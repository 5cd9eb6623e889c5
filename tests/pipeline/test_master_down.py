"""Job managers with the Spark standalone master down do not trade the lead for nothing.

A master that is down never registers an application: Spark's driver retries the
registration, then gives up and stops the SparkContext (about a minute). A cold job manager
builds its session when elected; with the master down that session's context stops under its
first term, which fails and gives the lead up. Before, such a job manager stayed a standby
with a stopped session (a WarmSession does not build twice, and only a hot standby's session
is watched): once both had failed one term each, they won and failed in turn, about five
terms a second (13 terms, 12 failed, seen here), until each elector gave up (its
``max_retries``) and both processes died with a traceback, the lead handed back and forth with
no backoff worth the name. Now a job manager whose term failed with its Spark gone leaves the
election (``spark_lost``) and exits with EX_UNAVAILABLE (69), as one whose JVM died does:
a supervisor's restart brings it back with a new JVM, at the supervisor's pace.

A real standalone master (killed before the job managers start), real job manager processes
on sqlite, cold (``--cold``): the first of them leads from the start.
"""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import pytest

pytest.importorskip("pyspark")

from ha.pipeline.local import LocalJobCluster  # noqa: E402
from tests.support.spark_cluster import SparkCluster  # noqa: E402
from tests.support.spark_cluster import missing_reason as spark_missing  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.anyio]

EX_UNAVAILABLE = 69  # a job manager that lost Spark (worker.EXIT_SPARK_LOST)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # processes do the work: one event loop flavour is enough here


@pytest.mark.slow  # Spark gives up registering after about 80 s, twice here: CI's 20 min are full
@pytest.mark.timeout(900)
async def test_cold_job_managers_leave_when_the_master_is_down(tmp_path: Path) -> None:
    if (reason := spark_missing()) is not None:
        pytest.skip(f"a Spark standalone cluster needs: {reason}")
    spark = SparkCluster(tmp_path / "spark")
    spark.start()  # on this thread: the cluster's JVMs die with the thread that started them
    try:
        master = spark.processes["master"]
        master.send_signal(signal.SIGKILL)
        master.wait(timeout=30)
        async with LocalJobCluster(tmp_path / "jobs", master=spark.url) as jobs:
            for name in ("a", "b"):
                await jobs.start(name, cold=True)
            with anyio.fail_after(600):  # two registrations given up, one after the other
                codes = {name: await w.process.wait() for name, w in jobs.workers.items()}
            terms = jobs.find("active")
            failed = jobs.find("term_failed")
            lost = jobs.find("spark_lost")
    finally:
        spark.stop()
    # each led once (a term or two more if a loaded machine let a session deadline pass),
    # failed once, and left: not a dozen terms won and failed in turn
    assert 2 <= len(terms) <= 4, [(e.identity, e.fields) for e in terms]
    assert sorted(e.identity for e in failed) == ["a", "b"]
    assert sorted(e.identity for e in lost) == ["a", "b"]
    # its session's build gave up (cold: built when elected), or its context stopped
    reasons = ("building Spark failed: ", "Spark's context is stopped")
    assert all(e.fields["error"].startswith(reasons) for e in lost), [e.fields for e in lost]
    assert codes == {"a": EX_UNAVAILABLE, "b": EX_UNAVAILABLE}
