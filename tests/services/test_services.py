"""Scenario tests of the HA services: multi-component election, publication, retrieval.

Every test runs under asyncio and trio, on every backend. Waiting polls a condition with a
generous bound (a liveness bound, not a timing assertion).
"""

from __future__ import annotations

import uuid
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

import ha
from ha.drivers.base import post_order
from ha.errors import ConfigurationError, Fenced
from ha.services import HAServices, LeaderInfo, services
from ha.stores import JobOutcome, JobResult, RunStatus
from ha.testing import faults
from tests.support.services import Comp, _until, join, process, wait_for

pytestmark = pytest.mark.anyio


async def expire(backend: Any, driver: Any) -> None:
    """End the driver's session from the backend's side (the process stays up)."""
    await faults(driver).expire()


class Watcher:
    """Collects what a retrieval yields, in a task."""

    def __init__(self) -> None:
        self.seen: list[LeaderInfo | None] = []

    async def run(
        self, svc: HAServices, name: str, *, task_status: anyio.abc.TaskStatus[None]
    ) -> None:
        async with svc.leader_retrieval(name) as retrieval:
            started = False
            async for info in retrieval:
                self.seen.append(info)
                if not started:
                    started = True
                    task_status.started()

    @property
    def last(self) -> LeaderInfo | None:
        return self.seen[-1] if self.seen else None


# --- election and publication -----------------------------------------------------------------


async def test_components_share_one_election_and_publish_on_confirm(backend: Any) -> None:
    log: list[tuple[str, str]] = []
    async with process(backend, "a") as (a, _), process(backend, "reader") as (reader, _):
        dispatcher = await join(a, "dispatcher", log)
        rest = await join(a, "rest", log, address="http://a:8081")
        await wait_for(lambda: dispatcher.leading and rest.leading)
        assert dispatcher.grants[0] != rest.grants[0]  # a fresh session id each
        election = a.leader_election("dispatcher")
        assert election.has_leadership(dispatcher.grants[0])
        assert not election.has_leadership(uuid.uuid4())
        assert not election.has_leadership(rest.grants[0])  # another component's grant

        watcher = Watcher()
        async with anyio.create_task_group() as tg:
            await tg.start(watcher.run, reader, "dispatcher")
            assert watcher.seen == [None]  # granted, but not confirmed: nothing published
            await election.confirm_leadership(dispatcher.grants[0], "akka://a:6123")
            await wait_for(
                lambda: watcher.last == LeaderInfo("akka://a:6123", dispatcher.grants[0])
            )
            tg.cancel_scope.cancel()
        # the other component confirmed from its grant (its write may still be on its way:
        # take the first published value)
        with anyio.fail_after(10):
            async with aclosing(reader.leader_retrieval("rest")) as infos:
                rest_info = None
                async for rest_info in infos:
                    if rest_info is not None:
                        break
        assert rest_info == LeaderInfo("http://a:8081", rest.grants[0])
        # one election for the whole process: a's one node in the queue, one breadcrumb
        # (and the election's history, which the new leader appends in the background)
        children = await a.driver.children(f"{a.layout.root}/election")
        assert [c for c in children if c != "history"] == ["b", "n"]
        (node,) = await a.driver.children(f"{a.layout.root}/election/n")
        assert a.lease is not None and a.lease.node == f"{a.layout.root}/election/n/{node}"
        assert len(await a.driver.children(f"{a.layout.root}/election/b")) == 1


async def test_stale_confirm_is_ignored(backend: Any) -> None:
    log: list[tuple[str, str]] = []
    async with process(backend, "a") as (a, driver):
        comp = await join(a, "dispatcher", log)
        await wait_for(lambda: comp.leading)
        election = a.leader_election("dispatcher")
        await election.confirm_leadership(uuid.uuid4(), "wrong")
        assert await driver.exists(election.path) is None
        await election.confirm_leadership(comp.grants[0], "right")
        await election.confirm_leadership(uuid.uuid4(), "wrong")
        data, _ = await driver.get(election.path)
        assert LeaderInfo.decode(election.path, data) == LeaderInfo("right", comp.grants[0])


