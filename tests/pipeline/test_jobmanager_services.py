"""The job manager as a component of the cluster's HA services (#15), memory backend, Spark
stood in for as in ``test_jobmanager`` (asyncio and trio).

One election per cluster: a process hosting a dispatcher and a job manager fails over as one,
by a crash or by ``ha failover``'s request. Who works is judged from outside the elector: the
components record the start and end of their work in a witness list (one event loop: its
order is exact), and the job's output is compared with an uninterrupted run's.
"""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

import ha
from ha import admin
from ha.drivers.memory import MemoryCluster, MemoryDriver
from ha.http import serve_job_manager
from ha.pipeline.api.plan import make_plan
from ha.pipeline.client import submit_job, wait_for_job
from ha.pipeline.commit import output_digest
from ha.pipeline.jobmanager import JobManager
from ha.pipeline.jobmanager import term as term_module
from ha.pipeline.spark import WarmSession
from ha.services import HAServices, LeaderRetrieval
from ha.testing import History, Recorder, faults
from tests.support import jobmanager
from tests.support.http import get
from tests.support.jobmanager import FAST, FakeSpark, _reference, fake_pipeline  # noqa: F401
from tests.support.metrics import parse, value

pytestmark = pytest.mark.anyio

_names = itertools.count()
Witness = list[tuple[str, str, str]]  # (start | end, process, component)


class Dispatcher:
    """A user's component beside the job manager: it works while granted, and says so."""

    def __init__(self, process: str, witness: Witness) -> None:
        self.process, self.witness = process, witness
        self.election: Any = None

    async def grant_leadership(self, session_id: uuid.UUID) -> None:
        self.witness.append(("start", self.process, "dispatcher"))
        try:
            await self.election.confirm_leadership(session_id, f"{self.process}:8081")
            await anyio.sleep_forever()
        finally:
            self.witness.append(("end", self.process, "dispatcher"))

    async def revoke_leadership(self) -> None:
        pass


class Process:
    """One process: its driver, its HA services, a dispatcher and a job manager."""

    def __init__(self, name: str, cluster: str, tmp: Path, witness: Witness, hold: set[int]):
        self.name = name
        self.driver = MemoryDriver(cluster, session_timeout=1.0)
        self.services = HAServices(self.driver, "c1", identity=name, timing=FAST, members=True)
        self.dispatcher = Dispatcher(name, witness)
        self.jm = JobManager(
            self.driver,
            "c1",
            identity=f"jm-{name}",
            blobs=tmp / "blobs",
            spark=WarmSession.of(FakeSpark(name)),  # type: ignore[arg-type]
            poll_interval=0.05,
            services=self.services,
            on_event=self.on_event,
        )
        self.hold = hold  # batches after whose commit the next compute waits for the test
        self.committed: list[int] = []
        self.scope = anyio.CancelScope()

    async def run(self) -> None:
        with self.scope:
            await self.driver.start()
            try:
                async with self.services, anyio.create_task_group() as tg:
                    election = self.services.leader_election("dispatcher")
                    self.dispatcher.election = election
                    await election.start(self.dispatcher)
                    await self.jm.run()
                    tg.cancel_scope.cancel()
            finally:
                with anyio.CancelScope(shield=True):
                    await self.driver.aclose()

    def on_event(self, event: str, fields: dict[str, Any]) -> None:
        if event == "batch_committed":
            self.committed.append(fields["batch"])
            if fields["batch"] in self.hold:
                # the fixture makes a Knobs per test: read it now, not at import
                jobmanager.KNOBS.release.clear()

    async def committed_batch(self, batch: int) -> None:
        with anyio.fail_after(10):
            while batch not in self.committed:
                await anyio.sleep(0.01)

    async def crash(self) -> None:
        await faults(self.driver).crash()  # like SIGKILL: its session expires after 1 s
        self.scope.cancel()


@pytest.fixture
def witness(monkeypatch: pytest.MonkeyPatch) -> Witness:
    """The job managers' terms, recorded around the real one."""
    seen: Witness = []
    run = term_module.Term.run

    async def recorded(term: Any) -> None:
        process = term.context.identity.removeprefix("jm-")  # its process: Process(name)
        seen.append(("start", process, "jobmanager"))
        try:
            await run(term)
        finally:
            seen.append(("end", process, "jobmanager"))

    monkeypatch.setattr(term_module.Term, "run", recorded)
    return seen


