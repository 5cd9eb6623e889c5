"""Scenario tests of the elector, written from the behaviour, on the memory and sqlite backends.

Every test runs under asyncio and trio. A test taking the ``net`` fixture runs on both backends
(``tests.support.harness``: memory, and sqlite with one file and one driver per elector); the others
exercise what only the memory driver can do (an instant disconnect, frozen operations) or what
does not depend on the backend. Waiting is done by polling for a condition with a generous
bound (a liveness bound, not a timing assertion).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

import anyio
import pytest

import ha
from ha.drivers.base import Stat
from ha.drivers.memory import MemoryCluster, MemoryDriver
from ha.election.history import read_history
from ha.election.names import Breadcrumb, decode_breadcrumb, encode_breadcrumb
from ha.election.nodes import ElectionNodes
from ha.errors import ConfigurationError, CorruptData, ElectionFailed
from ha.testing import History, Recorder, check_history, faults
from tests.support.harness import FAST, Net, SqliteNet, cluster, net, wait_for

__all__ = ("net",)  # the fixture

pytestmark = pytest.mark.anyio


async def test_three_electors_settle_with_one_active(net: Net) -> None:
    async with cluster(net) as c:
        for name in "abc":
            await c.add(name)
        await wait_for(c.settled)
        [leader] = c.active()
        assert leader.elector.lease is not None
        assert leader.elector.lease.epoch == await _created(c, leader.elector.lease.node)
        # the queue, in the order the three would lead
        queue = await leader.elector.contenders()
        assert queue[0] == leader.elector.identity and sorted(queue) == [b"a", b"b", b"c"]
        assert [n.rec.leases for n in c.nodes if n is not leader] == [[], []]


async def test_graceful_quit_hands_over_without_fencing(net: Net) -> None:
    async with cluster(net) as c:
        for name in "abc":
            await c.add(name)
        await wait_for(c.settled)
        [old] = c.active()
        assert old.elector.lease is not None
        epoch = old.elector.lease.epoch
        successor = (await old.elector.contenders())[1]
        old.elector.quit()
        await old.done.wait()
        await wait_for(lambda: len(c.active()) == 1)
        [new] = c.active()
        assert new.elector.identity == successor  # FIFO: the next in the queue
        assert new is not old and new.elector.lease and new.elector.lease.epoch > epoch
        assert not [e for e in c.history.events if e.kind == "fence"]


async def test_quit_with_fence_makes_the_next_active_fence(net: Net) -> None:
    async with cluster(net) as c:
        a = await c.add("a")
        await wait_for(c.settled)
        b = await c.add("b")
        await wait_for(lambda: b.state is ha.State.STANDBY)
        assert a.elector.lease is not None
        epoch = a.elector.lease.epoch
        a.elector.quit(need_fence=True)
        await wait_for(lambda: b.state is ha.State.ACTIVE)
        [fence] = [e for e in c.history.events if e.kind == "fence"]
        assert fence.identity == "b" and fence.detail["old"] == "a" and fence.epoch == epoch


async def test_crashed_active_is_fenced_and_replaced(net: Net) -> None:
    async with cluster(net) as c:
        a = await c.add("a")
        await wait_for(c.settled)
        b = await c.add("b")
        await wait_for(lambda: b.state is ha.State.STANDBY)
        await c.crash(a)
        await wait_for(lambda: b.state is ha.State.ACTIVE)
        assert any(e.kind == "fence" and e.detail["old"] == "a" for e in c.history.events)


async def test_a_takeover_starts_the_work_before_clearing_the_fenced_breadcrumbs(
    net: Net, monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    # clearing is a request to the backend; the work need not wait for it to be even sent
    if anyio_backend == "trio":
        pytest.skip(
            "trio shuffles the tasks made runnable together, so after the elector's checkpoint"
            " the new term's task runs first only some of the time (a speed-up, not a rule)"
        )
    async with cluster(net) as c:
        clear = ElectionNodes.clear

        crashed = False

        async def noted_clear(self: ElectionNodes, *args: object, **kwargs: object) -> bool:
            if crashed:  # the takeover's, not a first leader's clearing of strays
                c.history.add("?", "clear")
            return await clear(self, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(ElectionNodes, "clear", noted_clear)
        a = await c.add("a")
        await wait_for(c.settled)
        b = await c.add("b")
        await wait_for(lambda: b.state is ha.State.STANDBY)
        crashed = True
        await c.crash(a)
        await wait_for(lambda: b.state is ha.State.ACTIVE)
        await wait_for(lambda: any(e.kind == "clear" for e in c.history.events))
        kinds = [e.kind for e in c.history.events if e.identity in ("b", "?")]
        assert kinds.index("start") < kinds.index("clear")


async def test_cut_off_active_stops_before_the_standby_starts(net: Net) -> None:
    """memory: a silent partition; sqlite: the active's file access hangs (no error at all)."""
    async with cluster(net) as c:
        a = await c.add("a")
        await wait_for(c.settled)
        b = await c.add("b")
        await wait_for(lambda: b.state is ha.State.STANDBY)
        await c.fault("cut_off", a)
        await wait_for(lambda: bool(b.rec.leases))  # become_active was called
        stop_a = [e for e in c.history.events if e.kind == "stop" and e.identity == "a"]
        start_b = [e for e in c.history.events if e.kind == "start" and e.identity == "b"]
        assert stop_a and start_b and stop_a[0].t < start_b[0].t
        await c.fault("restore", a)
        await wait_for(lambda: a.state is ha.State.STANDBY)