async def test_failover_revokes_everything_then_the_next_leader_publishes(backend: Any) -> None:
    log: list[tuple[str, str]] = []
    async with (
        process(backend, "a") as (a, driver_a),
        process(backend, "b") as (b, _),
        process(backend, "reader") as (reader, _),
    ):
        a1 = await join(a, "dispatcher", log, address="a:1")
        a2 = await join(a, "rm", log, address="a:2")
        await wait_for(lambda: a1.leading and a2.leading)
        b1 = await join(b, "dispatcher", log, address="b:1")
        b2 = await join(b, "rm", log, address="b:2")
        watcher = Watcher()
        async with anyio.create_task_group() as tg:
            await tg.start(watcher.run, reader, "dispatcher")
            await wait_for(lambda: watcher.last == LeaderInfo("a:1", a1.grants[0]))
            old = a1.grants[0]

            await expire(backend, driver_a)  # a loses its session: all its grants end
            await wait_for(lambda: a1.revokes >= 1 and a2.revokes >= 1)
            # a may win again with its next session; make it leave so that b takes over
            await a.leader_election("dispatcher").close()
            await a.leader_election("rm").close()
            await wait_for(lambda: b1.leading and b2.leading)
            await wait_for(lambda: watcher.last == LeaderInfo("b:1", b1.grants[0]))
            assert not a.leader_election("dispatcher").has_leadership(old)
            # the loss revoked both of a's components before a did anything else
            mine = [entry for entry in log if entry[0].startswith("a/")]
            assert sorted(mine[:2]) == [("a/dispatcher", "grant"), ("a/rm", "grant")]
            assert sorted(mine[2:4]) == [("a/dispatcher", "revoke"), ("a/rm", "revoke")]
            # a late confirm from the old grant does not land
            await a.leader_election("dispatcher").confirm_leadership(old, "a:late")
            tg.cancel_scope.cancel()
        assert watcher.seen[0] is None or watcher.seen[0] == LeaderInfo("a:1", old)
        assert LeaderInfo("a:late", old) not in watcher.seen
        assert watcher.seen[-1] == LeaderInfo("b:1", b1.grants[0])
        # never the same value twice in a row
        assert all(x != y for x, y in zip(watcher.seen, watcher.seen[1:], strict=False))


async def test_cut_off_leader_revokes_before_the_next_is_granted(backend: Any) -> None:
    """Stop before handover: the partitioned leader revokes on its local deadline, before its
    session can expire and the lock pass on."""
    if backend.name != "memory":
        pytest.skip(f"{backend.name} cannot partition (ha.testing.faults): memory only")
    log: list[tuple[str, str]] = []
    async with process(backend, "a") as (a, driver_a), process(backend, "b") as (b, _):
        a1 = await join(a, "dispatcher", log, address="a:1")
        a2 = await join(a, "rm", log, address="a:2")
        await wait_for(lambda: a1.leading and a2.leading)
        b1 = await join(b, "dispatcher", log, address="b:1")
        b2 = await join(b, "rm", log, address="b:2")
        faults(driver_a).partition()
        await wait_for(lambda: b1.leading and b2.leading)
        assert sorted(log[:2]) == [("a/dispatcher", "grant"), ("a/rm", "grant")]
        assert sorted(log[2:4]) == [("a/dispatcher", "revoke"), ("a/rm", "revoke")]
        assert sorted(log[4:6]) == [("b/dispatcher", "grant"), ("b/rm", "grant")]
        faults(driver_a).heal()


