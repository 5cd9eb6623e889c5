"""A cluster of electors for scenario and property tests, on the memory or the sqlite backend.

``async with cluster(net) as c``: ``c.add(name)`` starts an elector (its own driver, hence its
own session) with a ``Recorder`` contender; every contender call and transition goes to
``c.history``, which is checked for the safety properties when the block ends.

A *net* is the backend under the cluster and the faults it can inject, named in ``net.faults``;
the driver's faults are those of ``ha.testing.faults(driver)``, which says what each does:

==========  =====================================  =========================================
fault       memory (``MemoryNet``)                 sqlite (``SqliteNet``)
==========  =====================================  =========================================
crash       ``crash``: the driver falls silent;    ``crash``: the process dies (the session
            the elector is cancelled               row stays until others reap it); the
                                                   elector is cancelled
expire      ``expire``: the server ends it now     ``expire``: the row is deleted from outside
cut_off     ``partition``, silent;                 ``freeze``: every access of this driver to
/restore    ``restore`` is ``heal``                the file hangs, renewals included, as on a
                                                   stalled disk; ``restore`` is ``thaw``
disconnect  ``disconnect`` / ``reconnect``         -
/reconnect
freeze      ``freeze`` / ``thaw``: operations      -
/thaw       hang, pings go on
stall       -                                      another connection holds the database's
/unstall                                           write lock: every driver's writes and
                                                   renewals get "busy" (a cluster-wide fault)
transient   ``fail_next``: the next operations     ``fail_next``: as on a busy database, or
fatal       fail, transient or fatal               with AccessDenied
==========  =====================================  =========================================

A paused process (SIGSTOP) cannot be modelled in one process: its elector, its contender and its
watchdog would go on running. The real-process tests (tests/processes/test_sqlite_elector.py,
tests/processes/test_sqlite_cluster.py) cover it, and SIGKILL, with separate processes.
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.abc
import anyio.to_thread
import pytest

import ha
from ha.drivers.base import Driver
from ha.drivers.memory import MemoryCluster, MemoryDriver
from ha.drivers.sqlite.driver import SqliteDriver
from ha.election.lease import Lease
from ha.errors import Unavailable
from ha.testing import History, Recorder, SafetyViolation, check_history, faults

FAST = ha.Timing(
    backoff=ha.Backoff(initial=0.005, maximum=0.05),
    fence_backoff=ha.Backoff(initial=0.005, maximum=0.05),
    hook_timeout=0.5,
)
TIMEOUT = 0.3  # the memory backend's session timeout (kept for the tests that import it)

_ids = itertools.count()


async def wait_for(cond: Callable[[], bool], within: float = 5.0) -> None:
    """Poll ``cond`` until it holds; ``within`` is a hang guard, not a latency check."""
    with anyio.fail_after(within):
        while not cond():  # noqa: ASYNC110 - polls state owned by other tasks
            await anyio.sleep(0.005)


class Net(Protocol):
    """A backend for a cluster of electors, with the faults it can inject."""

    name: str
    faults: frozenset[str]
    session_timeout: float  # the default for its electors' drivers

    def driver(self, session_timeout: float | None = None) -> Driver:
        """An unstarted driver on this cluster's backend (a new session when started)."""
        ...

    async def crash(self, driver: Any) -> None: ...
    async def expire(self, driver: Any) -> None: ...
    def fail_next(self, driver: Any, count: int, transient: bool) -> None: ...
    async def apply(self, fault: str, driver: Any) -> None:
        """Any other fault of ``faults``, on ``driver`` (or on the whole backend)."""
        ...

    async def heal(self, drivers: list[Any]) -> None:
        """Undo every lasting fault (cut-offs, freezes, stalls)."""
        ...

    def close(self) -> None: ...


class MemoryNet:
    """Electors on one named ``MemoryCluster`` (a ZooKeeper-like server in this process)."""

    name = "memory"
    faults = frozenset(
        {
            "crash",
            "expire",
            "cut_off",
            "restore",
            "disconnect",
            "reconnect",
            "freeze",
            "thaw",
            "transient",
            "fatal",
        }
    )
    session_timeout = TIMEOUT

    def __init__(self) -> None:
        self.cluster_name = f"elector-{next(_ids)}"

    def driver(self, session_timeout: float | None = None) -> MemoryDriver:
        return MemoryDriver(self.cluster_name, session_timeout=session_timeout or TIMEOUT)

    async def crash(self, driver: MemoryDriver) -> None:
        await faults(driver).crash()

    async def expire(self, driver: MemoryDriver) -> None:
        if driver.session_id is not None:  # a closed driver has nothing to expire
            await faults(driver).expire()

    def fail_next(self, driver: MemoryDriver, count: int, transient: bool) -> None:
        faults(driver).fail_next(count, transient=transient)

    async def apply(self, fault: str, driver: MemoryDriver) -> None:
        f = faults(driver)
        actions: dict[str, Callable[[], None]] = {
            "cut_off": f.partition,
            "restore": f.heal,
            "disconnect": f.disconnect,
            "reconnect": f.reconnect,
            "freeze": f.freeze,
            "thaw": f.thaw,
        }
        actions[fault]()

    async def heal(self, drivers: list[MemoryDriver]) -> None:
        for driver in drivers:
            f = faults(driver)
            f.heal()
            f.reconnect()
            f.thaw()

    def close(self) -> None:
        MemoryCluster.drop(self.cluster_name)


