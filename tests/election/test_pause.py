"""The pause (rule P16 of ha/election/machine.py, ``ha pause``): nobody takes the lead while the
election is paused; the active keeps leading; on resume the first in the queue fences and acts.

The machine's tests need no event loop; the scenarios run on memory, sqlite and ZooKeeper,
under asyncio and trio, and end with ``check_history`` (the verdict taken outside the elector).
The history of terms the leaders append (ha/election/history.py) is checked in the same runs.
"""

from __future__ import annotations

import anyio
import pytest

from ha.admin import election_status, pause_election, read_pause, resume_election
from ha.drivers.base import Driver
from ha.election import events as ev
from ha.election.history import read_history
from ha.election.machine import Phase, State
from ha.election.nodes import ElectionNodes
from tests.support.harness import Cluster, Net, Node, cluster, wait_for
from tests.support.machine import (
    L_CRUMB,
    L_TICKET,
    LEADER,
    S1,
    active,
    first,
    joined,
    kinds,
    mine,
    queued,
    won,
)
from tests.support.peers import peer_net

__all__ = ("peer_net",)  # the fixture: memory, sqlite and ZooKeeper

# --- the machine ----------------------------------------------------------------------------


def standby(*, paused: bool) -> object:
    mach = joined()
    assert kinds(queued(mach, LEADER)) == ["Watch"]
    effects = mach.handle(ev.Watching(S1, LEADER, L_CRUMB, False, paused))
    assert mach.phase is Phase.STANDBY and "NotifyStandby" in kinds(effects)
    return mach


def test_first_in_a_paused_queue_waits_and_acts_on_resume() -> None:
    mach = first(joined())
    assert mach.handle(ev.CrumbsRead(S1, (), paused=True)) == []
    assert mach.phase is Phase.PAUSED and mach.state is State.NEUTRAL
    # resumed: the breadcrumbs are read again (who led may have changed), then it acts
    assert mach.handle(ev.PauseChanged(S1)) == [ev.ReadCrumbs(S1, mach.ticket or "", 30)]
    expected = won(mach, "won the election")
    assert mach.handle(ev.CrumbsRead(S1, ())) == expected
    assert mach.state is State.ACTIVE


def test_still_paused_after_a_change_stays_paused() -> None:
    mach = first(joined())
    mach.handle(ev.CrumbsRead(S1, (), paused=True))
    assert kinds(mach.handle(ev.PauseChanged(S1))) == ["ReadCrumbs"]
    assert mach.handle(ev.CrumbsRead(S1, (), paused=True)) == []
    assert mach.phase is Phase.PAUSED


def test_a_standby_takes_no_lead_when_the_leader_resigns_during_a_pause() -> None:
    mach = standby(paused=True)
    effects = mach.handle(ev.CrumbDeleted(S1, L_TICKET))
    effects += mach.handle(ev.NodeDeleted(S1, LEADER))
    assert "StartActive" not in kinds(effects) and "Report" not in kinds(effects)
    assert mach.phase is Phase.PAUSED and mach.state is State.STANDBY  # told nothing (P15)


def test_a_standby_does_not_fence_a_crashed_leader_during_a_pause() -> None:
    mach = standby(paused=True)
    assert mach.handle(ev.NodeDeleted(S1, LEADER)) == []
    assert mach.phase is Phase.PAUSED
    assert kinds(mach.handle(ev.PauseChanged(S1))) == ["ReadCrumbs"]
    # resumed: the crashed leader's breadcrumb is fenced before anything else
    effects = mach.handle(ev.CrumbsRead(S1, ((L_TICKET, L_CRUMB),)))
    assert effects == [ev.FenceOldActive(S1, L_CRUMB)]


def test_a_pause_seen_while_standby_is_read_again_before_the_leader_goes() -> None:
    mach = standby(paused=False)
    # the pause node changed: a listing (with the pause read beside it), not a later delay
    assert kinds(mach.handle(ev.PauseChanged(S1))) == ["ListQueue"]
    effects = mach.handle(ev.Queued(S1, mine(mach), 30, (LEADER,), b"other:2"))
    assert kinds(effects) == ["Watch"]
    mach.handle(ev.Watching(S1, LEADER, L_CRUMB, False, True))
    assert mach.handle(ev.NodeDeleted(S1, LEADER)) == []
    assert mach.phase is Phase.PAUSED