async def test_hold_policy_rides_out_a_short_disconnect() -> None:
    hold = ha.Timing(hold_on_disconnect=True, backoff=FAST.backoff)
    async with cluster() as c:
        a = await c.add("a", timing=hold, session_timeout=2.0)
        await wait_for(c.settled)
        lease = a.elector.lease
        faults(a.driver).disconnect()
        await anyio.sleep(0.05)
        assert a.state is ha.State.ACTIVE and lease is not None and lease.valid
        faults(a.driver).reconnect()
        await wait_for(lambda: a.elector._machine.phase.value == "active")
        assert a.elector.lease is lease and lease.valid
        assert [e.kind for e in c.history.events if e.kind in ("start", "stop")] == ["start"]


async def test_default_policy_stops_at_once_on_disconnect() -> None:
    async with cluster() as c:
        a = await c.add("a", session_timeout=2.0)
        await wait_for(c.settled)
        lease = a.elector.lease
        assert lease is not None
        faults(a.driver).disconnect()
        await wait_for(lambda: a.state is ha.State.NEUTRAL)
        assert not lease.valid
        assert [e.kind for e in c.history.events if e.kind in ("start", "stop")] == [
            "start",
            "stop",
        ]
        faults(a.driver).reconnect()
        await wait_for(lambda: a.state is ha.State.ACTIVE)
        # a new term, under the same token: the same session kept its queue node
        assert a.elector.lease is not None and a.elector.lease is not lease
        assert a.elector.lease.epoch == lease.epoch and a.elector.lease.valid


async def test_session_expiry_of_the_active_fences_it(net: Net) -> None:
    async with cluster(net) as c:
        a = await c.add("a")
        await wait_for(c.settled)
        b = await c.add("b")
        await wait_for(lambda: b.state is ha.State.STANDBY)
        assert a.elector.lease is not None
        epoch = a.elector.lease.epoch
        seen: list[ha.State] = []
        async with a.elector.transitions() as stream:
            await c.expire(a)
            # a new epoch begins; on sqlite a itself may win it (it sees its loss first)
            await wait_for(
                lambda: any(n.rec.leases[-1:] and n.rec.leases[-1].epoch > epoch for n in c.nodes)
            )
            while len(seen) < 2:
                seen.append((await stream.receive()).new)
        assert seen[0] is ha.State.FENCED


async def test_failing_become_active_lets_another_take_over(net: Net) -> None:
    async with cluster(net) as c:
        a = await c.add("a")
        a.rec.fail_active = 100
        await wait_for(lambda: bool(a.rec.leases))
        b = await c.add("b")
        await wait_for(lambda: b.state is ha.State.ACTIVE)