class SqliteNet:
    """Electors on one SQLite file, one ``SqliteDriver`` (session, kernel lock) each.

    Short sessions and 20 ms polls keep the tests quick; a crash is seen through the kernel
    lock within a poll or two, a hang or a cut-off only when the lease runs out.
    """

    name = "sqlite"
    faults = frozenset(
        {"crash", "expire", "cut_off", "restore", "stall", "unstall", "transient", "fatal"}
    )
    session_timeout = 0.5
    poll_interval = 0.02

    def __init__(self, directory: Path) -> None:
        self.file = directory / f"cluster-{next(_ids)}.db"
        self._staller: sqlite3.Connection | None = None

    def driver(self, session_timeout: float | None = None) -> SqliteDriver:
        return SqliteDriver(
            self.file,
            session_timeout=session_timeout or self.session_timeout,
            poll_interval=self.poll_interval,
        )

    @property
    def stalled(self) -> bool:
        return self._staller is not None

    async def crash(self, driver: SqliteDriver) -> None:
        await faults(driver).crash()

    async def expire(self, driver: SqliteDriver) -> None:
        if driver.session_id is not None:  # between two sessions there is nothing to expire
            await faults(driver).expire()

    def fail_next(self, driver: SqliteDriver, count: int, transient: bool) -> None:
        faults(driver).fail_next(count, transient=transient)

    async def apply(self, fault: str, driver: SqliteDriver) -> None:
        if fault == "cut_off":
            faults(driver).freeze()
        elif fault == "restore":
            faults(driver).thaw()
        elif fault == "stall":
            await self.stall()
        elif fault == "unstall":
            await self.unstall()
        else:
            raise ValueError(f"the sqlite net has no fault {fault!r}")

    async def stall(self) -> None:
        """Hold the database's write lock from another connection until ``unstall``."""
        if self._staller is not None:
            return
        conn = sqlite3.connect(
            self.file, timeout=5.0, isolation_level=None, check_same_thread=False
        )
        try:
            await anyio.to_thread.run_sync(conn.execute, "BEGIN IMMEDIATE")
        except BaseException:
            conn.close()
            raise
        self._staller = conn

    async def unstall(self) -> None:
        conn, self._staller = self._staller, None
        if conn is None:
            return

        def release() -> None:
            with contextlib.closing(conn):
                conn.execute("ROLLBACK")

        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(release)

    async def heal(self, drivers: list[SqliteDriver]) -> None:
        await self.unstall()
        for driver in drivers:
            faults(driver).thaw()

    def close(self) -> None:
        if self._staller is not None:
            self._staller.close()
            self._staller = None


class NodeRecorder(Recorder):
    """A ``Recorder`` that knows which of its sessions were expired by force (``c.expire``).

    A session can be expired between the commit that wins an epoch and the start of the work
    (the elector cannot know yet): that leadership is then under a forced expiry from its very
    start, and the history says so right after its ``start`` (only fencing protects it, as
    ``check_history`` allows for a forced expiry during a leadership).
    """

    def __init__(self, identity: str, history: History) -> None:
        super().__init__(identity, history)
        self.expired_sessions: set[int] = set()

    async def become_active(self, lease: Lease) -> None:
        self.leases.append(lease)
        self.history.add(self.identity, "start", lease.epoch)
        if lease.session_id in self.expired_sessions:
            self.history.add(self.identity, "expire", session=lease.session_id, before_start=True)
        try:
            if self.fail_active > 0:
                self.fail_active -= 1
                raise RuntimeError("injected failure in become_active")
            await anyio.sleep_forever()
        finally:
            self.history.add(self.identity, "stop", lease.epoch)


class Node:
    def __init__(self, name: str, driver: Any, elector: ha.Elector, rec: NodeRecorder):
        self.name, self.driver, self.elector, self.rec = name, driver, elector, rec
        self.scope = anyio.CancelScope()
        self.error: BaseException | None = None
        self.done = anyio.Event()
        self.quitting = False

    def quit(self, need_fence: bool = False) -> None:
        self.quitting = True
        if not need_fence:  # for check_history: a term stopped before resigns too
            self.rec.history.add(self.rec.identity, "quit")
        self.elector.quit(need_fence)

    @property
    def state(self) -> ha.State:
        return self.elector.state


