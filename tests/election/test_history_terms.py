"""The history of terms (ha/election/history.py, issue 30 item 7) and the pause's story on a
standby: a term resumed in the same session keeps its start; each term gets an end time and
an end cause once the next leader records its own; a standby that finds itself first while
the election is paused says so in its log. Real electors, under asyncio and trio."""

from __future__ import annotations

import logging

import anyio
import pytest

from ha.admin import pause_election, resume_election
from ha.drivers.base import Driver
from ha.election.history import Term, read_history
from ha.election.machine import Phase, State
from ha.election.nodes import ElectionNodes
from tests.support.harness import Cluster, MemoryNet, Node, cluster, wait_for
from tests.support.peers import peer_net

__all__ = ("peer_net",)  # the fixture: memory, sqlite and ZooKeeper

pytestmark = pytest.mark.anyio

PATH = "/svc"  # the harness's election


async def terms(probe: Driver, count: int) -> tuple[Term, ...]:
    """The history once it holds ``count`` terms, the newest one's predecessors ended
    (recorded in the background by each new leader: waited for)."""
    found: tuple[Term, ...] = ()
    with anyio.move_on_after(20):
        while True:
            read = await read_history(probe, ElectionNodes(PATH))
            found = () if read is None else read[0].terms
            if len(found) == count:
                return found
            await anyio.sleep(0.05)
    raise AssertionError(f"the history holds {len(found)} terms, not {count}: {found}")


async def two(c: Cluster) -> tuple[Node, Node, Driver]:
    a = await c.add("a", session_timeout=c.net.session_timeout)
    await wait_for(lambda: a.state is State.ACTIVE, 20)
    b = await c.add("b", session_timeout=c.net.session_timeout)
    await wait_for(c.settled, 20)
    probe = await c.stack.enter_async_context(c.probe())
    await terms(probe, 1)
    return a, b, probe


async def test_a_term_resumed_in_the_same_session_keeps_its_start() -> None:
    """The active loses contact while paused (it stops: NEUTRAL), gets it back in the same
    session (first in a paused queue: it waits), and the pause ends: it leads again with the
    same epoch. One term, started when it first took the lead."""
    async with cluster(MemoryNet()) as c:
        a, b, probe = await two(c)
        (first,) = await terms(probe, 1)
        await pause_election(probe, PATH)
        await c.fault("disconnect", a)
        await wait_for(lambda: a.state is State.NEUTRAL, 20)
        await c.fault("reconnect", a)
        await wait_for(lambda: a.elector._machine.phase is Phase.PAUSED, 20)
        await resume_election(probe, PATH)
        await wait_for(lambda: a.state is State.ACTIVE and len(a.rec.leases) == 2, 20)
        assert a.rec.leases[1].epoch == a.rec.leases[0].epoch == first.epoch  # the same term
        await anyio.sleep(0.5)  # its record of the resumed term, written in the background
        assert await terms(probe, 1) == (first,)  # the start as first recorded


async def test_each_term_ends_when_the_next_leader_records_its_own(peer_net: object) -> None:
    async with cluster(peer_net) as c:  # type: ignore[arg-type]
        a, b, probe = await two(c)
        a.quit()  # graceful: b takes over with nothing to fence
        await wait_for(lambda: b.state is State.ACTIVE, 20)
        ta, tb = await terms(probe, 2)
        assert (ta.identity, tb.identity) == (b"a", b"b") and tb.ended is None
        assert ta.ended == tb.started and ta.end_cause == "resigned: b took over"
        await c.add("c", session_timeout=c.net.session_timeout)
        await wait_for(c.settled, 20)
        await c.crash(b)  # its breadcrumb is left: c fences it and takes over
        await wait_for(lambda: [n.name for n in c.active()] == ["c"], 20)
        ta2, tb2, tc = await terms(probe, 3)
        assert ta2 == ta  # an ended term stays as it was
        assert tb2.ended == tc.started and tc.ended is None
        assert tb2.end_cause == "lost its session: c took over and fenced it"


async def test_a_standby_first_in_a_paused_election_says_so(
    peer_net: object, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ha")
    async with cluster(peer_net) as c:  # type: ignore[arg-type]
        a, b, probe = await two(c)
        await pause_election(probe, PATH)
        await c.crash(a)  # lost during the pause: nobody takes the lead
        await wait_for(lambda: b.elector._machine.phase is Phase.PAUSED, 20)
        said = [r for r in caplog.records if "first in the queue while" in r.getMessage()]
        assert len(said) == 1, [r.getMessage() for r in caplog.records]
        assert said[0].getMessage() == (
            "/svc: first in the queue while the election is paused: the active we stood by"
            " for is gone, and nobody leads until `ha resume /svc` (then we take the lead)"
        )
        assert said[0].identity == "b"  # type: ignore[attr-defined]
        assert b.state is State.STANDBY  # its public state is unchanged (P15)
        await resume_election(probe, PATH)
        await wait_for(lambda: b.state is State.ACTIVE, 20)
