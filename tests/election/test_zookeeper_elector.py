"""Elector scenarios on real ZooKeeper, each one a failure a ZooKeeper user fears.

Every elector talks to the server through its own fault-proxy link, so one of them can be cut
off, blipped or "crashed" (its link refused, its process gone) without touching the others.
Every test runs under asyncio and trio and ends with ``check_history`` (the safety properties
of ARCHITECTURE.md) on what the contenders recorded. Waits are liveness bounds, not timings.
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, TypeVar

import anyio
import anyio.abc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ha
from ha.drivers.base import ConnectionState
from ha.drivers.zookeeper import ZooKeeperDriver
from ha.errors import ElectionFailed
from ha.testing import History, Recorder, check_history, faults
from tests.support.backends.zookeeper import (
    ZooKeeperBackend,
    ZooKeeperEnsemble,
    ZooKeeperNet,
    ZooKeeperServer,
    expire_session,
)
from tests.support.faultproxy import FaultProxy, Link

pytestmark = pytest.mark.timeout(90)
T = TypeVar("T")

SESSION = 1.0  # seconds: short, so that expiry scenarios stay short
FAST = ha.Timing(backoff=ha.Backoff(initial=0.005, maximum=0.05), hook_timeout=0.5)


def live(test: T) -> T:
    return pytest.mark.anyio(pytest.mark.zookeeper(test))  # type: ignore[no-any-return]


async def wait_for(cond: Callable[[], bool], within: float = 20.0) -> None:
    with anyio.fail_after(within):
        while not cond():  # noqa: ASYNC110 - polls state owned by other tasks
            await anyio.sleep(0.01)


class Node:
    def __init__(
        self, name: str, driver: ZooKeeperDriver, link: Link, elector: ha.Elector, rec: Recorder
    ) -> None:
        self.name, self.driver, self.link, self.elector, self.rec = name, driver, link, elector, rec
        self.scope = anyio.CancelScope()
        self.error: BaseException | None = None
        self.done = anyio.Event()
        self.left = False  # told to quit, or crashed (its elector may still be winding down)

    @property
    def state(self) -> ha.State:
        return self.elector.state

    @property
    def gone(self) -> bool:
        return self.left or self.done.is_set()


class Cluster:
    """Electors on one ZooKeeper election, each behind its own proxy link."""

    def __init__(
        self,
        tg: anyio.abc.TaskGroup,
        stack: AsyncExitStack,
        backend: ZooKeeperBackend,
        proxy: FaultProxy,
        upstream: ZooKeeperServer,
    ) -> None:
        self.tg, self.stack, self.backend, self.proxy = tg, stack, backend, proxy
        self.upstream = upstream
        self.path = f"/svc-{uuid.uuid4().hex[:8]}"
        self.history = History()
        self.nodes: list[Node] = []

    async def add(self, name: str, timing: ha.Timing = FAST, **options: Any) -> Node:
        link = self.proxy.link(("127.0.0.1", self.upstream.port))
        options.setdefault("session_timeout", SESSION)
        driver = self.backend.driver(via=link.hosts, **options)
        elector = ha.Elector(driver, self.path, name, timing=timing)
        rec = Recorder(name, self.history)
        node = Node(name, driver, link, elector, rec)
        elector.add_listener(self.history.transition)

        async def run(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            # the node's own task owns its driver, which closes when the elector is done, as
            # when a process exits (after a crash the link is refused: no goodbye arrives)
            try:
                async with driver:
                    task_status.started()
                    with node.scope:
                        try:
                            await elector.run(rec)
                        except Exception as exc:
                            node.error = exc
            finally:
                node.done.set()

        await self.tg.start(run)
        self.nodes.append(node)
        return node

    def active(self) -> list[Node]:
        # a crashed node's elector keeps saying ACTIVE (its run was cancelled): not counted
        return [n for n in self.nodes if n.state is ha.State.ACTIVE and not n.gone]

    def settled(self) -> bool:
        live = [n for n in self.nodes if not n.gone]
        return len(self.active()) == 1 and all(
            n.state in (ha.State.ACTIVE, ha.State.STANDBY) for n in live
        )

    def crash(self, node: Node) -> None:
        """The node's process dies: no goodbye to the server, its session times out."""
        self.history.add(node.name, "crash")
        node.left = True
        node.link.refuse()
        node.scope.cancel()

    def quit(self, node: Node, need_fence: bool = False) -> None:
        node.left = True
        if not need_fence:  # for check_history: a term stopped before resigns too
            self.history.add(node.name, "quit")
        node.elector.quit(need_fence)

    async def expire(self, node: Node) -> None:
        self.history.add(node.name, "expire")
        await expire_session(node.driver, hosts=self.upstream.hosts)

    def events(self, kind: str, identity: str | None = None) -> list[Any]:
        return [
            e
            for e in self.history.events
            if e.kind == kind and (identity is None or e.identity == identity)
        ]


