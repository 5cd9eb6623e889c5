"""What Curator's and Flink's suites check on ZooKeeper, as scenarios on real servers (issue 16,
behaviours 3 to 5): a leader's published node restored however soon after publication it is
removed or changed (Flink's node-changed correction), a new leader once a killed server is
back and the old leader closed meanwhile (Curator), and an ensemble replaced by a new one
(Curator recovers: a fresh session, one leader).

Every test runs under asyncio and trio and asserts behaviour with generous bounds, never a
timing. Behaviours 1 and 2, on every backend, are in ``test_peer_behaviours.py``.
"""

from __future__ import annotations

import shutil
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from kazoo.client import KazooClient

import ha
from ha.drivers.zookeeper import ZooKeeperDriver
from ha.services import LeaderElection, LeaderInfo, services
from ha.testing import History, Recorder, check_history
from tests.support.backends.zookeeper import ZooKeeperBackend, ZooKeeperServer

pytestmark = [pytest.mark.anyio, pytest.mark.zookeeper, pytest.mark.timeout(120)]

FAST = ha.Timing(backoff=ha.Backoff(initial=0.005, maximum=0.05), hook_timeout=1.0)
SESSION = 1.0


async def wait_for(cond: Callable[[], bool], within: float = 20.0) -> None:
    """Poll ``cond``; ``within`` is a hang guard, not a latency check."""
    with anyio.fail_after(within):
        while not cond():  # noqa: ASYNC110 - polls state owned by other tasks
            await anyio.sleep(0.01)


# --- 5. Flink's node-changed correction ---------------------------------------------------------


class Component:
    """Confirms its leadership with ``address`` as soon as it is granted."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.election: LeaderElection | None = None
        self.grants: list[uuid.UUID] = []

    async def grant_leadership(self, session_id: uuid.UUID) -> None:
        self.grants.append(session_id)
        assert self.election is not None
        await self.election.confirm_leadership(session_id, self.address)

    async def revoke_leadership(self) -> None:
        pass


class Vandal:
    """A raw kazoo client that spoils the leader node the moment it appears: its watch fires
    on kazoo's thread and the spoiling request leaves from there, before the leader can look
    again (the window a one-shot watch leaves between its firing and its re-arming)."""

    def __init__(self, hosts: str, path: str, how: str) -> None:
        self.client = KazooClient(hosts=hosts)
        self.path, self.how = path, how
        self.done = threading.Event()

    def __enter__(self) -> Vandal:
        self.client.start(timeout=10)
        self.client.exists(self.path, watch=self._fired)
        return self

    def _fired(self, event: Any) -> None:
        if self.done.is_set():
            return
        if event.type == "CREATED":
            if self.how == "remove":
                self.client.delete_async(self.path)
            else:
                self.client.set_async(self.path, b"someone else's idea")
            self.done.set()
        else:
            self.client.exists_async(self.path, watch=self._fired)

    def holds(self) -> bytes | None:
        stat = self.client.exists(self.path)
        return None if stat is None else self.client.get(self.path)[0]

    def __exit__(self, *exc: object) -> None:
        self.client.stop()
        self.client.close()


@pytest.mark.parametrize("how", ["remove", "change"])
async def test_a_published_node_spoiled_at_once_is_restored(
    zookeeper_backend: ZooKeeperBackend, how: str
) -> None:
    """Five publications in a row, each spoiled the moment it lands: each is restored."""
    for trial in range(5):
        await publish_and_spoil(zookeeper_backend, how, f"a:{trial}")


async def publish_and_spoil(backend: ZooKeeperBackend, how: str, address: str) -> None:
    comp = Component(address)
    with Vandal(backend.hosts, backend.chroot + "/ha/c1/leader/dispatcher", how) as vandal:
        async with backend.driver(session_timeout=SESSION) as driver:
            async with services(driver, "c1", identity="a", timing=FAST) as svc:
                comp.election = svc.leader_election("dispatcher")
                await comp.election.start(comp)
                await wait_for(lambda: vandal.done.is_set() and bool(comp.grants))
                good = LeaderInfo(comp.address, comp.grants[0]).encode()
                await wait_for(lambda: vandal.holds() == good)
                stat = vandal.client.exists(vandal.path)
                assert stat is not None and stat.ephemeralOwner == driver.session_id


# --- 4. a server killed, then the active closes -------------------------------------------------


async def test_the_active_closes_while_the_server_is_down_a_new_leader_follows(
    zookeeper_server_factory: Callable[[], ZooKeeperServer],
) -> None:
    """Curator's testKillServerThenCloseShouldElectNewLeader: the only server dies, the
    active closes while it is down (its goodbye cannot reach anyone), the server comes back:
    the standby leads within the closed one's session timeout (plus margins)."""
    server = zookeeper_server_factory()
    url = f"{server.hosts}/ha-kill-{uuid.uuid4().hex[:8]}"
    history = History()
    a_driver = ZooKeeperDriver.from_url(f"zk://{url}", session_timeout=SESSION)
    b_driver = ZooKeeperDriver.from_url(f"zk://{url}", session_timeout=SESSION)
    a = ha.Elector(a_driver, "/svc", "a", timing=FAST)
    b = ha.Elector(b_driver, "/svc", "b", timing=FAST)
    for elector in (a, b):
        elector.add_listener(history.transition)
    a_done = anyio.Event()
    async with anyio.create_task_group() as tg:

        async def run_a() -> None:
            try:
                async with a_driver:
                    await a.run(Recorder("a", history))
            finally:
                a_done.set()

        async def run_b() -> None:
            async with b_driver:
                await b.run(Recorder("b", history))

        tg.start_soon(run_a)
        await wait_for(lambda: a.state is ha.State.ACTIVE)
        tg.start_soon(run_b)
        await wait_for(lambda: b.state is ha.State.STANDBY)
        await anyio.to_thread.run_sync(server.stop)
        await wait_for(lambda: not a_driver.connected and not b_driver.connected)
        a.quit()
        with anyio.fail_after(30):
            await a_done.wait()  # a's process has closed, its goodbye lost
        await anyio.to_thread.run_sync(server.start)
        await anyio.to_thread.run_sync(server.wait_serving)
        # the server gives a's session a fresh timeout on start; then b leads
        await wait_for(lambda: b.state is ha.State.ACTIVE, within=30)
        b.quit()
    check_history(history)