def test_a_read_older_than_a_pause_event_is_not_trusted() -> None:
    mach = joined()
    assert kinds(queued(mach, LEADER)) == ["Watch"]
    mach.handle(ev.PauseChanged(S1))  # came after the Watch was asked for
    # its answer says "not paused", read before the change: read again
    effects = mach.handle(ev.Watching(S1, LEADER, L_CRUMB, False, False))
    assert kinds(effects) == ["ListQueue"]
    assert mach.paused is None


def test_the_active_is_not_moved_by_a_pause() -> None:
    mach = active()
    assert mach.handle(ev.PauseChanged(S1)) == []
    assert mach.phase is Phase.ACTIVE


def test_a_newcomer_first_with_nobody_to_fence_waits_while_paused() -> None:
    mach = joined()
    effects = mach.handle(ev.Queued(S1, mine(mach), 30, (), b"me:1", False, True))
    assert effects == [] and mach.phase is Phase.PAUSED


# --- scenarios on real drivers ----------------------------------------------------------------


PATH = "/svc"  # the harness's election


async def _terms(probe: Driver, leaders: list[Node]) -> None:
    """The history names ``leaders`` in order, each at the epoch of its lease (each records
    its own term in the background once active: waited for)."""
    want = [(n.elector.identity, n.rec.leases[-1].epoch) for n in leaders]

    async def read() -> list[tuple[bytes, int]]:
        found = await read_history(probe, ElectionNodes(PATH))
        return [] if found is None else [(t.identity, t.epoch) for t in found[0].terms]

    got: list[tuple[bytes, int]] = []
    with anyio.move_on_after(20):
        while (got := await read()) != want:
            await anyio.sleep(0.05)
    assert got == want


async def _leading(c: Cluster) -> tuple[Node, Node, Driver]:
    """Two electors settled: (the active, its standby, a driver for the test), once the
    active's term is in the history (recorded in the background: before it ends)."""
    for name in "ab":
        await c.add(name, session_timeout=c.net.session_timeout)
    await wait_for(c.settled, 20)
    [old] = c.active()
    [new] = [n for n in c.nodes if n is not old]
    probe = await c.stack.enter_async_context(c.probe())
    await _terms(probe, [old])
    return old, new, probe


@pytest.mark.anyio
async def test_no_failover_while_paused_then_resume_fences_and_acts(peer_net: Net) -> None:
    async with cluster(peer_net) as c:
        old, new, probe = await _leading(c)
        pause, already, _ = await pause_election(probe, PATH)
        assert not already and pause.active == old.elector.identity
        assert await read_pause(probe, PATH) == pause
        await c.crash(old)  # its session ends while paused: nobody leads
        await wait_for(lambda: new.elector._machine.phase is Phase.PAUSED, 20)
        found = await election_status(probe, PATH)
        assert found.paused is not None and found.active is None
        assert found.holder == new.elector.identity
        assert c.active() == [] and new.rec.leases == []
        assert await resume_election(probe, PATH) == pause
        await wait_for(lambda: c.active() == [new] and bool(new.rec.leases), 20)
        assert any(e.kind == "fence" for e in c.history.events)  # the crashed one, first
        await _terms(probe, [old, new])


@pytest.mark.anyio
async def test_a_graceful_quit_during_a_pause_hands_over_on_resume(peer_net: Net) -> None:
    async with cluster(peer_net) as c:
        old, new, probe = await _leading(c)
        await pause_election(probe, PATH)
        old.quit()
        await old.done.wait()
        await wait_for(lambda: new.elector._machine.phase is Phase.PAUSED, 20)
        assert c.active() == []
        await resume_election(probe, PATH)
        await wait_for(lambda: c.active() == [new] and bool(new.rec.leases), 20)
        assert not any(e.kind == "fence" for e in c.history.events)  # it resigned
        await _terms(probe, [old, new])


@pytest.mark.anyio
@pytest.mark.parametrize("peer_net", ["memory", "sqlite"], indirect=True)  # ZooKeeper: the CLI's
async def test_a_refused_fence_is_recorded_for_status(peer_net: Net) -> None:
    async with cluster(peer_net) as c:
        old, new, probe = await _leading(c)
        new.rec.refuse_fence = 1  # the first try is refused, the next one works
        await c.crash(old)
        await wait_for(lambda: c.active() == [new] and bool(new.rec.leases), 20)
        await _terms(probe, [old, new])
        found = await election_status(probe, PATH)
        failure = found.fence_failure
        assert failure is not None and failure.by == new.elector.identity
        assert failure.old == old.name and failure.count == 1
        assert "injected" in failure.error
        assert found.last_term is not None and found.last_term.identity == new.elector.identity
        assert found.last_term.cause.endswith(f"(fenced {old.name!r})")  # once, after the retry
