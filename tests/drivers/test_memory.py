"""The memory driver's own behaviour: named clusters, its faults, and its server's session clock.

What every driver does is tested in test_contract.py; this file holds what only the memory
backend has: ``MemoryCluster`` (shared by name, dropped, counting operations, reaping lazily)
and the faults a ``MemoryDriver`` injects on itself (disconnect, partition, freeze, crash,
delay), which the layers above use to test against a ZooKeeper-like server in one process.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from ha.drivers.base import ConnectionEvent, ConnectionState, NodeEvent, NodeEventKind
from ha.drivers.memory import MemoryCluster, MemoryDriver
from ha.errors import ConfigurationError, ConnectionLost
from ha.testing import faults
from tests.support.contact import Events

S = ConnectionState
_names = itertools.count()


@pytest.fixture
def name() -> Iterator[str]:
    """A cluster name private to the test, dropped after it."""
    cluster = f"test-memory-{next(_names)}"
    yield cluster
    MemoryCluster.drop(cluster)


# --- configuration ------------------------------------------------------------------------------


def test_url_names_the_cluster_and_options(name: str) -> None:
    driver = MemoryDriver.from_url(f"memory://{name}?session_timeout=0.5")
    assert driver.cluster is MemoryCluster.named(name)
    assert driver.session_timeout == 0.5
    assert MemoryDriver.from_url(f"memory:///{name}").cluster is driver.cluster
    keyword = MemoryDriver.from_url(f"memory://{name}?session_timeout=0.5", session_timeout=4)
    assert keyword.session_timeout == 4  # keywords win over the URL


@pytest.mark.parametrize(
    "url",
    [
        "memory://",
        "zk://name",
        "memory://name?session_timeout=soon",
        "memory://name?colour=red",
    ],
)
def test_bad_urls_are_configuration_errors(url: str) -> None:
    with pytest.raises(ConfigurationError):
        MemoryDriver.from_url(url)


def test_session_timeout_must_be_positive(name: str) -> None:
    for bad in (0, -1):
        with pytest.raises(ConfigurationError):
            MemoryDriver(name, session_timeout=bad)


# --- the cluster --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_clusters_are_shared_by_name_until_dropped(name: str) -> None:
    cluster = MemoryCluster.named(name)
    assert MemoryCluster.named(name) is cluster
    async with MemoryDriver(name) as a, MemoryDriver(cluster) as b:
        await a.create("/shared", b"x")
        assert (await b.get("/shared"))[0] == b"x"
        before = cluster.ops
        await b.exists("/shared")
        assert cluster.ops == before + 1  # one operation served
    MemoryCluster.drop(name)
    MemoryCluster.drop(name)  # forgetting an unknown name is harmless
    assert MemoryCluster.named(name) is not cluster
    async with MemoryDriver(name) as fresh:
        assert await fresh.exists("/shared") is None


@pytest.mark.anyio
async def test_the_server_never_expires_a_session_early(name: str) -> None:
    async with MemoryDriver(name, session_timeout=0.2) as driver:
        cluster, sid = driver.cluster, driver.session_id
        assert sid is not None
        await faults(driver).crash()  # no more heartbeats
        last = cluster.sessions[sid].last_heartbeat
        while cluster.alive(sid):
            cluster.reap()
            if time.monotonic() <= last + 0.2:  # the whole reap ran within the timeout
                assert cluster.alive(sid)
            await anyio.sleep(0.001)
        assert time.monotonic() > last + 0.2


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # asyncio's clock is the server's
@pytest.mark.anyio
async def test_last_contact_is_never_later_than_the_servers_record_of_it(name: str) -> None:
    # base.py's timing assumption, exactly: on asyncio anyio.current_time() is time.monotonic(),
    # the clock the cluster records heartbeats on, so the two compare with no conversion
    async with MemoryDriver(name, session_timeout=0.06) as driver:
        assert driver.session_id is not None
        session = driver.cluster.sessions[driver.session_id]
        assert driver.last_contact <= session.last_heartbeat  # the session's opening
        for _ in range(50):
            await driver.exists("/")  # an operation's contact
            assert driver.last_contact <= session.last_heartbeat
        start = driver.last_contact
        while driver.last_contact < start + 0.1:  # the pinger's contacts (every 20 ms)
            await anyio.sleep(0.005)
            assert driver.last_contact <= session.last_heartbeat


@pytest.mark.anyio
async def test_a_closed_driver_may_start_again_with_a_new_session(name: str) -> None:
    driver = MemoryDriver(name)
    async with driver:
        first = driver.session_id
        with pytest.raises(RuntimeError):
            await driver.start()
    async with driver:
        assert driver.session_id not in (None, first)


# --- faults -------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_disconnect_is_noticed_at_once_and_events_wait_for_reconnect(name: str) -> None:
    async with MemoryDriver(name) as driver, MemoryDriver(name) as other:
        states, node = Events(), Events()
        driver.subscribe(None, states)
        driver.subscribe("/n", node)
        session = driver.session_id
        faults(driver).disconnect()
        assert states.events == [ConnectionEvent(S.DISCONNECTED, session)]  # before any await
        with pytest.raises(ConnectionLost):
            await driver.exists("/")
        await other.create("/n")
        await other.set("/n", b"1")
        assert node.events == []  # held back while cut off
        faults(driver).reconnect()
        assert await states.next() == ConnectionEvent(S.DISCONNECTED, session)
        assert await states.next() == ConnectionEvent(S.RECONNECTED, session)
        # delivered after RECONNECTED, in order
        assert [await node.next(), await node.next()] == [
            NodeEvent("/n", NodeEventKind.CREATED),
            NodeEvent("/n", NodeEventKind.CHANGED),
        ]


@pytest.mark.anyio
async def test_partition_is_noticed_after_two_thirds_of_the_timeout(name: str) -> None:
    async with MemoryDriver(name, session_timeout=0.3) as driver:
        states = Events()
        driver.subscribe(None, states)
        session = driver.session_id
        faults(driver).partition()
        assert driver.connected  # silent: the client learns only from unanswered pings
        assert await states.next() == ConnectionEvent(S.DISCONNECTED, session)
        # as ZooKeeper's client: lost after two thirds of the timeout without an answer
        assert anyio.current_time() >= driver.last_contact + 0.2
        faults(driver).heal()  # the server keeps the session for the full timeout
        assert await states.next() in (
            ConnectionEvent(S.RECONNECTED, session),
            ConnectionEvent(S.EXPIRED, session),  # if the heal came after the timeout
        )


@pytest.mark.anyio
async def test_events_held_by_a_cut_too_short_to_notice_arrive_after_it(name: str) -> None:
    # a network cut healed before the client missed a ping: no DISCONNECTED, and what the
    # server sent meanwhile arrives late, as a TCP connection's data does (it was held forever:
    # a standby then never learned that the node below it had gone, and nobody led)
    async with MemoryDriver(name, session_timeout=5.0) as driver, MemoryDriver(name) as other:
        states, node = Events(), Events()
        driver.subscribe(None, states)
        driver.subscribe("/n", node)
        await other.create("/n")
        assert await node.next() == NodeEvent("/n", NodeEventKind.CREATED)
        faults(driver).partition()
        await other.delete("/n")
        await anyio.sleep(0.05)
        assert node.events[1:] == []  # held back while cut off
        faults(driver).heal()
        assert await node.next() == NodeEvent("/n", NodeEventKind.DELETED)
        assert states.events == []  # never noticed: no connection event
        assert driver.connected


@pytest.mark.anyio
async def test_freeze_holds_every_operation_until_thaw(name: str) -> None:
    async with MemoryDriver(name) as driver:
        done: list[str] = []

        async def create() -> None:
            done.append(await driver.create("/late"))

        faults(driver).freeze()
        async with anyio.create_task_group() as tg:
            tg.start_soon(create)
            await anyio.wait_all_tasks_blocked()
            assert done == [] and await _exists_elsewhere(driver, "/late") is False
            faults(driver).thaw()
        assert done == ["/late"]


async def _exists_elsewhere(driver: MemoryDriver, path: str) -> bool:
    """Ask the cluster directly (the frozen driver would wait)."""
    await anyio.lowlevel.checkpoint()
    return path in driver.cluster.nodes


@pytest.mark.anyio
async def test_delay_slows_every_operation(name: str) -> None:
    async with MemoryDriver(name) as driver:
        driver.delay = 0.05
        start = anyio.current_time()
        await driver.exists("/")
        assert anyio.current_time() - start >= 0.05


@pytest.mark.anyio
async def test_crash_leaves_the_session_to_the_server(name: str) -> None:
    async with MemoryDriver(name, session_timeout=0.2) as driver, MemoryDriver(name) as other:
        await driver.create("/e", ephemeral=True)
        sid = driver.session_id
        assert sid is not None
        states: Any = Events()
        driver.subscribe(None, states)
        await faults(driver).crash()
        assert driver.cluster.alive(sid) and not driver.connected  # no goodbye was said
        with pytest.raises(ConnectionLost):
            await driver.exists("/")
        gone = Events()
        other.subscribe("/e", gone)
        assert await gone.next() == NodeEvent("/e", NodeEventKind.DELETED)  # after the timeout
        assert not driver.cluster.alive(sid)
        assert states.events == []  # a dead client hears nothing
