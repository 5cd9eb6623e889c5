"""The job manager's bookkeeping on the memory backend, without Spark (asyncio and trio).

Spark is replaced by a stand-in: the pipeline's ``compute`` returns the batch's rows as bytes
(optionally after a pause, or raising), and ``stage_batch`` writes them to the staging
directory. Everything else is the real thing: election, fenced stores, commits, recovery.
The same scenarios with real Spark and real processes are in ``test_pipeline_processes``.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import anyio
import pytest

import ha
from ha.drivers.memory import MemoryCluster, MemoryDriver
from ha.pipeline.api.plan import make_plan
from ha.pipeline.client import cancel_job, job_status, list_jobs, submit_job, wait_for_job
from ha.pipeline.commit import STAGING, committed_batches, output_digest
from ha.pipeline.jobmanager import JobManager
from ha.pipeline.spark import WarmSession
from ha.testing import faults
from tests.support import jobmanager
from tests.support.jobmanager import FAST, FakeSpark, _reference, fake_pipeline  # noqa: F401

pytestmark = pytest.mark.anyio

_names = itertools.count()


class Manager:
    def __init__(self, name: str, jm: JobManager, driver: MemoryDriver) -> None:
        self.name, self.jm, self.driver = name, jm, driver
        self.scope = anyio.CancelScope()
        self.done = anyio.Event()
        self.events: list[tuple[str, dict[str, Any]]] = []

    @property
    def active(self) -> bool:
        return self.jm.elector.state is ha.State.ACTIVE and not self.done.is_set()

    async def crash(self) -> None:
        await faults(self.driver).crash()
        self.scope.cancel()


class Cluster:
    def __init__(self, tg: Any, tmp: Path) -> None:
        self.tg = tg
        self.name = f"jm-{next(_names)}"
        self.blobs = tmp / "blobs"
        self.tmp = tmp
        self.managers: list[Manager] = []
        self.events: list[tuple[str, str, dict[str, Any]]] = []
        self.hold_after: set[str] = set()

    async def add(self, name: str, **options: Any) -> Manager:
        # 1 s: on loaded cores a shorter session's local deadline (2/3 of it) deposes actives
        # the tests mean to keep, and a lost lead counts as an attempt's death
        driver = MemoryDriver(self.name, session_timeout=1.0)
        await driver.start()
        jm = JobManager(
            driver,
            "c1",
            identity=name,
            blobs=self.blobs,
            spark=WarmSession.of(FakeSpark(name)),  # type: ignore[arg-type]
            timing=FAST,
            poll_interval=0.05,
            on_event=lambda event, fields: self.on_event(name, event, fields),
            **options,
        )
        m = Manager(name, jm, driver)

        async def run() -> None:
            with m.scope:
                try:
                    await jm.run()
                finally:
                    with anyio.CancelScope(shield=True):
                        await driver.aclose()
            m.done.set()

        self.tg.start_soon(run)
        self.managers.append(m)
        return m

    def on_event(self, name: str, event: str, fields: dict[str, Any]) -> None:
        self.events.append((name, event, fields))
        if event in self.hold_after:
            jobmanager.KNOBS.release.clear()  # the next compute waits until the test lets it go

    async def active(self) -> Manager:
        with anyio.fail_after(10):
            while True:
                live = [m for m in self.managers if m.active]
                if len(live) == 1:
                    return live[0]
                await anyio.sleep(0.01)

    def client(self) -> MemoryDriver:
        return MemoryDriver(self.name, session_timeout=5)

    async def submit(self, job_id: str, **params: Any) -> str:
        out = self.tmp / f"out-{job_id}"
        plan = make_plan("test.fake", params, str(out), job_id=job_id, max_attempts=2)
        async with self.client() as d:
            await submit_job(d, "c1", plan)
        return str(out)

    async def wait(self, job_id: str) -> Any:
        async with self.client() as d:
            with anyio.fail_after(20):
                return await wait_for_job(d, "c1", job_id, blobs=self.blobs, poll=0.02)

    def seen(self, event: str, **match: Any) -> list[tuple[str, dict[str, Any]]]:
        return [
            (who, f)
            for who, e, f in self.events
            if e == event and all(f.get(k) == v for k, v in match.items())
        ]

    async def wait_event(self, event: str, **match: Any) -> tuple[str, dict[str, Any]]:
        with anyio.fail_after(10):
            while not self.seen(event, **match):
                await anyio.sleep(0.005)
        return self.seen(event, **match)[-1]


@pytest.fixture
async def cluster(tmp_path: Path):  # type: ignore[no-untyped-def]
    async with anyio.create_task_group() as tg:
        c = Cluster(tg, tmp_path)
        yield c
        for m in c.managers:
            m.jm.quit()
        with anyio.move_on_after(3):
            for m in c.managers:
                await m.done.wait()
        tg.cancel_scope.cancel()
    MemoryCluster.drop(c.name)


async def test_a_job_runs_to_success_and_leaves_only_its_result(cluster: Cluster) -> None:
    await cluster.add("a")
    await cluster.active()
    out = await cluster.submit("job-1")
    status = await cluster.wait("job-1")
    assert status.state == "succeeded"
    assert (status.batches_done, status.batches) == (6, 6)
    assert committed_batches(out) == list(range(6))
    assert output_digest(out) == await _reference(cluster.tmp)
    await cluster.wait_event("job_finished", job="job-1")  # after the cleanup
    async with cluster.client() as d:
        # plan, checkpoints, registry entry and failure count are gone; the result stays
        assert await d.children("/ha/c1/execution-plans") == []
        assert await d.children("/ha/c1/checkpoints") == []
        assert await d.children("/ha/c1/running-jobs") == []
        assert [s.job_id for s in await list_jobs(d, "c1", blobs=cluster.blobs)] == ["job-1"]


async def test_the_new_active_resumes_from_the_checkpoint_after_a_crash(cluster: Cluster) -> None:
    a = await cluster.add("a")
    await cluster.active()
    await cluster.add("b")
    jobmanager.KNOBS.pause = 0.05
    out = await cluster.submit("job-1")
    await cluster.wait_event("batch_committed", job="job-1", batch=2)
    await a.crash()  # like SIGKILL: no goodbye; the session expires after 1 s
    status = await cluster.wait("job-1")
    assert status.state == "succeeded"
    assert output_digest(out) == await _reference(cluster.tmp)
    [(who, started)] = cluster.seen("job_started", identity="b")
    assert who == "b" and started["from_batch"] >= 3
    # b never redid a batch a had checkpointed
    assert {f["batch"] for _, f in cluster.seen("batch_started", identity="b")} == set(
        range(started["from_batch"], 6)
    )


async def test_a_graceful_handover_mid_job_loses_and_duplicates_nothing(cluster: Cluster) -> None:
    a = await cluster.add("a")
    await cluster.active()
    await cluster.add("b")
    jobmanager.KNOBS.pause = 0.05
    out = await cluster.submit("job-1")
    await cluster.wait_event("batch_started", job="job-1", batch=3)
    a.jm.quit()  # the running batch is cancelled; its staging is never committed
    status = await cluster.wait("job-1")
    assert status.state == "succeeded"
    assert output_digest(out) == await _reference(cluster.tmp)
    assert cluster.seen("batch_cancelled", identity="a")
    assert not any((Path(out) / STAGING).iterdir())


async def test_malformed_submissions_are_refused_with_a_reason(cluster: Cluster) -> None:
    await cluster.add("a")
    await cluster.active()
    good = make_plan("test.fake", {}, str(cluster.tmp / "o1"), job_id="ok")
    async with cluster.client() as d:
        await submit_job(d, "c1", good)
        with pytest.raises(ha.errors.ConfigurationError, match="already submitted"):
            await submit_job(d, "c1", good)
        # A plan no client of this version would write, and one for an unknown pipeline.
        await d.create("/ha/c1/pipeline/inbox/junk", b"{not json")
        unknown = make_plan("test.fake", {}, str(cluster.tmp / "o2"), job_id="gone")
        await d.create(
            "/ha/c1/pipeline/inbox/gone",
            unknown.to_bytes().replace(b'"test.fake"', b'"no.such.pipeline"'),
        )
        await d.set("/ha/c1/pipeline/inbox", b"ring")
    junk, gone = await cluster.wait("junk"), await cluster.wait("gone")
    assert junk.state == "failed" and "corrupt data" in (junk.error or "")
    assert gone.state == "failed" and "unknown pipeline 'no.such.pipeline'" in (gone.error or "")
    assert (await cluster.wait("ok")).state == "succeeded"


async def test_two_jobs_writing_to_one_output_are_not_both_accepted(cluster: Cluster) -> None:
    jobmanager.KNOBS.release.clear()  # hold the first job so that both are known at once
    await cluster.add("a")
    await cluster.active()
    first = make_plan("test.fake", {}, str(cluster.tmp / "same"), job_id="first")
    second = make_plan("test.fake", {}, str(cluster.tmp / "same"), job_id="second")
    async with cluster.client() as d:
        await submit_job(d, "c1", first)
        await cluster.wait_event("accepted", job="first")
        await submit_job(d, "c1", second)
    refused = await cluster.wait("second")
    jobmanager.KNOBS.release.set()
    assert refused.state == "failed" and "in use by job first" in (refused.error or "")
    assert (await cluster.wait("first")).state == "succeeded"


async def test_a_failing_batch_is_retried_then_the_job_fails_with_its_error(
    cluster: Cluster,
) -> None:
    await cluster.add("a")
    await cluster.active()
    jobmanager.KNOBS.fail[1] = 1  # fails once: the retry succeeds
    out = await cluster.submit("flaky")
    assert (await cluster.wait("flaky")).state == "succeeded"
    assert output_digest(out) == await _reference(cluster.tmp)

    jobmanager.KNOBS.fail[2] = 5  # fails more often than max_attempts (2)
    await cluster.submit("broken")
    status = await cluster.wait("broken")
    assert status.state == "failed"
    assert status.error == "batch 2: RuntimeError: injected failure in batch 2"
    assert status.batches_done == 2
    assert status.detail and status.detail["failures"] == 2
    assert len(cluster.seen("batch_failed", job="broken")) == 2


async def test_failures_add_up_across_failovers(cluster: Cluster) -> None:
    a = await cluster.add("a")
    await cluster.active()
    await cluster.add("b")
    jobmanager.KNOBS.fail[("a", 0)] = 1
    jobmanager.KNOBS.fail[("b", 0)] = 1
    cluster.hold_after.add("batch_failed")  # a's retry waits: a dies before it
    await cluster.submit("job")
    await cluster.wait_event("batch_failed", job="job", identity="a")
    cluster.hold_after.clear()
    await a.crash()
    jobmanager.KNOBS.release.set()
    status = await cluster.wait("job")  # one failure on a, one on b: max_attempts is 2
    assert status.state == "failed" and status.detail and status.detail["failures"] == 2
    assert [who for who, _ in cluster.seen("batch_failed")] == ["a", "b"]


async def test_cancel_a_running_and_a_pending_job(cluster: Cluster) -> None:
    await cluster.add("a")
    await cluster.active()
    jobmanager.KNOBS.pause = 0.1
    await cluster.submit("long")
    await cluster.submit("next")
    await cluster.wait_event("batch_started", job="long", batch=1)
    async with cluster.client() as d:
        await cancel_job(d, "c1", "next")
        await cancel_job(d, "c1", "long")
    long, nxt = await cluster.wait("long"), await cluster.wait("next")
    assert long.state == "cancelled" and 1 <= long.batches_done < 6
    assert nxt.state == "cancelled" and nxt.batches_done == 0
    for job in ("long", "next"):  # the result is told before its cleanup has ended
        await cluster.wait_event("job_finished", job=job)
    async with cluster.client() as d:
        assert await d.children("/ha/c1/pipeline/cancel") == []


async def test_status_of_a_submitted_job_before_any_manager_runs(cluster: Cluster) -> None:
    await cluster.submit("early")
    async with cluster.client() as d:
        status = await job_status(d, "c1", "early", blobs=cluster.blobs)
        assert (status.state, status.batches) == ("submitted", 6)
        with pytest.raises(ha.errors.ConfigurationError, match="no job 'nope'"):
            await job_status(d, "c1", "nope", blobs=cluster.blobs)
    await cluster.add("a")
    assert (await cluster.wait("early")).state == "succeeded"


async def _crash_next(cluster: Cluster, batch: int, dead: list[str]) -> str:
    """Kill the job manager that hangs in ``batch`` next, as os._exit in the batch would."""
    with anyio.fail_after(10):
        while not (found := [w for w, n in jobmanager.KNOBS.hung if n == batch and w not in dead]):
            await anyio.sleep(0.005)
    [victim] = [m for m in cluster.managers if m.name == found[0]]
    await victim.crash()  # the attempt never ends
    dead.append(victim.name)
    return victim.name


async def test_a_job_that_kills_its_job_managers_is_failed_after_max_attempts(
    cluster: Cluster,
) -> None:
    await cluster.add("a")
    await cluster.active()
    await cluster.add("b")
    await cluster.add("c")
    jobmanager.KNOBS.block[1] = (
        2  # the first two job managers to run batch 1 hang there: killed there
    )
    await cluster.submit("job")  # max_attempts=2
    dead: list[str] = []
    await _crash_next(cluster, 1, dead)
    second = await _crash_next(cluster, 1, dead)
    status = await cluster.wait("job")
    jobmanager.KNOBS.unblock.set()
    [third] = {"a", "b", "c"} - set(dead)
    assert status.state == "failed"
    assert status.error == "the job manager died running it 2 times (at batch 1; max_attempts 2)"
    assert status.detail and status.detail["deaths"] == 2 and status.batches_done == 1
    assert [(w, f["deaths"]) for w, f in cluster.seen("attempt_died")] == [(second, 1), (third, 2)]
    assert not cluster.seen("batch_started", identity=third)  # not run a third time
    assert (await cluster.active()).name == third


async def test_raised_and_handed_over_attempts_are_no_deaths_and_progress_restarts_the_count(
    cluster: Cluster,
) -> None:
    a = await cluster.add("a")
    await cluster.active()
    await cluster.add("b")
    await cluster.add("c")
    jobmanager.KNOBS.fail[("a", 1)] = 1
    jobmanager.KNOBS.block.update({("a", 1): 1, 3: 1, 5: 1})
    out = await cluster.submit("job")
    await cluster.wait_event("batch_failed", job="job", identity="a")
    a.jm.quit()  # graceful, in its retry of batch 1: a counted failure, a handover, no death
    await a.done.wait()
    dead = ["a"]
    second = await _crash_next(cluster, 3, dead)  # it committed batches 1 and 2: one death
    third = await _crash_next(cluster, 5, dead)  # it committed 3 and 4: one death, not two
    jobmanager.KNOBS.unblock.set()
    await cluster.add("d")
    status = await cluster.wait("job")
    assert status.state == "succeeded"
    assert status.detail and (status.detail["failures"], status.detail["deaths"]) == (1, 1)
    assert [(w, f["deaths"]) for w, f in cluster.seen("attempt_died")] == [(third, 1), ("d", 1)]
    assert [w for w, _ in cluster.seen("job_started")] == ["a", second, third, "d"]
    assert output_digest(out) == await _reference(cluster.tmp)


async def test_results_past_their_retention_go_with_what_their_job_kept(cluster: Cluster) -> None:
    """The newest 100 clean results stay (``JobResultStore``'s default); an older one is
    removed once a job finishes, after its stream's commit log (kept until then for audit)."""
    from ha.pipeline.commit.stream_commit import CommitRecord
    from ha.pipeline.layout import JobLayout
    from ha.stores import codec

    layout = JobLayout("c1")
    async with cluster.client() as d:  # 100 results of an earlier time, the oldest a stream's
        for n in range(100):
            doc = {"job_id": f"old-{n:03d}", "state": "clean", "outcome": "succeeded"}
            doc |= {"detail": {}, "finished_at": 1000.0 + n}
            data = codec.encode("ha.job-result", doc)
            await d.create(f"{layout.job_results}/old-{n:03d}", data, makepath=True)
        record = CommitRecord(7, 1, "a", "0" * 64).to_bytes()
        await d.create(layout.stream_commit("old-000", 7), record, makepath=True)
    await cluster.add("a")
    await cluster.active()
    await cluster.submit("job-1")
    assert (await cluster.wait("job-1")).state == "succeeded"
    await cluster.wait_event("job_finished", job="job-1")  # recorded, cleaned, expired
    async with cluster.client() as d:
        kept = await d.children(layout.job_results)
        assert sorted(kept) == sorted([f"old-{n:03d}" for n in range(1, 100)] + ["job-1"])
        assert await d.exists(layout.stream_commits("old-000")) is None