@asynccontextmanager
async def cluster(
    backend: ZooKeeperBackend, proxy: FaultProxy, upstream: ZooKeeperServer | None = None
) -> AsyncIterator[Cluster]:
    # the drivers are closed (stack) before the task group ends: proper nesting
    async with anyio.create_task_group() as tg, AsyncExitStack() as stack:
        c = Cluster(tg, stack, backend, proxy, upstream or backend.server)
        try:
            yield c
        finally:
            for n in c.nodes:
                if not n.gone:
                    c.quit(n)
            with anyio.move_on_after(5):
                for n in c.nodes:
                    await n.done.wait()
            tg.cancel_scope.cancel()
    check_history(c.history)


@pytest.fixture
def proxy() -> Any:
    with FaultProxy() as proxy:
        yield proxy


# --- scenarios --------------------------------------------------------------------------------


@live
async def test_two_then_three_electors_settle_with_one_active(
    zookeeper_backend: ZooKeeperBackend, proxy: FaultProxy
) -> None:
    async with cluster(zookeeper_backend, proxy) as c:
        await c.add("a")
        await c.add("b")
        await wait_for(c.settled)
        await c.add("c")
        await wait_for(lambda: c.settled() and c.nodes[2].state is ha.State.STANDBY)
        [leader] = c.active()
        lease = leader.elector.lease
        assert lease is not None
        async with ZooKeeperDriver.from_url(zookeeper_backend.url()) as probe:
            stat = await probe.exists(lease.node)
            assert stat is not None and stat.ephemeral_owner == leader.driver.session_id
            assert stat.created == lease.epoch  # the token: the node's czxid
            # FIFO: the queue lists the contenders in the order they joined
            queue = await leader.elector.contenders()
            assert sorted(queue[:2]) == [b"a", b"b"] and queue[2] == b"c"


@live
async def test_expired_active_is_fenced_by_the_standby(
    zookeeper_backend: ZooKeeperBackend, proxy: FaultProxy
) -> None:
    async with cluster(zookeeper_backend, proxy) as c:
        a = await c.add("a")
        await wait_for(c.settled)
        b = await c.add("b")
        await wait_for(lambda: b.state is ha.State.STANDBY)
        assert a.elector.lease is not None
        epoch = a.elector.lease.epoch
        async with a.elector.transitions() as stream:
            await c.expire(a)
            await wait_for(lambda: b.state is ha.State.ACTIVE)
            first = await stream.receive()
        # ZooKeeper first drops the connection of a session taken over (DISCONNECTED), then
        # reports it expired: a leaves ACTIVE on the first of the two
        assert first.old is ha.State.ACTIVE and first.new in (ha.State.NEUTRAL, ha.State.FENCED)
        [fence] = c.events("fence", "b")
        assert fence.detail["old"] == "a" and fence.epoch == epoch
        assert b.elector.lease is not None and b.elector.lease.epoch > epoch
        await wait_for(lambda: a.state is ha.State.STANDBY)


@live
async def test_graceful_quit_hands_over_without_fencing(
    zookeeper_backend: ZooKeeperBackend, proxy: FaultProxy
) -> None:
    async with cluster(zookeeper_backend, proxy) as c:
        for name in "abc":
            await c.add(name)
        await wait_for(c.settled)
        [old] = c.active()
        assert old.elector.lease is not None
        epoch = old.elector.lease.epoch
        old.elector.quit()
        await old.done.wait()
        await wait_for(lambda: len(c.active()) == 1)
        [new] = c.active()
        assert new is not old and new.elector.lease and new.elector.lease.epoch > epoch
        assert c.events("fence") == []


async def lost_contact(a: Node) -> None:
    """a's connection drops, held down until ``faults(a.driver).reconnect()``: its term stops."""
    faults(a.driver).disconnect()
    await wait_for(lambda: a.state is ha.State.NEUTRAL)