async def test_refused_fencing_blocks_the_takeover_until_it_succeeds(net: Net) -> None:
    async with cluster(net) as c:
        a = await c.add("a")
        await wait_for(c.settled)
        b = await c.add("b")
        await wait_for(lambda: b.state is ha.State.STANDBY)
        assert a.elector.lease is not None
        epoch = a.elector.lease.epoch
        b.rec.refuse_fence = 2
        await c.crash(a)
        await wait_for(lambda: bool(b.rec.leases))
        fences = [e for e in c.history.events if e.kind == "fence"]
        assert len(fences) == 3 and b.rec.leases[0].epoch > epoch
        assert {f.epoch for f in fences} == {epoch}


async def test_hanging_hooks_are_bounded(net: Net) -> None:
    async with cluster(net) as c:
        a = await c.add("a")
        await wait_for(c.settled)
        b = await c.add("b")
        b.rec.hang_hooks = True
        await wait_for(lambda: b.state is ha.State.STANDBY)
        a.elector.quit()
        await wait_for(lambda: b.state is ha.State.ACTIVE)


async def test_corrupt_breadcrumb_is_handed_to_fencing_as_is(net: Net) -> None:
    """A breadcrumb left with no node (a crash) is fenced even when nobody can read it."""
    raw = b"\x00\xff not a breadcrumb"
    async with cluster(net) as c:
        async with c.probe() as seed:
            await seed.create("/svc/b/x_1", raw, makepath=True)
        await c.add("a")
        await wait_for(c.settled)
        [fence] = [e for e in c.history.events if e.kind == "fence"]
        assert bytes.fromhex(fence.detail["raw"]) == raw and fence.detail["old"] is None
        async with c.probe() as probe:  # fenced, then cleared
            await wait_for_async(lambda: probe.exists("/svc/b/x_1"), None)


async def test_foreign_names_in_the_queue_are_ignored(net: Net) -> None:
    async with cluster(net) as c:
        async with c.probe() as seed:
            await seed.create("/svc/n/not-a-queue-node", b"?", makepath=True)
        a = await c.add("a")
        await wait_for(lambda: a.state is ha.State.ACTIVE)


async def test_foreign_queue_node_ahead_makes_standby(net: Net) -> None:
    """A node no contender of ours made, first in the queue, leads as far as we can tell."""
    async with cluster(net) as c:
        seed = await c.stack.enter_async_context(c.probe())
        await seed.create("/svc/n/zz_1_0000000000", b"\xfe\xfeforeign", makepath=True)
        a = await c.add("a")
        await wait_for(lambda: a.state is ha.State.STANDBY)
        await seed.delete("/svc/n/zz_1_0000000000")
        await wait_for(lambda: a.state is ha.State.ACTIVE)
        assert not [e for e in c.history.events if e.kind == "fence"]  # it had no breadcrumb


async def test_transient_faults_are_retried(net: Net) -> None:
    async with cluster(net) as c:
        a = await c.add("a")
        c.fail_next(a, 3)
        await wait_for(lambda: a.state is ha.State.ACTIVE)


async def test_fatal_driver_error_calls_on_fatal_error(net: Net) -> None:
    called: list[Exception] = []

    class Fatalist(Recorder):
        async def on_fatal_error(self, error: Exception) -> None:
            called.append(error)

    async with cluster(net) as c:
        driver = c.probe()
        async with driver:
            net.fail_next(driver, 1, False)
            elector = ha.Elector(driver, "/svc", "a", timing=FAST)
            with pytest.raises(ElectionFailed, match="injected fatal fault"):
                await elector.run(Fatalist("a", c.history))
        assert len(called) == 1


async def test_epoch_superseded_report_fences_the_active(net: Net) -> None:
    async with cluster(net) as c:
        a = await c.add("a")
        await wait_for(c.settled)
        lease = a.elector.lease
        assert lease is not None
        lease.report_fenced()
        # it may be FENCED and ACTIVE again quicker than a poll: wait for the new lease
        await wait_for(lambda: a.elector.lease not in (None, lease))
        assert not lease.valid
        # FENCED left the queue: the next term is a new node, a greater token
        assert a.elector.lease is not None and a.elector.lease.epoch > lease.epoch
        assert ("active", "fenced") in [
            (e.detail["old"], e.detail["new"]) for e in c.history.events if e.kind == "transition"
        ]