async def test_published_address_is_corrected(backend: Any) -> None:
    log: list[tuple[str, str]] = []
    async with process(backend, "a") as (a, _), process(backend, "other") as (_, vandal):
        comp = await join(a, "dispatcher", log, address="a:1")
        await wait_for(lambda: comp.leading)
        path = a.leader_election("dispatcher").path
        good = LeaderInfo("a:1", comp.grants[0]).encode()

        async def holds_good() -> bool:
            try:
                return (await vandal.get(path))[0] == good
            except ha.errors.NoNode:
                return False

        await _until(holds_good)
        await vandal.set(path, b"someone else's idea")
        await _until(holds_good)
        await vandal.delete(path)
        await _until(holds_good)
        _, stat = await vandal.get(path)
        assert stat.ephemeral_owner == a.driver.session_id


async def test_a_failing_grant_does_not_disturb_the_others(backend: Any) -> None:
    log: list[tuple[str, str]] = []

    class Broken(Comp):
        async def grant_leadership(self, session_id: uuid.UUID) -> None:
            await super().grant_leadership(session_id)
            raise RuntimeError("cannot start")

    async with process(backend, "a") as (a, _):
        good = await join(a, "dispatcher", log, address="a:1")
        broken = Broken("a/broken", log)
        await a.leader_election("broken").start(broken)
        await wait_for(lambda: good.leading and broken.leading)
        epoch = a.lease.epoch if a.lease else None
        await anyio.sleep(0.05)
        assert a.lease is not None and a.lease.epoch == epoch and good.revokes == 0


async def test_component_started_while_leading_is_granted_at_once(backend: Any) -> None:
    log: list[tuple[str, str]] = []
    async with process(backend, "a") as (a, _):
        first = await join(a, "dispatcher", log)
        await wait_for(lambda: first.leading)
        epoch = a.lease.epoch if a.lease else None
        late = await join(a, "job-42", log, address="a:42")
        await wait_for(lambda: late.leading)
        assert a.lease is not None and a.lease.epoch == epoch  # no new election for it
        assert first.revokes == 0


async def test_closing_a_component_revokes_it_and_removes_its_address(backend: Any) -> None:
    log: list[tuple[str, str]] = []
    async with process(backend, "a") as (a, driver), process(backend, "reader") as (reader, _):
        keep = await join(a, "dispatcher", log, address="a:1")
        leave = await join(a, "job-1", log, address="a:2")
        await wait_for(lambda: keep.leading and leave.leading)
        watcher = Watcher()
        async with anyio.create_task_group() as tg:
            await tg.start(watcher.run, reader, "job-1")
            await wait_for(lambda: watcher.last is not None)
            await a.leader_election("job-1").close()
            assert leave.revokes == 1 and not leave.leading
            await wait_for(lambda: watcher.last is None)
            tg.cancel_scope.cancel()
        assert keep.leading and keep.revokes == 0
        assert await driver.exists(a.leader_election("job-1").path) is None


async def test_closing_the_last_component_leaves_the_election(backend: Any) -> None:
    log: list[tuple[str, str]] = []
    async with process(backend, "a") as (a, _), process(backend, "b") as (b, _):
        a1 = await join(a, "dispatcher", log)
        await wait_for(lambda: a1.leading)
        b1 = await join(b, "dispatcher", log)
        await a.leader_election("dispatcher").close()
        await wait_for(lambda: b1.leading)
        # and a can come back as a standby
        again = await join(a, "dispatcher", log)
        await anyio.sleep(0.05)
        assert not again.leading


async def test_retrieval_from_a_process_that_never_contends(backend: Any) -> None:
    log: list[tuple[str, str]] = []
    async with process(backend, "reader") as (reader, driver):
        watcher = Watcher()
        async with anyio.create_task_group() as tg:
            await tg.start(watcher.run, reader, "dispatcher")
            async with process(backend, "a") as (a, _):
                comp = await join(a, "dispatcher", log, address="a:1")
                await wait_for(
                    lambda: comp.leading and watcher.last == LeaderInfo("a:1", comp.grants[0])
                )
            # a closed: its address went with it
            await wait_for(lambda: watcher.last is None)
            tg.cancel_scope.cancel()
        assert watcher.seen == [None, LeaderInfo("a:1", comp.grants[0]), None]
        assert reader._elector is None
        assert await driver.children(f"{reader.layout.root}/election/n") == []


