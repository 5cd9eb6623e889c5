"""What the peers' own suites check, as scenarios: Hadoop's ActiveStandbyElector (a contender
is told only of changes it must act on) and Curator's LeaderLatch (a contender that quits
during its takeover leaves nothing behind that names it).

Each test runs on memory, sqlite and a real ZooKeeper (``ZooKeeperNet``: one server, a proxy
link per elector), under asyncio and trio, and ends with ``check_history``. Waits are liveness
bounds, not timings. Issue 16, behaviours 1 and 2; the ZooKeeper-only ones are in
``test_peer_behaviours_zookeeper.py``.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import ha
from ha.election.lease import Lease
from tests.support.harness import (
    Cluster,
    Net,
    Node,
    NodeRecorder,
    cluster,
    wait_for,
)
from tests.support.peers import peer_net

__all__ = ("peer_net",)  # the fixture

pytestmark = pytest.mark.anyio

WITHIN = 20.0  # a hang guard (ZooKeeper's sessions here last 1 s)


class HookRecorder(NodeRecorder):
    """Also records the hooks that tell a contender it is not active, in order."""

    def __init__(self, identity: str, history: ha.testing.History) -> None:
        super().__init__(identity, history)
        self.told: list[str] = []
        self.fence_gate: anyio.Event | None = None  # set: fences wait for it
        self.fencing = anyio.Event()  # a fence has begun

    async def become_standby(self) -> None:
        self.told.append("standby")

    async def enter_neutral(self) -> None:
        self.told.append("neutral")

    async def become_active(self, lease: Lease) -> None:
        self.told.append("active")
        await super().become_active(lease)

    async def fence_old_active(self, breadcrumb: bytes) -> None:
        self.fencing.set()
        if self.fence_gate is not None:
            await self.fence_gate.wait()
        await super().fence_old_active(breadcrumb)


async def add(c: Cluster, name: str) -> tuple[Node, HookRecorder]:
    node = await c.add(name, session_timeout=c.net.session_timeout)
    # the elector runs at our next checkpoint, with the node's recorder as it is then
    rec = node.rec = HookRecorder(name, c.history)
    return node, rec


async def in_line(c: Cluster, *names: str) -> list[tuple[Node, HookRecorder]]:
    """The first of ``names`` leads, the others stand by behind it in their order."""
    line = []
    for name in names:
        node, rec = await add(c, name)
        await settle(node, ha.State.STANDBY if line else ha.State.ACTIVE)
        line.append((node, rec))
    return line


async def settle(node: Node, state: ha.State) -> None:
    await wait_for(lambda: node.state is state, WITHIN)


def moves(c: Cluster, name: str) -> list[tuple[str, str]]:
    """The public transitions of ``name``, in order, as reported to listeners."""
    return [
        (e.detail["old"], e.detail["new"])
        for e in c.history.events
        if e.kind == "transition" and e.identity == name
    ]


def fenced(c: Cluster) -> list[str | None]:
    return [e.detail["old"] for e in c.history.events if e.kind == "fence"]


# --- 1. no neutral on the way to a takeover, standby told once ---------------------------------


@pytest.mark.parametrize("how", ["crash", "quit", "quit_fence"])
async def test_a_standby_that_takes_over_is_never_told_neutral(peer_net: Net, how: str) -> None:
    """Hadoop: a standby that wins goes standby -> active; enterNeutralMode is for lost contact."""
    async with cluster(peer_net) as c:
        (a, _), (b, told_b) = await in_line(c, "a", "b")
        if how == "crash":
            await c.crash(a)
        else:
            a.quit(need_fence=how == "quit_fence")
        await wait_for(lambda: "active" in told_b.told, WITHIN)
        assert told_b.told == ["standby", "active"]
        assert moves(c, "b") == [("neutral", "standby"), ("standby", "active")]
        assert fenced(c) == ([] if how == "quit" else ["a"])


async def test_a_losing_standby_is_told_standby_once(peer_net: Net) -> None:
    """Two standbys behind a leader that crashes: the one that does not win is told
    become_standby once, and nothing else, through the whole takeover of the other."""
    async with cluster(peer_net) as c:
        (a, _), (b, _), (d, told_d) = await in_line(c, "a", "b", "d")
        await c.crash(a)
        await wait_for(lambda: b.state is ha.State.ACTIVE, WITHIN)
        # then the new leader quits: the last standby takes over, told nothing in between
        b.quit()
        await wait_for(lambda: "active" in told_d.told, WITHIN)
        assert told_d.told == ["standby", "active"]
        assert moves(c, "d") == [("neutral", "standby"), ("standby", "active")]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # a command: runs its own loop
def test_the_demo_log_shows_no_neutral_flap(tmp_path: Path, anyio_backend: str) -> None:
    """``ha demo``: a standby that takes over goes standby -> active, with no neutral between
    (a new user reads "standby -> neutral" as trouble)."""
    from tests.support.cli import ha as run_ha
    from tests.support.cli import ha_env

    result = run_ha("demo", "--url", "memory://flaps", env=ha_env(tmp_path), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "standby -> active" in result.stdout
    # a standby leaves STANDBY only by leading (or quitting at the end)
    flaps = [
        line
        for line in result.stdout.splitlines()
        if "standby -> neutral" in line and "quit" not in line
    ]
    assert flaps == []


# --- 2. a quit during a takeover consumes no fencing --------------------------------------------


@pytest.mark.parametrize("how", ["quit", "cancel"])
async def test_a_quit_during_a_takeover_leaves_nothing_to_fence(peer_net: Net, how: str) -> None:
    """Curator's create/delete race: b quits while its takeover (a fence of the crashed
    leader) is in flight, never having led. The next leader fences the crashed leader, and
    never b, which never acted."""
    async with cluster(peer_net) as c:
        (a, _), (b, told_b), (d, _) = await in_line(c, "a", "b", "d")
        told_b.fence_gate = anyio.Event()
        await c.crash(a)
        with anyio.fail_after(WITHIN):
            await told_b.fencing.wait()
        if how == "quit":
            b.quit()
        else:  # the process is stopped from outside (its task cancelled)
            b.scope.cancel()
        told_b.fence_gate.set()
        await b.done.wait()
        await wait_for(lambda: d.state is ha.State.ACTIVE, WITHIN)
        assert not b.rec.leases
        assert "b" not in fenced(c)
        assert fenced(c)[-1] == "a"  # the crashed leader still is
