"""`ha pause` against a graceful failover request (ha/admin/pause.py, ha/admin/failover.py).

The pause clears a pending request in the transaction that writes the pause node; the active
takes a request (marks it ceding, at the version it read) before it cedes, so exactly one of
the two lands: a request cleared first is not taken, a request taken first makes the pause
refuse. The supervisor's loop (ha/membership/follow.py) is run against each order, with the
pause landing in the window between its reads and its take, and with a request that got in
after a pause. A real elector leads, on every backend (the transactions check versions, which
each backend keeps its own way), under asyncio and trio; the whole story with `ha run`
processes is tests/cli/test_pause_pending.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from ha import admin
from ha.drivers.base import Driver
from ha.election.elector import Elector
from ha.election.nodes import ElectionNodes
from ha.errors import NoNode
from ha.membership.follow import Wakeup, follow_failover
from ha.membership.rules import Decision, Eligibility
from tests.support.contenders import Work, wait_until

pytestmark = pytest.mark.anyio

PATH = "/svc"
FAILOVER = ElectionNodes(PATH).failover


@asynccontextmanager
async def leading(backend: Any) -> AsyncIterator[tuple[Driver, Elector]]:
    """An elector 'a' leading PATH, registered as an `ha run` member, and a driver to operate."""
    async with backend.driver(session_timeout=4.0) as own, backend.driver() as driver:
        e = Elector(own, PATH, "a")
        async with anyio.create_task_group() as tg:
            tg.start_soon(e.run, Work())
            try:
                lease = await wait_until(lambda: e.lease, "a active")
                await admin.write_member(driver, PATH, admin.Member(b"a", "active", lease.epoch))
                yield driver, e
            finally:
                e.quit()


async def ask(driver: Driver) -> tuple[admin.FailoverRequest, int]:
    """`ha failover` (to any standby): the request and its node's version."""
    request = await admin.request_failover(driver, PATH, force=True, by="op")
    _, stat = await driver.get(FAILOVER)
    return request, stat.version


def before_next(driver: Driver, method: str, first: Callable[[], Awaitable[Any]]) -> list[Any]:
    """Run ``first`` just before the driver's next call of ``method`` (once); its result is
    appended to the list returned."""
    real = getattr(driver, method)
    done: list[Any] = []

    async def hooked(*args: Any, **kwargs: Any) -> Any:
        setattr(driver, method, real)
        done.append(await first())
        return await real(*args, **kwargs)

    setattr(driver, method, hooked)
    return done


async def test_a_pause_clears_a_pending_request_in_its_transaction(backend: Any) -> None:
    async with leading(backend) as (driver, _):
        request, _ = await ask(driver)
        paused = await admin.pause_election(driver, PATH)
        assert not paused.already and paused.cleared == request
        assert paused.pause.active == b"a"
        assert await admin.read_failover(driver, PATH) is None
        status = await admin.election_status(driver, PATH)
        assert status.paused == paused.pause and not status.failover_pending
        again = await admin.pause_election(driver, PATH)
        assert again == (paused.pause, True, None)
        # and while paused, `ha failover` is refused
        with pytest.raises(admin.FailoverError, match="is paused"):
            await admin.request_failover(driver, PATH, force=True)


async def test_a_request_written_while_the_pause_commits_is_cleared_too(backend: Any) -> None:
    async with leading(backend) as (driver, e):
        # a request of an earlier term is there (history): the pause checks it unchanged
        old = admin.FailoverRequest("old", b"z", 1, None, 5.0, 0.0, "op")
        await driver.create(FAILOVER, old.encode())
        # `ha failover` writes a pending one between the pause's reads and its transaction
        raced = before_next(driver, "transaction", lambda: ask(driver))
        paused = await admin.pause_election(driver, PATH)
        [(request, _)] = raced
        assert paused.cleared == request and not paused.already
        assert await admin.read_failover(driver, PATH) is None
        assert e.lease is not None  # nobody was asked to move