async def test_retrieval_says_none_without_contact(backend: Any) -> None:
    if backend.name == "sqlite":
        pytest.skip("sqlite cannot disconnect (ha.testing.faults)")
    log: list[tuple[str, str]] = []
    async with process(backend, "a") as (a, _), process(backend, "reader") as (reader, driver):
        comp = await join(a, "dispatcher", log, address="a:1")
        watcher = Watcher()
        async with anyio.create_task_group() as tg:
            await tg.start(watcher.run, reader, "dispatcher")
            await wait_for(lambda: watcher.last is not None)
            faults(driver).disconnect()
            await wait_for(lambda: watcher.last is None)
            faults(driver).reconnect()
            await wait_for(lambda: watcher.last == LeaderInfo("a:1", comp.grants[0]))
            tg.cancel_scope.cancel()


async def test_corrupt_leader_information_names_the_path(backend: Any) -> None:
    async with process(backend, "reader") as (reader, driver):
        path = f"{reader.layout.root}/leader/dispatcher"
        await driver.create(
            path, b'{"format":"ha.leader","v":1,"address":"x","session_id":"nope"}', makepath=True
        )
        with pytest.raises(ha.errors.CorruptData) as info:
            await anext(aiter(reader.leader_retrieval("dispatcher")))
        assert info.value.path == path


# --- stores under the services' lease ---------------------------------------------------------


async def test_stores_follow_the_leadership(backend: Any, tmp_path: Path) -> None:
    log: list[tuple[str, str]] = []
    blobs = tmp_path / "blobs"
    async with (
        process(backend, "a", blobs=blobs) as (a, driver_a),
        process(backend, "b", blobs=blobs) as (b, _),
    ):
        a1 = await join(a, "dispatcher", log)
        await wait_for(lambda: a1.leading)
        old = a.stores()
        await old.running_jobs.set_running("j1")
        await old.execution_plans.put("j1", b"plan")
        b1 = await join(b, "dispatcher", log)
        first_session = driver_a.session_id
        await expire(backend, driver_a)
        await wait_for(lambda: a1.revokes >= 1)
        await a.leader_election("dispatcher").close()  # a might win again otherwise
        await wait_for(lambda: b1.leading)
        # a's process lives on with a new session, and its old stores object too
        await wait_for(lambda: driver_a.connected and driver_a.session_id != first_session)
        new = b.stores()
        assert await new.running_jobs.status("j1") is RunStatus.RUNNING
        with pytest.raises(Fenced):
            await old.job_results.create_dirty(JobResult("j1", JobOutcome.SUCCEEDED))
        await new.job_results.create_dirty(JobResult("j1", JobOutcome.SUCCEEDED))
        assert await new.execution_plans.recover("j1") == b"plan"
        with pytest.raises(ConfigurationError, match="without a lease"):
            await a.stores().running_jobs.set_done("j1")  # a is no longer leading


async def test_close_and_cleanup_all_data(backend: Any, tmp_path: Path) -> None:
    log: list[tuple[str, str]] = []
    async with process(backend, "a", blobs=tmp_path / "blobs") as (a, driver):
        comp = await join(a, "dispatcher", log, address="a:1")
        await wait_for(lambda: comp.leading)
        await a.stores().execution_plans.put("j1", b"plan")
        await a.close_and_cleanup_all_data()
        assert comp.revokes == 1
        # nothing stays: the fencing tokens are creation orders, which never go back
        assert await post_order(driver, a.layout.root) == []
        assert not (tmp_path / "blobs" / "c1").exists()
        with pytest.raises(Fenced):
            await a.close_and_cleanup_all_data()  # not the leader any more