async def resign_unanswered(a: Node) -> None:
    """a's next requests fail as if their replies were lost (its resign among them)."""
    faults(a.driver).fail_next(2)


@live
@pytest.mark.parametrize("fault", [resign_unanswered, lost_contact])
async def test_a_clean_quit_leaves_nothing_to_fence_after_a_lost_contact(
    zookeeper_backend: ZooKeeperBackend, proxy: FaultProxy, fault: Callable[[Node], Any]
) -> None:
    """Issue 26, item 9: a leader's connection breaks around its clean quit. Its resign is
    sent again (as a resign) once there is contact, so nothing of it is left under the path
    and the next leader fences nobody (``ha run --fence`` would shoot a healthy host)."""
    async with cluster(zookeeper_backend, proxy) as c:
        a = await c.add("a", session_timeout=2.0)  # contact comes back well within it
        await wait_for(c.settled)
        await fault(a)
        c.quit(a)
        faults(a.driver).reconnect()  # (no-op unless held down)
        await a.done.wait()
        assert a.error is None
        async with ZooKeeperDriver.from_url(zookeeper_backend.url()) as probe:
            left = [await probe.children(f"{c.path}/{folder}") for folder in "nb"]
        assert left == [[], []]  # neither a's node nor its breadcrumb
        b = await c.add("b")
        await wait_for(lambda: b.state is ha.State.ACTIVE)
        assert c.events("fence") == []


RESET_TRIALS = int(os.environ.get("HA_ZK_RESET_TRIALS", "40"))


async def quit_beside_a_reset(
    backend: ZooKeeperBackend, proxy: FaultProxy, delay: float
) -> list[Any]:
    """One contender whose connection is reset ``delay`` after it starts, quitting as soon
    as it leads; what is left under the path after its clean quit."""
    async with cluster(backend, proxy) as c, anyio.create_task_group() as tg:
        a = await c.add("a")

        async def reset() -> None:
            await anyio.sleep(delay)
            a.link.drop()

        tg.start_soon(reset)
        await wait_for(lambda: a.state is ha.State.ACTIVE)
        c.quit(a)
        await a.done.wait()
        async with ZooKeeperDriver.from_url(backend.url()) as probe:
            return [await probe.children(f"{c.path}/{folder}") for folder in "nb"]


@live
@pytest.mark.slow
async def test_clean_quits_with_a_reset_around_them_leave_nothing(
    zookeeper_backend: ZooKeeperBackend, proxy: FaultProxy
) -> None:
    """Issue 26, item 9, as it was found: the reset falls 0-40 ms after the start (on the
    join, the win or the quit); after each clean quit nothing of the quitter is left."""
    rng = random.Random(26)
    left = []
    for delay in (rng.uniform(0, 0.04) for _ in range(RESET_TRIALS)):
        names = await quit_beside_a_reset(zookeeper_backend, proxy, delay)
        if names != [[], []]:
            left.append((round(delay, 4), names))
    assert left == [], f"{len(left)} of {RESET_TRIALS} clean quits left {left}"


@live
async def test_cut_off_active_stops_before_the_standby_starts(
    zookeeper_backend: ZooKeeperBackend, proxy: FaultProxy
) -> None:
    async with cluster(zookeeper_backend, proxy) as c:
        a = await c.add("a")
        await wait_for(c.settled)
        b = await c.add("b")
        await wait_for(lambda: b.state is ha.State.STANDBY)
        a.link.pause()  # a frozen network: a hears nothing, its session runs out
        await wait_for(lambda: bool(c.events("start", "b")))
        [stop_a] = c.events("stop", "a")
        [start_b] = c.events("start", "b")
        assert stop_a.t < start_b.t
        assert any(f.detail["old"] == "a" for f in c.events("fence", "b"))
        a.link.resume()
        await wait_for(lambda: a.state is ha.State.STANDBY)