async def test_fenced_writes_fail_after_a_new_epoch(net: Net) -> None:
    async with cluster(net) as c:
        a = await c.add("a")
        await wait_for(c.settled)
        old = a.elector.lease
        assert old is not None
        ops = old.fence_ops() + [ha.drivers.base.Create("/svc/out", b"1")]
        await a.driver.transaction(ops)
        b = await c.add("b")
        await wait_for(lambda: b.state is ha.State.STANDBY)
        await c.crash(a)
        await wait_for(lambda: b.state is ha.State.ACTIVE)
        with pytest.raises(ha.errors.TransactionFailed) as info:
            await b.driver.transaction(old.fence_ops() + [ha.drivers.base.Create("/svc/x")])
        assert info.value.index == 0


async def test_breadcrumb_carries_identity_and_data_and_the_node_the_token(net: Net) -> None:
    async with cluster(net) as c:
        a = await c.add("a", data=b"http://a:8080")
        await wait_for(c.settled)
        lease = a.elector.lease
        assert lease is not None
        async with c.probe() as probe:
            [ticket] = await probe.children("/svc/b")
            raw, crumb_stat = await probe.get(f"/svc/b/{ticket}")
            assert decode_breadcrumb(raw) == Breadcrumb(b"a", None, b"http://a:8080")
            holder, stat = await probe.get(lease.node)
            assert holder == b"a" and stat.ephemeral_owner == lease.session_id
            # made by one transaction: one creation order, the token
            assert stat.created == crumb_stat.created == lease.epoch
            assert lease.node.startswith(f"/svc/n/{ticket}_")


async def test_journal_and_task_group_start(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    name = f"journal-{uuid.uuid4().hex}"  # a cluster of its own (ids of dead objects recur)
    async with MemoryDriver(name) as driver, anyio.create_task_group() as tg:
        elector = ha.Elector(driver, "/svc", b"a", journal=str(path), timing=FAST)
        rec = Recorder("a", History())
        started = await tg.start(elector.run, rec)
        assert started is elector
        await wait_for(lambda: elector.state is ha.State.ACTIVE)
        elector.quit()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["from"], r["to"]) for r in records] == [
        ("neutral", "active"),
        ("active", "neutral"),
    ]
    assert records[0]["epoch"] == rec.leases[0].epoch and records[0]["identity"] == "a"
    assert elector.statistics().transitions == {"active->neutral": 1, "neutral->active": 1}
    MemoryCluster.drop(name)


async def test_bad_input_is_refused_at_construction() -> None:
    async with MemoryDriver("bad-input") as driver:
        with pytest.raises(ConfigurationError, match="identity"):
            ha.Elector(driver, "/svc", b"")
        with pytest.raises(ConfigurationError, match="absolute"):
            ha.Elector(driver, "svc", b"a")
        with pytest.raises(ConfigurationError, match="deadline_ratio"):
            ha.Timing(deadline_ratio=1.5)
        elector = ha.Elector(driver, "/svc", b"a")
        with pytest.raises(ConfigurationError, match="become_active"):
            await elector.run(object())
    with pytest.raises(ConfigurationError, match="known schemes: memory, sqlite, zk"):
        ha.connect("ftp://x")
    with pytest.raises(ConfigurationError, match="not a backend URL"):
        ha.connect("localhost:2181")
    assert encode_breadcrumb(Breadcrumb(b"a", 1))  # the codec is importable from ha.election.nodes
    assert CorruptData("/p", "r").path == "/p"


async def test_quit_before_run_and_run_after_quit() -> None:
    async with MemoryDriver("quit-early") as driver:
        elector = ha.Elector(driver, "/svc", b"a", timing=FAST)
        elector.quit()
        with anyio.fail_after(5):
            await elector.run(Recorder("a", History()))
        assert elector.state is ha.State.NEUTRAL
        with pytest.raises(RuntimeError, match="finished"):
            await elector.run(Recorder("a", History()))


async def test_recursive_delete_of_nested_nodes() -> None:
    async with MemoryDriver("nested") as driver:
        await driver.create("/a/b/c", b"x", makepath=True)
        await driver.delete("/a", recursive=True)
        assert await driver.exists("/a") is None and await driver.exists("/a/b/c") is None


