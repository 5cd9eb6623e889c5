"""The preferred leader's rules (``ha/membership/handback.py``): pure, no event loop.

What a join publishes, and whom the active hands the lead to: the settled contender of the
highest priority above its own, never one that has just joined or keeps rejoining.
"""

from __future__ import annotations

import math
from contextlib import AsyncExitStack

import anyio
import pytest

from ha.admin import election_status
from ha.election.elector import Elector
from ha.election.names import (
    MAX_PRIORITY,
    QueueEntry,
    check_priority,
    nonce,
    parse_entry,
    priority_of,
    ticket_for,
)
from ha.errors import ConfigurationError
from ha.membership.handback import Preference

_seq = iter(range(1, 1 << 30))


def entry(identity: bytes, priority: int = 0) -> QueueEntry:
    """A queue node as a join with ``priority`` names it (a fresh node each time)."""
    seq = next(_seq)
    name = f"{ticket_for(identity, nonce(seq * 7919, priority))}_{seq:010d}"
    found = parse_entry(name)
    assert found is not None
    return found


def test_a_join_publishes_its_priority_in_its_ticket() -> None:
    for identity in (b"host-a", b"host_b:7077", "h\u00f6st/c".encode()):
        for priority in (0, 1, 10, MAX_PRIORITY):
            found = entry(identity, priority)
            assert found.identity == identity  # the queue still reads the identity
            assert priority_of(found.ticket) == priority
    assert nonce(0xABC, 0) == "00000abc"  # no preference: the nonce as before
    assert priority_of("host-a_00000abc") == 0
    assert priority_of("host-a_1") == 0  # the machine's counted nonces (tests)
    assert priority_of("host-a_zzzzzzzzp5") == 0  # foreign: no priority read into it


@pytest.mark.parametrize("bad", [-1, MAX_PRIORITY + 1, 1.5, True, "3", None])
def test_a_priority_out_of_range_is_refused(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="priority must be an integer"):
        check_priority(bad)
    with pytest.raises(ConfigurationError):
        Preference(-1.0)


def test_a_higher_priority_is_handed_the_lead_once_settled() -> None:
    rules = Preference(settle=10.0)
    me, low, high = entry(b"me", 5), entry(b"low", 3), entry(b"high", 7)
    queue = [me, low, high]
    first = rules.look(100.0, queue, b"me", 5)
    assert first.target is None and first.wake_at == 110.0  # seen now: settled at 110
    assert rules.look(109.9, queue, b"me", 5).target is None
    assert rules.look(110.0, queue, b"me", 5).target == high


def test_none_above_our_priority_means_nobody() -> None:
    rules = Preference(settle=0.0)
    me = entry(b"me", 5)
    queue = [me, entry(b"same", 5), entry(b"lower", 1), entry(b"none")]
    found = rules.look(0.0, queue, b"me", 5)
    assert found.target is None and found.wake_at == math.inf
    # an identity of ours with another node (a join from before) is never a candidate
    assert rules.look(1.0, [me, entry(b"me", 9)], b"me", 5).target is None


def test_the_highest_wins_and_the_first_in_the_queue_among_equals() -> None:
    rules = Preference(settle=0.0)
    me = entry(b"me")
    two, nine_first, nine_second = entry(b"two", 2), entry(b"nine-1", 9), entry(b"nine-2", 9)
    found = rules.look(0.0, [me, two, nine_first, nine_second], b"me", 0)
    assert found.target == nine_first


def test_a_flapping_contender_never_settles() -> None:
    """Every rejoin is a new node: its time in the queue starts again."""
    rules = Preference(settle=10.0)
    me = entry(b"me")
    now = 0.0
    for _ in range(20):
        flapper = entry(b"flapper", 9)  # joined again since the last look
        assert rules.look(now, [me, flapper], b"me", 0).target is None
        now += 6.0  # each stay is shorter than the settle time
        assert rules.look(now, [me, flapper], b"me", 0).target is None
        now += 1.0  # gone, then back
        assert rules.look(now, [me], b"me", 0).target is None
    stays = entry(b"flapper", 9)
    rules.look(now, [me, stays], b"me", 0)
    assert rules.look(now + 10.0, [me, stays], b"me", 0).target == stays


def test_a_settled_candidate_that_is_not_yet_best_waits_for_the_best_to_settle() -> None:
    rules = Preference(settle=10.0)
    me, mid = entry(b"me"), entry(b"mid", 4)
    rules.look(0.0, [me, mid], b"me", 0)
    top = entry(b"top", 8)
    found = rules.look(10.0, [me, mid, top], b"me", 0)
    assert found.target == mid  # settled: the lead goes to it now (top is not healthy yet)
    assert found.wake_at == 20.0


def test_forget_starts_every_count_again() -> None:
    rules = Preference(settle=10.0)
    me, high = entry(b"me"), entry(b"high", 1)
    rules.look(0.0, [me, high], b"me", 0)
    rules.forget()  # we stopped leading in between
    assert rules.look(10.0, [me, high], b"me", 0).target is None
    assert rules.look(20.0, [me, high], b"me", 0).target == high


# --- through the real API: what an Elector publishes ---------------------------------------------


class Leads:
    async def become_active(self, lease: object) -> None:
        await anyio.sleep_forever()


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["memory", "sqlite", "zookeeper"])
async def test_an_electors_priority_is_published_with_its_join(
    name: str, request: pytest.FixtureRequest
) -> None:
    backend = request.getfixturevalue(f"{name}_backend")
    with pytest.raises(ConfigurationError, match="priority must be an integer"):
        Elector(backend.driver(), "/svc", "x", priority=-1)
    priorities = {b"a": 0, b"b": 7, b"c": 3}
    async with AsyncExitStack() as stack:
        electors = []
        for identity, priority in priorities.items():
            driver = await stack.enter_async_context(backend.driver(session_timeout=2.0))
            electors.append(Elector(driver, "/svc", identity, priority=priority))
        tg = await stack.enter_async_context(anyio.create_task_group())  # closed first
        for elector in electors:
            await tg.start(elector.run, Leads())
        with anyio.fail_after(15):
            while len(await electors[0].contenders()) < 3:
                await anyio.sleep(0.01)
        status = await election_status(electors[0].driver, "/svc")
        assert {c.identity: c.priority for c in status.contenders} == priorities
        shown = {c["identity"]: c["priority"] for c in status.to_json()["contenders"]}
        assert shown == {"a": 0, "b": 7, "c": 3}
        for elector in electors:
            elector.quit()