@live
async def test_short_blip_with_the_hold_policy_keeps_the_active(
    zookeeper_backend: ZooKeeperBackend, proxy: FaultProxy
) -> None:
    hold = ha.Timing(hold_on_disconnect=True, backoff=FAST.backoff, hook_timeout=0.5)
    async with cluster(zookeeper_backend, proxy) as c:
        a = await c.add("a", timing=hold, session_timeout=2.0)
        await wait_for(c.settled)
        b = await c.add("b", session_timeout=2.0)
        await wait_for(lambda: b.state is ha.State.STANDBY)
        lease = a.elector.lease
        session = a.driver.session_id
        disconnected = anyio.Event()
        a.driver.subscribe(
            None, lambda e: e.state is ConnectionState.DISCONNECTED and disconnected.set()
        )
        a.link.drop()  # the connection breaks; kazoo reconnects within the session
        await disconnected.wait()
        await wait_for(lambda: a.driver.connected)
        await wait_for(lambda: a.elector._machine.phase.value == "active")
        assert a.driver.session_id == session
        assert a.elector.lease is lease and lease is not None and lease.valid
        assert [e.kind for e in c.history.events if e.kind in ("start", "stop")] == ["start"]
        assert b.state is ha.State.STANDBY


@live
async def test_server_restart_leaves_one_active(
    zookeeper_server_factory: Any, proxy: FaultProxy
) -> None:
    server: ZooKeeperServer = zookeeper_server_factory()
    backend = ZooKeeperBackend(server)
    async with cluster(backend, proxy) as c:
        for name in "ab":
            await c.add(name, session_timeout=2.0)
        await wait_for(c.settled)
        server.stop()
        await wait_for(lambda: not any(n.driver.connected for n in c.nodes))
        server.start()
        await wait_for(lambda: all(n.driver.connected for n in c.nodes))
        await wait_for(c.settled)


@live
@pytest.mark.timeout(120)
async def test_election_continues_when_an_ensemble_member_dies(
    zookeeper_ensemble: ZooKeeperEnsemble,
) -> None:
    chroot = f"/ens-{uuid.uuid4().hex[:8]}"
    history = History()
    # the drivers (stack) close before the task group ends: proper nesting
    async with anyio.create_task_group() as tg, AsyncExitStack() as stack:
        electors, finished = [], []
        for name in "abc":
            driver = ZooKeeperDriver.from_url(zookeeper_ensemble.url(chroot), session_timeout=4.0)
            await stack.enter_async_context(driver)
            elector = ha.Elector(driver, "/svc", name, timing=FAST)
            elector.add_listener(history.transition)
            done = anyio.Event()

            async def run(elector: ha.Elector = elector, done: anyio.Event = done) -> None:
                try:
                    await elector.run(Recorder(elector.identity.decode(), history))
                finally:
                    done.set()

            tg.start_soon(run)
            electors.append(elector)
            finished.append(done)

        def actives() -> list[ha.Elector]:
            return [e for e in electors if e.state is ha.State.ACTIVE]

        await wait_for(lambda: len(actives()) == 1)
        leader = next(i for i in range(3) if zookeeper_ensemble.mode(i) == "leader")
        zookeeper_ensemble.stop(leader)  # the ensemble's own leader: it elects another
        [first] = actives()
        assert first.lease is not None
        epoch = first.lease.epoch
        first.quit()
        await wait_for(lambda: len(actives()) == 1 and actives()[0] is not first, within=40)
        lease = actives()[0].lease
        assert lease is not None and lease.epoch > epoch
        for e in electors:
            e.quit()
        with anyio.fail_after(20):
            for done in finished:
                await done.wait()
    check_history(history)


@live
async def test_foreign_queue_node_means_standby_not_a_crash(
    zookeeper_backend: ZooKeeperBackend, proxy: FaultProxy
) -> None:
    async with cluster(zookeeper_backend, proxy) as c:
        seed = await c.stack.enter_async_context(zookeeper_backend.driver())
        node = f"{c.path}/n/zk_cli_0000000000"
        await seed.create(node, b"\xfe\xfe written by zkCli", makepath=True)
        a = await c.add("a")
        await wait_for(lambda: a.state is ha.State.STANDBY)
        await anyio.sleep(0.2)
        assert a.state is ha.State.STANDBY and a.error is None
        await seed.delete(node)
        await wait_for(lambda: a.state is ha.State.ACTIVE)


@live
async def test_corrupt_breadcrumb_is_handed_to_fencing_as_is(
    zookeeper_backend: ZooKeeperBackend, proxy: FaultProxy
) -> None:
    raw = b"\x00\xff\xc3\x28 not a breadcrumb"
    async with cluster(zookeeper_backend, proxy) as c:
        seed = await c.stack.enter_async_context(zookeeper_backend.driver())
        await seed.create(f"{c.path}/b/crashed_1", raw, makepath=True)
        await c.add("a")
        await wait_for(c.settled)
        [fence] = c.events("fence")
        assert bytes.fromhex(fence.detail["raw"]) == raw and fence.detail["old"] is None