async def test_electors_sharing_a_session_in_one_election(net: Net) -> None:
    """The lock is ours only if our session made it and it names us."""
    async with net.driver() as driver, anyio.create_task_group() as tg:
        history = History()
        electors = [ha.Elector(driver, "/svc", f"e{i}", timing=FAST) for i in range(3)]
        for e in electors:
            e.add_listener(history.transition)
            await tg.start(e.run, Recorder(e.identity.decode(), history))
        await wait_for(
            lambda: sorted(e.state.value for e in electors) == ["active", "standby", "standby"]
        )
        [leader] = [e for e in electors if e.state is ha.State.ACTIVE]
        leader.quit()
        await wait_for(lambda: sum(e.state is ha.State.ACTIVE for e in electors) == 1)
        for e in electors:
            e.quit()
    check_history(history)


async def test_a_driver_cut_off_before_the_elector_starts() -> None:
    """The elector catches up with a driver that lost contact before run() subscribed."""
    async with cluster() as c:
        a = await c.add("a")
        faults(a.driver).disconnect()  # before the elector's task has run at all
        await anyio.sleep(0.05)
        faults(a.driver).reconnect()
        await wait_for(lambda: a.state is ha.State.ACTIVE)


async def test_an_elector_cancelled_while_active_stops_reporting_active() -> None:
    name = f"cancelled-{uuid.uuid4().hex}"
    async with MemoryDriver(name) as driver, anyio.create_task_group() as tg:
        elector = ha.Elector(driver, "/svc", "a", timing=FAST)
        scope, done = anyio.CancelScope(), anyio.Event()

        async def run() -> None:
            with scope:
                await elector.run(Recorder("a", History()))
            done.set()

        tg.start_soon(run)
        await wait_for(lambda: elector.lease is not None)
        lease = elector.lease
        assert lease is not None
        scope.cancel()
        await done.wait()
        assert not lease.valid  # the work was stopped
        # ... and the elector says so
        assert (elector.state, elector.lease) == (ha.State.NEUTRAL, None)
    MemoryCluster.drop(name)


class LateReads(MemoryDriver):
    """A driver whose answer to a read can arrive after the event of a change made just after
    the read, as on sqlite: reads run in a worker thread, events come from the poller."""

    def __init__(self, cluster: str, session_timeout: float) -> None:
        super().__init__(cluster, session_timeout=session_timeout)
        self.after_read: tuple[str, MemoryDriver] | None = None  # deletes a node after a read

    async def exists(self, path: str) -> Stat | None:
        answer = await super().exists(path)
        if self.after_read is not None and path == self.after_read[0]:
            (_, other), self.after_read = self.after_read, None
            await other.delete(path)  # its owner's session ends: we get DELETED now
        return answer


async def test_a_leader_deleted_while_its_node_is_being_read_is_not_missed() -> None:
    name = f"late-reads-{uuid.uuid4().hex}"
    try:
        async with MemoryDriver(name) as holder, anyio.create_task_group() as tg:
            await holder.create("/svc/n/h_1_0000000000", b"h", ephemeral=True, makepath=True)
            async with LateReads(name, session_timeout=2.0) as driver:
                driver.after_read = ("/svc/n/h_1_0000000000", holder)
                elector = ha.Elector(driver, "/svc", "a", timing=FAST)
                await tg.start(elector.run, Recorder("a", History()))
                # the leader is gone: nothing stands between a and leadership
                await wait_for(lambda: elector.state is ha.State.ACTIVE, within=3.0)
                elector.quit()
    finally:
        MemoryCluster.drop(name)


# --- sqlite only: the kernel lock and the database's write lock ---------------------------------


def _lease_end(net: SqliteNet, sid: int) -> float:
    """The session's expires_at (CLOCK_MONOTONIC, as time.monotonic()) in the database."""
    conn = sqlite3.connect(net.file, timeout=5.0)
    try:
        row = conn.execute("SELECT expires_at FROM sessions WHERE id = ?", (sid,)).fetchone()
    finally:
        conn.close()
    assert row is not None, f"session {sid} is not in the table"
    return float(row[0])