# --- 3. an ensemble replaced by a new one -------------------------------------------------------


async def test_an_ensemble_replaced_by_a_new_one_elects_a_leader(
    zookeeper_server_factory: Callable[[], ZooKeeperServer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server's data is wiped and it starts again: its zxid starts again too, and it
    refuses clients that have seen a later one ("client has seen zxid ... our last zxid
    is ..."). Each driver says so in one line, starts a fresh session, and one leader is
    elected on the new ensemble (Curator recovers)."""
    server = zookeeper_server_factory()
    history = History()
    drivers = [ZooKeeperDriver(server.hosts, session_timeout=SESSION) for _ in "ab"]
    electors = [
        ha.Elector(d, "/svc", name, timing=FAST) for d, name in zip(drivers, "ab", strict=True)
    ]
    for elector in electors:
        elector.add_listener(history.transition)
    async with anyio.create_task_group() as tg:
        for driver, elector, name in zip(drivers, electors, "ab", strict=True):

            async def run(driver: ZooKeeperDriver, elector: ha.Elector, name: str) -> None:
                async with driver:
                    await elector.run(Recorder(name, history))

            tg.start_soon(run, driver, elector, name)
        await wait_for(lambda: sorted(e.state.value for e in electors) == ["active", "standby"])
        old = [d.session_id for d in drivers]
        # enough writes that the clients have seen a zxid the new server will not reach soon
        async with ZooKeeperDriver(server.hosts) as probe:
            for i in range(20):
                await probe.create(f"/filler-{i}", b"x")
        await anyio.to_thread.run_sync(server.stop)
        # both stop and wait (the active on its local deadline); a new ensemble is a new
        # history: its tokens (creation orders) start again, as everything it held did
        await wait_for(lambda: all(e.state is ha.State.NEUTRAL for e in electors))
        before, after = History(), History()
        before.events, after.events = list(history.events), []
        history.events = after.events
        await anyio.to_thread.run_sync(wipe, server)
        await anyio.to_thread.run_sync(server.start)
        await anyio.to_thread.run_sync(server.wait_serving)
        await wait_for(
            lambda: (
                sorted(e.state.value for e in electors) == ["active", "standby"]
                and all(d.session_id not in (None, *old) for d in drivers)
            ),
            within=60,
        )
        said = [r for r in caplog.records if "has seen" in r.getMessage()]
        assert said and all(r.levelname == "ERROR" for r in said)
        for elector in electors:
            elector.quit()
    check_history(before)
    check_history(after)
    assert [e for e in after.events if e.kind == "start"]  # the new ensemble's leader's


def wipe(server: ZooKeeperServer) -> None:
    shutil.rmtree(server.data_dir)
    server.data_dir.mkdir()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # a command: runs its own loop
def test_ha_run_says_so_and_leads_again_on_a_replaced_ensemble(
    zookeeper_server_factory: Callable[[], ZooKeeperServer], tmp_path: Path, anyio_backend: str
) -> None:
    """``ha run`` prints the one line, and its COMMAND runs again on the new ensemble."""
    from tests.support.cli import ha_env, popen_ha, stop_procs, wait_until

    server = zookeeper_server_factory()
    env = ha_env(tmp_path, HA_URL=f"zk://{server.hosts}?session_timeout=1")
    starts = tmp_path / "starts"
    command = [sys.executable, "-c", f"open({str(starts)!r}, 'a').write('x'); "
               "import time; time.sleep(600)"]  # fmt: skip
    log = tmp_path / "run.log"
    proc = popen_ha("run", "/svc", "--id", "a", "--", *command, env=env, log=log)

    def started_on_the_new_ensemble() -> bool:
        # a start logged after the refusal (a loaded machine may stop and start COMMAND again
        # in a term, on either ensemble: how many starts there are by then is not known)
        text = log.read_text()
        refused = text.find("has seen")
        return refused >= 0 and "ha run a: started " in text[refused:]

    try:
        wait_until(lambda: starts.exists() and starts.read_text(), "COMMAND to start")
        server.stop()
        wipe(server)
        server.start()
        server.wait_serving()
        wait_until(started_on_the_new_ensemble, "COMMAND to start again", within=60)
        wait_until(lambda: len(starts.read_text()) >= 2, "COMMAND to run again")
        said = [line for line in log.read_text().splitlines() if "has seen" in line]
        assert len(said) == 1, log.read_text()
        assert "refuses this client" in said[0] and "fresh session" in said[0]
    finally:
        stop_procs([proc])