@live
async def test_acl_denial_is_fatal_not_a_retry_loop(
    zookeeper_backend: ZooKeeperBackend,
) -> None:
    fatal: list[Exception] = []

    class Contender(Recorder):
        async def on_fatal_error(self, error: Exception) -> None:
            fatal.append(error)

    owner = zookeeper_backend.driver(auth="ops:secret", acl="creator")
    async with owner:
        await owner.create("/svc", b"")  # the election's parent, only ops may write under it
    history = History()
    async with zookeeper_backend.driver(auth="app:other") as driver:
        elector = ha.Elector(driver, "/svc", "a", timing=FAST)
        with anyio.fail_after(20), pytest.raises(ElectionFailed, match="denied access"):
            await elector.run(Contender("a", history))
    assert len(fatal) == 1
    assert history.events == [] or all(e.kind != "start" for e in history.events)


@live
async def test_harness_net_faults_on_zookeeper(zookeeper_server: ZooKeeperServer) -> None:
    # the ZooKeeperNet that lets tests/support/harness.py run its scenarios on ZooKeeper
    from tests.support.harness import cluster as harness_cluster

    net = ZooKeeperNet(zookeeper_server)
    async with harness_cluster(net) as c:
        nodes = [await c.add(name, session_timeout=net.session_timeout) for name in "abc"]
        await wait_for(c.settled)
        [first] = c.active()
        await c.net.apply("disconnect", first.driver)
        await wait_for(lambda: not first.driver.connected)
        await c.net.apply("reconnect", first.driver)
        await wait_for(lambda: first.driver.connected and c.settled())
        [leader] = c.active()
        await c.crash(leader)
        await wait_for(lambda: c.settled() and leader not in c.active())
        [leader] = c.active()
        await c.net.apply("cut_off", leader.driver)
        await wait_for(lambda: len(c.active()) == 1 and leader not in c.active())
        await c.net.apply("restore", leader.driver)
        await wait_for(lambda: leader.state is ha.State.STANDBY)
        assert len([n for n in nodes if not n.done.is_set()]) == 2


# --- random faults ----------------------------------------------------------------------------

FAULTS = ["crash", "expire", "drop", "pause", "heal", "quit", "quit_fence", "restart"]


async def apply(c: Cluster, fault: str, node: Node) -> None:
    if fault == "restart":
        if node.gone:
            c.nodes.remove(node)
            await c.add(f"{node.name}+")
    elif node.gone:
        pass
    elif fault == "crash":
        c.crash(node)
    elif fault == "expire" and node.driver.session_id is not None:
        try:
            await c.expire(node)
        except Exception:  # the session may be changing hands already: no fault then
            pass
    elif fault == "drop":
        node.link.drop()
    elif fault == "pause":
        node.link.pause()
    elif fault == "heal":
        node.link.resume()
    elif fault in ("quit", "quit_fence"):
        c.quit(node, need_fence=fault == "quit_fence")


@live
@pytest.mark.timeout(60 * int(os.environ.get("HA_ZK_EXAMPLES", "6")))
@settings(
    max_examples=int(
        os.environ.get("HA_ZK_EXAMPLES", "6")
    ),  # per anyio backend; each example lives through session timeouts
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    size=st.integers(2, 3),
    plan=st.lists(
        st.tuples(st.sampled_from(FAULTS), st.integers(0, 2), st.sampled_from([0.0, 0.1, 0.7])),
        max_size=5,
    ),
)
async def test_safety_and_liveness_under_random_faults(
    zookeeper_backend: ZooKeeperBackend, proxy: FaultProxy, size: int, plan: list[Any]
) -> None:
    async with cluster(zookeeper_backend, proxy) as c:
        for i in range(size):
            await c.add(f"n{i}")
        for fault, index, pause in plan:
            await apply(c, fault, c.nodes[index % len(c.nodes)])
            await anyio.sleep(pause)
        for node in c.nodes:
            if not node.gone:
                node.link.accept()  # heals pauses too
        if all(n.gone for n in c.nodes):
            await c.add("fresh")
        await wait_for(c.settled, within=30)