async def test_sqlite_crash_is_seen_through_the_kernel_lock_before_the_lease_ends(
    tmp_path: Path,
) -> None:
    """The crash hook frees the session's kernel lock and leaves the session row, as a killed
    process does: a standby takes over long before the lease could have run out."""
    net = SqliteNet(tmp_path)
    async with cluster(net) as c:
        a = await c.add("a", session_timeout=6.0)
        await wait_for(c.settled)
        b = await c.add("b", session_timeout=6.0)
        await wait_for(lambda: b.state is ha.State.STANDBY)
        sid = a.driver.session_id
        assert sid is not None
        # read before the crash: once the kernel lock is free, b's next poll may reap the
        # row at once (a renewal since would only move the end later)
        expires = _lease_end(net, sid)
        await c.crash(a)
        await wait_for(lambda: bool(b.rec.leases))
        [started] = [e for e in c.history.events if e.kind == "start" and e.identity == "b"]
        assert started.t < expires


async def test_sqlite_write_lock_held_elsewhere_stops_the_active_until_released(
    tmp_path: Path,
) -> None:
    """Another connection holding the write lock: renewals fail as busy, the active stops
    (disconnected, or its local deadline), and one is active again once it is released."""
    net = SqliteNet(tmp_path)
    async with cluster(net) as c:
        a = await c.add("a")
        await wait_for(c.settled)
        b = await c.add("b")
        await wait_for(lambda: b.state is ha.State.STANDBY)
        lease = a.elector.lease
        assert lease is not None
        await c.fault("stall", a)
        await wait_for(lambda: not lease.valid and a.state is not ha.State.ACTIVE)
        assert c.active() == []  # nobody can win while nobody can write
        await c.fault("unstall", a)
        await wait_for(c.settled)
        [leader] = c.active()
        assert leader.elector.lease is not None
        # a new leader has a greater token; a, if its session lived, keeps its node and token
        if leader is a:
            assert leader.elector.lease.epoch >= lease.epoch
        else:
            assert leader.elector.lease.epoch > lease.epoch


class _TaskGroupContender(Recorder):
    """Its work runs in a task group whose child fails while being cancelled."""

    async def become_active(self, lease: ha.Lease) -> None:
        self.leases.append(lease)

        async def child() -> None:
            try:
                await anyio.sleep_forever()
            finally:
                raise ValueError("cleanup failed")

        async with anyio.create_task_group() as tg:
            tg.start_soon(child)
            await anyio.sleep_forever()


async def _created(c: object, path: str) -> int:
    async with c.probe() as probe:  # type: ignore[attr-defined]
        stat = await probe.exists(path)
    assert stat is not None
    return stat.created


async def wait_for_async(read: object, expected: object, within: float = 5.0) -> None:
    """Poll the coroutine function ``read`` until it returns ``expected``."""
    with anyio.fail_after(within):
        while await read() != expected:  # type: ignore[operator]
            await anyio.sleep(0.01)


async def test_a_group_of_cancellation_and_error_from_become_active() -> None:
    async with MemoryDriver("tg-contender") as driver:
        elector = ha.Elector(driver, "/svc", b"a", timing=FAST)
        contender = _TaskGroupContender("a", History())
        async with anyio.create_task_group() as tg:
            await tg.start(elector.run, contender)
            await wait_for(lambda: bool(contender.leases))
            elector.quit()  # cancels the work: its child raises while cancelled
        assert elector.state is ha.State.NEUTRAL


async def test_a_leader_listed_alone_writes_no_announce_and_records_its_term(net: Net) -> None:
    """P4: the listing that made it lead showed nobody behind it, so its node is not written
    again (one write fewer per new election, issue 12); its term is still in the history.
    A contender joining later finds it first, stands by, and follows it on a graceful quit."""
    async with cluster(net) as c:
        a = await c.add("a")
        await wait_for(c.settled)
        lease = a.elector.lease
        assert lease is not None
        async with c.probe() as probe:
            stat = await probe.exists(lease.node)
            assert stat is not None and stat.version == 0  # created, never written since

            async def epochs() -> list[int]:
                found = await read_history(probe, a.elector.nodes)
                return [] if found is None else [t.epoch for t in found[0].terms]

            await wait_for_async(epochs, [lease.epoch])
        b = await c.add("b")
        await wait_for(lambda: c.settled() and b.state is ha.State.STANDBY)
        a.elector.quit()
        await a.done.wait()
        await wait_for(lambda: b.state is ha.State.ACTIVE)
        assert not [e for e in c.history.events if e.kind == "fence"]