def terms(witness: Witness, component: str) -> list[str]:
    """The processes whose ``component`` worked, in order; fails if two worked at once."""
    working: list[str] = []
    order: list[str] = []
    for what, process, name in witness:
        if name != component:
            continue
        if what == "start":
            assert not working, f"{component} of {process} started while {working} worked"
            working.append(process)
            order.append(process)
        else:
            working.remove(process)
    return order


async def leaders(driver: MemoryDriver, component: str) -> str | None:
    async with LeaderRetrieval(driver, f"/ha/c1/leader/{component}") as found:
        info = await anext(found)
    return None if info is None else info.address


async def both_on(client: MemoryDriver, process: str) -> bool:
    """Whether both components' published leaders are ``process``'s."""
    found = (await leaders(client, "jobmanager"), await leaders(client, "dispatcher"))
    return found == (f"jm-{process}", f"{process}:8081")


async def until(check: Any, *args: Any) -> None:
    with anyio.fail_after(10):
        while not await check(*args):
            await anyio.sleep(0.01)


async def test_a_process_s_components_fail_over_together(tmp_path: Path, witness: Witness) -> None:
    """A dispatcher and a job manager in each of two processes: ``ha failover``'s request,
    then a crash, move both together; never two job managers at work; output exactly once."""
    cluster = f"jms-{next(_names)}"
    a, b = (Process(n, cluster, tmp_path, witness, {2, 6}) for n in ("a", "b"))
    client = MemoryDriver(cluster, session_timeout=5)
    path = "/ha/c1/election"
    try:
        async with client, anyio.create_task_group() as tg:
            tg.start_soon(a.run)

            await until(both_on, client, "a")
            tg.start_soon(b.run)
            await until(_member_is, client, path, "b", "standby")
            out = tmp_path / "out"
            plan = make_plan("test.fake", {"batches": 12}, str(out), job_id="j", max_attempts=2)
            await submit_job(client, "c1", plan)
            await a.committed_batch(2)  # then a's next batch waits

            request = await admin.request_failover(client, path, cooldown=0.5)
            with anyio.fail_after(10):
                await admin.wait_for_failover(client, path, request)
            await until(both_on, client, "b")
            await until(_member_is, client, path, "a", "standby")  # back after its cooldown
            jobmanager.KNOBS.release.set()

            await b.committed_batch(6)  # then b's next batch waits: it dies there
            assert (a.committed, b.committed) == ([0, 1, 2], [3, 4, 5, 6])  # the holds held
            await b.crash()
            await until(both_on, client, "a")
            jobmanager.KNOBS.release.set()
            with anyio.fail_after(20):
                status = await wait_for_job(client, "c1", "j", blobs=tmp_path / "blobs", poll=0.02)
            a.jm.quit()
            tg.cancel_scope.cancel()
    finally:
        MemoryCluster.drop(cluster)
    assert status.state == "succeeded"
    assert output_digest(out) == await _reference(tmp_path, 12)
    assert terms(witness, "jobmanager") == ["a", "b", "a"]
    assert terms(witness, "dispatcher") == ["a", "b", "a"]


async def _member_is(client: MemoryDriver, path: str, identity: str, state: str) -> bool:
    status = await admin.election_status(client, path)
    return any(m.identity == identity.encode() and m.state == state for m in status.members)


class BrokenSpark(WarmSession):
    """A SparkSession that cannot be built (no JVM): the term fails before it begins."""

    async def wait(self) -> Any:
        raise RuntimeError("no JVM here")