async def test_a_request_the_active_took_makes_the_pause_refuse(backend: Any) -> None:
    async with leading(backend) as (driver, e):
        request, version = await ask(driver)
        await admin.take_failover(driver, PATH, request, version)
        refused = "'a' is handing the lead to any standby now .* pause once the new active leads"
        with pytest.raises(admin.PauseRefused, match=refused):
            await admin.pause_election(driver, PATH)
        assert await admin.read_pause(driver, PATH) is None
        assert await admin.read_failover(driver, PATH) == dataclasses.replace(request, ceding=True)
        e.quit()  # the handover done (nobody else here): the request is history
        await wait_until(lambda: e.lease is None, "a gone")
        with anyio.fail_after(5):
            while (await admin.election_status(driver, PATH)).holder is not None:
                await anyio.sleep(0.01)
        paused = await admin.pause_election(driver, PATH)
        assert not paused.already and paused.cleared is None


async def test_a_request_the_pause_cleared_cannot_be_taken(backend: Any) -> None:
    async with leading(backend) as (driver, _):
        request, version = await ask(driver)
        await admin.pause_election(driver, PATH)
        with pytest.raises(NoNode):
            await admin.take_failover(driver, PATH, request, version)


async def test_ha_failover_waiting_says_when_the_pause_cleared_its_request(backend: Any) -> None:
    async with leading(backend) as (driver, _):
        request, _ = await ask(driver)
        await admin.pause_election(driver, PATH)
        with anyio.fail_after(5), pytest.raises(admin.FailoverError, match="/svc was paused"):
            await admin.wait_for_failover(driver, PATH, request)


# --- the active's loop ------------------------------------------------------------------------


@asynccontextmanager
async def following(
    driver: Driver, e: Elector
) -> AsyncIterator[tuple[Eligibility, list[Decision]]]:
    """a's failover loop, as its supervisor runs it: the rules and the decisions acted on."""
    rules = Eligibility(b"a", health_check=False)
    decisions: list[Decision] = []
    wakeup = Wakeup()

    def lead() -> int | None:
        return None if e.lease is None else e.lease.epoch

    with driver.subscribe(FAILOVER, lambda _event: wakeup.set()):
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow_failover, driver, PATH, wakeup, rules, lead, decisions.append)
            yield rules, decisions
            tg.cancel_scope.cancel()


def said(decisions: Sequence[Decision]) -> list[str]:
    return [line for d in decisions for _, line in d.say]


async def test_the_active_takes_the_request_then_cedes(backend: Any) -> None:
    async with leading(backend) as (driver, e):
        request, _ = await ask(driver)
        async with following(driver, e) as (rules, decisions):
            await wait_until(lambda: any(d.quit for d in decisions), "the cede")
        assert said(decisions) == [  # a is alone: forced, it stays out (#30)
            "graceful failover to any standby asked by op: ceding (forced: nobody to hand over to)"
        ]
        assert await admin.read_failover(driver, PATH) == dataclasses.replace(request, ceding=True)
        assert request.id in rules.handled


async def test_a_pause_landing_before_the_take_keeps_the_active(backend: Any) -> None:
    async with leading(backend) as (driver, e):
        request, _ = await ask(driver)
        # the loop has read the request, the queue and no pause; then the pause commits
        paused = before_next(driver, "set", lambda: admin.pause_election(driver, PATH))
        async with following(driver, e) as (rules, decisions):
            await wait_until(lambda: paused, "the pause, just before the take")
            # the take failed; the loop read again (soon: pending) and found nothing
            await wait_until(lambda: len(decisions) >= 3 and not rules.pending, "read again")
        assert paused[0].cleared == request
        assert not any(d.quit for d in decisions) and said(decisions) == []
        assert e.lease is not None and rules.verdict(anyio.current_time()).eligible
        assert await admin.read_failover(driver, PATH) is None


async def test_a_request_that_got_in_after_a_pause_is_dropped(backend: Any) -> None:
    async with leading(backend) as (driver, e):
        status = await admin.election_status(driver, PATH)
        await admin.pause_election(driver, PATH)
        # `ha failover` read the election before the pause (not paused), then wrote
        assert status.epoch is not None
        request = admin.FailoverRequest("r", b"a", status.epoch, None, 5.0, 0.0, "op")
        await driver.create(FAILOVER, request.encode())
        async with following(driver, e) as (rules, decisions):
            await wait_until(lambda: request.id in rules.handled, "the request read")
        assert said(decisions) == [
            "failover to any standby dropped: the election is paused; staying active"
        ]
        assert not any(d.quit or d.take for d in decisions) and e.lease is not None
        assert await admin.read_failover(driver, PATH) == request  # not taken