class Cluster:
    def __init__(self, tg: anyio.abc.TaskGroup, stack: AsyncExitStack, net: Net) -> None:
        self.tg, self.stack, self.net = tg, stack, net
        self.history = History()
        self.nodes: list[Node] = []

    @property
    def name(self) -> str:
        """The memory cluster's name (memory-only tests open drivers of their own on it)."""
        assert isinstance(self.net, MemoryNet), "only a memory cluster has a name"
        return self.net.cluster_name

    def probe(self, session_timeout: float | None = None) -> Driver:
        """A driver on the cluster's backend for the test itself: ``async with c.probe() as d``."""
        return self.net.driver(session_timeout)

    async def add(self, name: str, timing: ha.Timing = FAST, **kw: Any) -> Node:
        """Start a node: its driver is started when this returns, its elector not yet run.

        Each node's task opens and closes its own driver, as a process would: drivers that
        hold a task group (sqlite) then nest properly, and closing one never cancels another.
        A driver that cannot start because the sqlite file stays busy past its busy timeout
        (a loaded machine) is tried again, as a supervisor would start the process again.
        """
        session_timeout = kw.pop("session_timeout", None)
        for attempt in itertools.count():
            driver = self.net.driver(session_timeout)
            elector = ha.Elector(driver, "/svc", name, timing=timing, **kw)
            node = Node(name, driver, elector, NodeRecorder(name, self.history))
            go = anyio.Event()
            try:
                await self.tg.start(self._run, node, go)
                break
            except Unavailable:
                if attempt == 20:
                    raise
                await anyio.sleep(0.05)
        elector.add_listener(self.history.transition)
        go.set()  # the elector runs at the caller's next checkpoint
        self.nodes.append(node)
        return node

    @staticmethod
    async def _run(node: Node, go: anyio.Event, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        try:
            async with node.driver:
                task_status.started()
                await go.wait()
                with node.scope:
                    try:
                        await node.elector.run(node.rec)
                    except Exception as exc:
                        node.error = exc
        finally:
            node.done.set()

    def live(self) -> list[Node]:
        """The nodes whose elector still runs (not crashed, not quit)."""
        return [n for n in self.nodes if not n.done.is_set()]

    def active(self) -> list[Node]:
        # a crashed elector's last reported state is whatever it was when it died
        return [n for n in self.live() if n.state is ha.State.ACTIVE]

    def settled(self) -> bool:
        return len(self.active()) == 1 and all(
            n.state in (ha.State.ACTIVE, ha.State.STANDBY) for n in self.live()
        )

    async def crash(self, node: Node) -> None:
        """The node's process dies: its driver falls silent first, then its elector stops."""
        self.history.add(node.name, "crash")
        await self.net.crash(node.driver)
        node.scope.cancel()
        await node.done.wait()  # the process is gone

    async def expire(self, node: Node) -> None:
        """Expire the node's session from outside (recorded: only fencing protects then)."""
        sid = node.driver.session_id
        self.history.add(node.name, "expire", session=sid)
        if sid is not None:
            node.rec.expired_sessions.add(sid)
        await self.net.expire(node.driver)

    def fail_next(self, node: Node, count: int, *, transient: bool = True) -> None:
        self.net.fail_next(node.driver, count, transient)

    async def fault(self, fault: str, node: Node) -> None:
        """Any other fault the net supports (``net.faults``)."""
        await self.net.apply(fault, node.driver)

    async def heal(self) -> None:
        await self.net.heal([n.driver for n in self.nodes])


@asynccontextmanager
async def cluster(net: Net | None = None) -> AsyncIterator[Cluster]:
    """A cluster on ``net`` (a fresh memory cluster if None); its history is checked at the end."""
    net = net or MemoryNet()
    try:
        async with anyio.create_task_group() as tg:
            # the test's own drivers (c.stack) close before the task group is cancelled: a
            # driver's aclose in a cancelled scope could replace the test's exception
            async with AsyncExitStack() as stack:
                c = Cluster(tg, stack, net)
                try:
                    yield c
                finally:
                    with anyio.CancelScope(shield=True):
                        await c.heal()  # a cut-off or stalled backend would hold up the quits
                    for n in c.nodes:
                        if not n.done.is_set():
                            n.quit()
                    with anyio.move_on_after(2):
                        for n in c.nodes:
                            await n.done.wait()
            tg.cancel_scope.cancel()
    finally:
        net.close()
    try:
        check_history(c.history)
    except SafetyViolation as exc:  # the events say what happened; a rerun seldom does
        events = sorted(c.history.events, key=lambda e: e.t)
        kept = "\n".join(e.to_json() for e in events[-80:])
        raise SafetyViolation(
            f"{exc}\nthe history's last {min(80, len(events))}:\n{kept}"
        ) from None


NETS = ("memory", "sqlite", "etcd", "kubernetes")


@pytest.fixture(params=NETS)
def net(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Net]:
    """Runs a test once on each backend of the harness (import it into the test module)."""
    made: Net
    if request.param == "etcd":  # a real server, started once (tests/support/backends/etcd.py)
        from tests.support.backends.etcd import EtcdNet

        made = EtcdNet(request.getfixturevalue("etcd_server"))
    elif request.param == "kubernetes":  # a FAKE API server (tests/support/kubeapi)
        from tests.support.backends.kubernetes import KubernetesNet

        made = KubernetesNet(request.getfixturevalue("kube_api"), tmp_path)
    else:
        made = MemoryNet() if request.param == "memory" else SqliteNet(tmp_path)
    yield made
    made.close()