async def test_a_job_manager_whose_term_fails_gives_the_lead_to_another_process(
    tmp_path: Path, witness: Witness
) -> None:
    """Its services give the lead up: the other process's job manager runs the job. Its
    Spark could not be built, so it leaves the election ('spark_lost', exit 69 from the
    command) rather than queue again for terms that would fail the same way (issue 27: two
    cold job managers with the Spark master down traded the lead tens of times a second)."""
    cluster = f"jms-{next(_names)}"
    events: list[tuple[str, str]] = []

    async def run(name: str, spark: WarmSession) -> None:
        async with MemoryDriver(cluster, session_timeout=1.0) as driver:
            jm = JobManager(driver, "c1", identity=name, blobs=tmp_path / "blobs", spark=spark,
                            timing=FAST, poll_interval=0.05,
                            on_event=lambda event, fields: events.append((name, event)))  # fmt: skip
            await jm.run()

    try:
        async with MemoryDriver(cluster, session_timeout=5) as client:
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "a", BrokenSpark(hot=False))
                with anyio.fail_after(10):
                    while ("a", "term_failed") not in events:
                        await anyio.sleep(0.01)
                tg.start_soon(run, "b", WarmSession.of(FakeSpark("b")))  # type: ignore[arg-type]
                out = tmp_path / "out"
                await submit_job(client, "c1", make_plan("test.fake", {}, str(out), job_id="j"))
                with anyio.fail_after(10):
                    status = await wait_for_job(client, "c1", "j", blobs=tmp_path / "blobs")
                with anyio.fail_after(10):
                    while ("a", "spark_lost") not in events:  # left, not queued again
                        await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
    finally:
        MemoryCluster.drop(cluster)
    assert status.state == "succeeded"
    assert terms(witness, "jobmanager")[-1] == "b" and "a" not in terms(witness, "jobmanager")


async def test_a_job_manager_served_over_http_takes_over_from_a_crash_and_counts_the_fence(
    tmp_path: Path,
) -> None:
    """``ha jobs manager --http``: the fence of its takeover is counted, once. Before, the
    counter was set as the manager's own fence hook, and called itself: the fence of a crashed
    active failed (RecursionError) and the job manager's election failed for good."""
    cluster = f"jms-{next(_names)}"
    try:
        async with (
            MemoryDriver(cluster, session_timeout=1.0) as dx,
            MemoryDriver(cluster, session_timeout=1.0) as dj,
        ):
            manager = JobManager(dj, "c1", identity="jm-1", blobs=tmp_path / "blobs",
                                 spark=WarmSession.of(FakeSpark("jm-1")),  # type: ignore[arg-type]
                                 timing=FAST, poll_interval=0.05)  # fmt: skip
            path = manager.elector.path
            old = ha.Elector(dx, path, "old", timing=FAST)
            async with anyio.create_task_group() as tg:
                tg.start_soon(old.run, Recorder("old", History()))
                await old.wait_active()
                address = await tg.start(serve_job_manager, manager, "127.0.0.1", 0)
                tg.start_soon(manager.run)
                await manager.elector.wait_state(ha.State.STANDBY)
                await faults(dx).crash()  # its breadcrumb stays: the next active fences it
                with anyio.fail_after(10):
                    await manager.elector.wait_state(ha.State.ACTIVE)
                samples = parse((await get(address, "/metrics"))[2].decode())
                labels = {"election": path, "identity": "jm-1"}
                assert value(samples, "ha_elector_fence_attempts_total", **labels) == 1
                assert value(samples, "ha_elector_fence_failures_total", **labels) == 0
                manager.quit()
                tg.cancel_scope.cancel()
    finally:
        MemoryCluster.drop(cluster)


async def test_a_job_manager_refuses_to_start_beside_an_older_one(tmp_path: Path) -> None:
    """An earlier version's job manager, queued in the old election, would lead beside it."""
    cluster = f"jms-{next(_names)}"
    try:
        async with MemoryDriver(cluster, session_timeout=5) as old, MemoryDriver(cluster) as new:
            elector = ha.Elector(old, "/ha/c1/jobmanager", "jm-old", timing=FAST)
            async with anyio.create_task_group() as tg:
                tg.start_soon(elector.run, Recorder("jm-old", History()))
                await elector.wait_active()
                jm = JobManager(new, "c1", identity="jm-new", blobs=tmp_path / "blobs",
                                spark=WarmSession.of(FakeSpark("jm-new")))  # type: ignore[arg-type]  # fmt: skip
                with pytest.raises(ha.errors.ConfigurationError, match=r"jobmanager \(jm-old\)"):
                    await jm.run()
                assert await new.exists("/ha/c1/election") is None  # it never joined
                elector.quit()
    finally:
        MemoryCluster.drop(cluster)
