"""Joining new elections (``nodes.py``): once a driver has met a new election, the next new
ones are joined in one transaction that makes the election and its two folders with the node and
its breadcrumb, not in three or more calls (the join refused, the folders made, the join again).
One process starting ten thousand elections meets ten thousand new ones: on ZooKeeper that way
was half of each join's requests and of the process's CPU. An elector that made its election so
knows where it stands without listing it (``ElectionNodes.enter``): first, nobody to fence.

Run on every backend (the transaction is each driver's own), under asyncio and trio. The calls
are counted by wrapping the driver's methods in place: the nodes are the backend's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import pytest

import ha
from ha.admin.pause import Paused, pause_election
from ha.drivers.base import Driver
from ha.election.machine import Phase
from ha.election.names import Breadcrumb, parse_entry, ticket_for
from ha.election.nodes import ElectionNodes
from ha.testing import History, Recorder, check_history

pytestmark = pytest.mark.anyio

METHODS = ("create", "get", "exists", "set", "delete", "children", "transaction")
METHODS += ("ensure_path", "ensure_paths")


def count_calls(driver: Driver, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The driver's calls from now on, by method (a method calling another counts both)."""
    calls: Counter[str] = Counter()

    def counted(name: str, method: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return await method(*args, **kwargs)

        return call

    for name in METHODS:
        monkeypatch.setattr(driver, name, counted(name, getattr(driver, name)))
    return calls


async def join(driver: Driver, path: str, identity: bytes, nonce: str = "1") -> tuple[str, str]:
    """``identity`` joins the election at ``path``: its ticket and its node's name."""
    ticket = ticket_for(identity, nonce)
    name = await ElectionNodes(path).join(driver, ticket, Breadcrumb(identity, None, b"d"))
    return ticket, name


async def joined(driver: Driver, path: str, ticket: str, name: str) -> None:
    """The join's nodes are as the usual way makes them: the node and its breadcrumb, created
    together, the election's folders persistent, and the node in the queue."""
    nodes = ElectionNodes(path)
    node, crumb = await driver.exists(nodes.node(name)), await driver.exists(nodes.crumb(ticket))
    assert node is not None and crumb is not None
    assert node.created == crumb.created  # one transaction: one creation number
    assert node.ephemeral_owner == driver.session_id and crumb.ephemeral_owner is None
    for folder in (path, nodes.queue, nodes.crumbs):
        stat = await driver.exists(folder)
        assert stat is not None and stat.ephemeral_owner is None
    entry = parse_entry(name)
    assert entry is not None and entry.ticket == ticket
    assert name in [e.name for e in await nodes.entries(driver)]


async def test_after_the_first_a_new_election_is_joined_in_one_transaction(
    backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with backend.driver() as driver:
        await join(driver, "/first", b"me")  # the first new election: the usual way
        for path in ("/a", "/b", "/c"):
            calls = count_calls(driver, monkeypatch)
            ticket, name = await join(driver, path, b"me")
            assert calls == {"transaction": 1}, path
            monkeypatch.undo()
            await joined(driver, path, ticket, name)


async def test_an_election_that_is_there_is_joined_the_usual_way_again(
    backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with backend.driver() as driver:
        await join(driver, "/first", b"me")
        first = await join(driver, "/svc", b"a")  # new: made with the join
        second = await join(driver, "/svc", b"b")  # there already: the usual way
        calls = count_calls(driver, monkeypatch)
        third = await join(driver, "/svc", b"c")  # one transaction, as before any new one
        assert calls == {"transaction": 1}
        monkeypatch.undo()
        queue = await ElectionNodes("/svc").entries(driver)
        assert [e.name for e in queue] == [first[1], second[1], third[1]]  # in join order
        for ticket, name in (first, second, third):
            await joined(driver, "/svc", ticket, name)


async def test_a_new_election_whose_parents_are_missing_is_joined(backend: Any) -> None:
    async with backend.driver() as driver:
        await join(driver, "/first", b"me")
        ticket, name = await join(driver, "/deep/er/svc", b"me")
        await joined(driver, "/deep/er/svc", ticket, name)
        assert await driver.exists("/deep/er") is not None


async def lead_a_first_election(driver: Any, tg: anyio.abc.TaskGroup, identity: str) -> None:
    """The driver's first new election, joined the usual way: it marks the driver, whose next
    new elections are made by the join's transaction."""
    first = ha.Elector(driver, "/first", identity)
    await tg.start(first.run, Recorder(identity, History()))
    with anyio.fail_after(10):
        await first.wait_active()


async def test_an_elector_that_made_its_election_leads_without_listing_and_hands_over(
    backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The short way's place (first, nobody behind, nobody to fence) is one a listing made
    then would have given: a contender joining later stands by, watching the leader, and takes
    over when it resigns, without fencing it."""
    history = History()
    async with backend.driver() as driver, backend.driver() as other:
        async with anyio.create_task_group() as tg:
            await lead_a_first_election(driver, tg, "a")
            calls = count_calls(driver, monkeypatch)
            leader = ha.Elector(driver, "/svc", "a")
            leader.add_listener(history.transition)
            await tg.start(leader.run, Recorder("a", history))
            with anyio.fail_after(10):
                await leader.wait_active()
            assert calls["children"] == calls["ensure_paths"] == 0  # no listing, no folders
            monkeypatch.undo()
            standby = ha.Elector(other, "/svc", "b")
            standby.add_listener(history.transition)
            await tg.start(standby.run, Recorder("b", history))
            with anyio.fail_after(10):
                assert await standby.wait_state(ha.State.STANDBY) is ha.State.STANDBY
            assert standby.statistics().holder == "a"
            leader.quit()
            with anyio.fail_after(10):
                await standby.wait_active()
            tg.cancel_scope.cancel()
    assert not [e for e in history.events if e.kind == "fence"]  # it resigned: nobody fenced
    check_history(history)


async def test_a_pause_written_once_the_join_made_the_election_holds_the_elector(
    backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pause written after the join's transaction made the election, before the elector knows
    where it stands, holds it (PAUSED, not ACTIVE), as the listing after a join did: the pause
    watch's event may come later (sqlite: at the next poll), after the elector took the lead."""
    async with backend.driver() as driver, backend.driver() as admin:
        async with anyio.create_task_group() as tg:
            await lead_a_first_election(driver, tg, "x")
            transaction = driver.transaction
            paused: list[Paused] = []

            async def then_pause(ops: Any) -> Any:
                results = await transaction(ops)
                if not paused and any(getattr(op, "path", "") == "/svc" for op in ops):
                    paused.append(await pause_election(admin, "/svc"))
                return results

            monkeypatch.setattr(driver, "transaction", then_pause)
            elector = ha.Elector(driver, "/svc", "a")
            await tg.start(elector.run, Recorder("a", History()))
            with anyio.fail_after(10):
                while elector.state is not ha.State.ACTIVE:
                    if elector._machine.phase is Phase.PAUSED:
                        break
                    await anyio.sleep(0.01)
            phase, state = elector._machine.phase, elector.state
            tg.cancel_scope.cancel()
    assert paused  # the join's transaction made the election (its first op created it)
    assert (phase, state) == (Phase.PAUSED, ha.State.NEUTRAL)