async def test_cleanup_never_removes_a_queued_standbys_nodes(backend: Any, tmp_path: Path) -> None:
    """The wipe runs under the leader's fence and spares the queue: a standby still queued
    keeps its node and breadcrumb, and takes over (with a greater epoch) once the leader has
    left; a crashed standby's breadcrumb goes."""
    log: list[tuple[str, str]] = []
    async with process(backend, "a", blobs=tmp_path / "blobs") as (a, driver):
        comp = await join(a, "dispatcher", log, address="a:1")
        await wait_for(lambda: comp.leading)
        assert a.lease is not None
        old = a.lease.epoch
        await driver.create(f"{a.election_path}/b/crashed_x", b"left by a crashed standby")
        async with process(backend, "b") as (b, _):
            b1 = await join(b, "dispatcher", log, address="b:1")
            await anyio.sleep(0.05)
            assert not b1.leading
            queue = f"{a.election_path}/n"
            (_, b_node) = await driver.children(queue)
            await a.stores().execution_plans.put("j1", b"plan")
            await a.close_and_cleanup_all_data()
            await wait_for(lambda: b1.leading)
            assert b.lease is not None and b.lease.epoch > old
            assert await driver.children(queue) == [b_node]
            assert await driver.children(f"{a.election_path}/b") == [b_node.rsplit("_", 1)[0]]

            async def published() -> bool:
                return await driver.exists(f"{a.layout.root}/leader/dispatcher") is not None

            await _until(published)  # b publishes its own address


# --- standalone -----------------------------------------------------------------------------


async def test_standalone_mode() -> None:
    log: list[tuple[str, str]] = []
    async with services("none://?rest=http://localhost:8081", "dev") as svc:
        comp = await join(svc, "dispatcher", log, address="local:6123")
        await wait_for(lambda: comp.leading)

        async def published() -> bool:  # confirmed in grant_leadership, published just after
            info = await anext(aiter(svc.leader_retrieval("dispatcher")))
            return info == LeaderInfo("local:6123", comp.grants[0])

        await _until(published)
        fixed = await anext(aiter(svc.leader_retrieval("rest")))
        assert fixed == LeaderInfo("http://localhost:8081", uuid.UUID(int=0))
        assert svc.lease is not None
    assert comp.revokes == 1


async def test_bad_arguments() -> None:
    with pytest.raises(ConfigurationError):
        services("none://somewhere", "c1")
    with pytest.raises(ConfigurationError):
        services("nope://x", "c1")
    with pytest.raises(ConfigurationError):
        services("memory://x", "bad/id")
    async with services("none://", "c1") as svc:
        with pytest.raises(ConfigurationError):
            svc.leader_election("a/b")
        with pytest.raises(ConfigurationError):
            await svc.leader_election("x").start(object())  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="blob"):
            svc.stores()


async def test_a_failed_open_leaves_the_callers_scopes_in_order() -> None:
    # a second process of one identity with members=True is refused (DuplicateIdentity); its
    # task group was entered in the caller's task and left open, so the caller's next cancel
    # scope exited out of turn (asyncio: RuntimeError; trio: the nursery stack corrupted)
    from ha.drivers.memory import MemoryDriver
    from ha.membership.members import DuplicateIdentity

    cluster = f"dup-{uuid.uuid4()}"

    def opened() -> HAServices:
        driver = MemoryDriver(cluster, session_timeout=0.5)
        return HAServices(driver, "cl", owns_driver=True, identity="same", members=True)

    first = opened()
    async with first:
        second = opened()
        with pytest.raises(DuplicateIdentity):
            async with second:
                pass
        assert second.driver.session_id is None  # the driver it owned is closed
        with anyio.move_on_after(0.05):
            await anyio.sleep(1)  # a cancel scope of the caller's, after the failed open
        assert first.driver.connected
