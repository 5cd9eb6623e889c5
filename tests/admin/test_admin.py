"""Operating an election from outside: status, format, failover requests (memory backend)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager

import anyio
import pytest

from ha import admin
from ha.drivers.memory import MemoryCluster, MemoryDriver
from ha.election.elector import Elector
from ha.election.machine import State
from ha.election.names import Breadcrumb, encode_breadcrumb, parse_entry, ticket_for
from ha.election.nodes import ElectionNodes
from ha.errors import ConfigurationError
from tests.support.contenders import Work, wait_until

pytestmark = pytest.mark.anyio

_names = itertools.count()


@asynccontextmanager
async def cluster() -> AsyncIterator[str]:
    name = f"admin-{next(_names)}"
    try:
        yield name
    finally:
        MemoryCluster.drop(name)


@asynccontextmanager
async def elector(name: str, identity: str, path: str = "/svc") -> AsyncIterator[Elector]:
    async with MemoryDriver(name, session_timeout=1.0) as driver:
        e = Elector(driver, path, identity)
        async with anyio.create_task_group() as tg:
            tg.start_soon(e.run, Work())
            try:
                yield e
            finally:
                e.quit()


async def test_status_of_an_election_that_does_not_exist() -> None:
    async with cluster() as name, MemoryDriver(name) as driver:
        status = await admin.election_status(driver, "/nothing")
        assert not status.exists and status.active is None and status.leader is None
        assert status.to_json()["exists"] is False


async def test_status_shows_the_active_its_epoch_and_breadcrumb() -> None:
    async with cluster() as name, MemoryDriver(name) as driver:
        async with elector(name, "a") as a:
            await wait_until(lambda: a.state is State.ACTIVE, "a active")
            assert a.lease is not None
            first = a.lease.epoch
            async with elector(name, "b") as b:
                await wait_until(lambda: b.state is State.STANDBY, "b standby")
                status = await admin.election_status(driver, "/svc")
                assert status.exists
                assert status.active == b"a" and status.holder == b"a"
                assert status.epoch == first and status.leader == (b"a", first)
                assert status.breadcrumb == Breadcrumb(b"a", first)
                assert status.since is not None and status.since > 0
                assert status.problems == () and status.leftovers == ()
                doc = status.to_json()
                assert doc["active"] == "a" and doc["epoch"] == first
                assert doc["breadcrumb"]["identity"] == "a" and doc["breadcrumb"]["valid"]
                assert [c["identity"] for c in doc["contenders"]] == ["a", "b"]
        # both quit without fencing: no breadcrumb, no active, nobody in the queue
        status = await admin.election_status(driver, "/svc")
        assert status.active is None and status.breadcrumb_raw is None
        assert status.contenders == () and status.leftovers == () and status.epoch is None
        # and the next leader's epoch is greater: tokens never go back
        async with elector(name, "c") as c:
            await wait_until(lambda: c.state is State.ACTIVE, "c active")
            status = await admin.election_status(driver, "/svc")
            assert status.leader is not None and status.leader[0] == b"c"
            assert status.leader[1] > first


async def test_status_lists_the_queue_in_order() -> None:
    """The issue's "list of contenders in order": the leader first, then the standbys in the
    order they would take over (join order), each with its epoch."""
    async with cluster() as name, MemoryDriver(name) as driver:
        async with elector(name, "a") as a:
            await wait_until(lambda: a.state is State.ACTIVE, "a active")
            async with elector(name, "c") as c:
                await wait_until(lambda: c.state is State.STANDBY, "c standby")
                async with elector(name, "b") as b:
                    await wait_until(lambda: b.state is State.STANDBY, "b standby")
                    status = await admin.election_status(driver, "/svc")
                    assert [x.identity for x in status.contenders] == [b"a", b"c", b"b"]
                    assert [x.identity for x in status.standbys] == [b"c", b"b"]
                    epochs = [x.epoch for x in status.contenders]
                    assert epochs == sorted(epochs) and len(set(epochs)) == 3
                    assert all(x.session is not None for x in status.contenders)
                    assert [x.breadcrumb for x in status.contenders] == [
                        Breadcrumb(x.identity, x.epoch) for x in status.contenders
                    ]
                    a.quit()  # a hands over to the next in the queue: c
                    await wait_until(lambda: c.state is State.ACTIVE, "c active")
                    status = await admin.election_status(driver, "/svc")
                    assert [x.identity for x in status.contenders] == [b"c", b"b"]
                    assert status.leader == (b"c", epochs[1]) and status.leftovers == ()


async def test_status_shows_a_crashed_leaders_breadcrumb_until_it_is_fenced() -> None:
    """A crashed leader leaves its breadcrumb: the next in the queue leads but is not active
    until it has fenced it; a crashed standby's breadcrumb is shown as such."""
    async with cluster() as name, MemoryDriver(name) as driver:
        await admin.format_election(driver, "/svc")
        nodes = ElectionNodes("/svc")
        crashed = await nodes.join(driver, ticket_for(b"old", "x1"), Breadcrumb(b"old"))
        ghost = await nodes.join(driver, ticket_for(b"new", "x2"), Breadcrumb(b"new"))
        await driver.delete(nodes.node(crashed))  # its session ended: the breadcrumb stays
        status = await admin.election_status(driver, "/svc")
        assert status.holder == b"new" and status.active is None and status.leader is None
        (left,) = status.leftovers
        assert left.awaits_fence and left.breadcrumb is not None
        assert left.breadcrumb.identity == b"old" and left.epoch < status.contenders[0].epoch
        assert status.to_json()["leftovers"][0]["breadcrumb"]["identity"] == "old"
        # fenced and cleared: active
        await nodes.drop_crumb(driver, parse_entry(crashed).ticket)  # type: ignore[union-attr]
        status = await admin.election_status(driver, "/svc")
        assert status.leader == (b"new", status.contenders[0].epoch) and status.leftovers == ()
        # a standby that crashed behind the leader: newer, no fence is awaited
        behind = await nodes.join(driver, ticket_for(b"late", "x3"), Breadcrumb(b"late"))
        await driver.delete(nodes.node(behind))
        status = await admin.election_status(driver, "/svc")
        assert status.active == b"new"
        (left,) = status.leftovers
        assert not left.awaits_fence and left.breadcrumb == Breadcrumb(b"late", left.epoch)
        await driver.delete(nodes.node(ghost))
        status = await admin.election_status(driver, "/svc")
        assert status.holder is None and all(x.awaits_fence for x in status.leftovers)


async def test_status_reports_odd_contents_instead_of_failing() -> None:
    async with cluster() as name, MemoryDriver(name) as driver:
        await admin.format_election(driver, "/svc")
        await driver.create("/svc/b/somebody_x", b"\xff garbage")
        await driver.create("/svc/n/not-an-entry", b"", ephemeral=True)
        await driver.create("/svc/failover", b"{}")
        await driver.create("/svc/n/foreign-tool_x_0000000001", b"foreign-tool")  # persistent
        await driver.create("/svc/b/foreign-tool_x", b"\xfe")
        status = await admin.election_status(driver, "/svc")
        assert status.holder == b"foreign-tool" and status.holder_session is None
        assert status.breadcrumb is None and status.breadcrumb_raw == b"\xfe"
        assert status.leftovers[0].raw == b"\xff garbage"
        assert status.leftovers[0].breadcrumb is None
        assert len(status.problems) == 5, status.problems
        doc = status.to_json()
        assert doc["breadcrumb"]["valid"] is False
        assert doc["leftovers"][0]["breadcrumb"]["valid"] is False


async def test_a_leader_that_has_not_fenced_is_not_active() -> None:
    async with cluster() as name, MemoryDriver(name) as driver:
        await admin.format_election(driver, "/svc")
        await driver.create("/svc/b/old_x", encode_breadcrumb(Breadcrumb(b"old")))
        nodes = ElectionNodes("/svc")
        new = await nodes.join(driver, ticket_for(b"new", "y"), Breadcrumb(b"new"))
        status = await admin.election_status(driver, "/svc")
        assert status.holder == b"new" and status.active is None
        assert status.epoch == (await driver.get(nodes.node(new)))[1].created
        # unless its `ha run` member says it is active at that epoch (it fenced, and the
        # breadcrumbs' deletion, best effort, failed)
        member = admin.Member(b"new", "active", status.epoch, since=12.0)
        await admin.write_member(driver, "/svc", member)
        status = await admin.election_status(driver, "/svc")
        assert status.active == b"new" and status.since == 12.0


async def test_format_creates_and_refuses_while_a_contender_is_queued() -> None:
    async with cluster() as name, MemoryDriver(name) as driver:
        result = await admin.format_election(driver, "/a/b/svc")
        assert result.created and result.removed == ()
        assert await driver.exists("/a/b/svc") is not None
        assert await driver.children("/a/b/svc") == ["b", "n"]
        assert not (await admin.format_election(driver, "/a/b/svc")).created
        async with elector(name, "a", "/a/b/svc") as a:
            await wait_until(lambda: a.state is State.ACTIVE, "a active")
            with pytest.raises(admin.ElectionInUse, match="'a' is in its queue"):
                await admin.format_election(driver, "/a/b/svc")
        with pytest.raises(ConfigurationError):
            await admin.format_election(driver, "/")
        with pytest.raises(ConfigurationError):
            await admin.format_election(driver, "relative")


async def test_format_with_force_keeps_the_live_queue_and_the_breadcrumbs() -> None:
    """Item 4 of the safety issue: a forced format deposed the active by deleting its lock and
    breadcrumb, so a standby started at once, without fencing, while the old active could still
    be stopping. Now it clears only what no live session holds: the leader's and a standby's
    queue nodes stay, and so does every breadcrumb, a crashed leader's too."""
    async with cluster() as name, MemoryDriver(name) as driver:
        async with elector(name, "a") as a:
            await wait_until(lambda: a.state is State.ACTIVE, "a active")  # a joins first
            async with elector(name, "b") as b:
                await wait_until(lambda: b.state is State.STANDBY, "b standby")
                assert a.lease is not None
                await admin.write_member(driver, "/svc", admin.Member(b"x", "standby"))
                await driver.create("/svc/failover", b"{}")
                await driver.create("/svc/b/crashed_x", encode_breadcrumb(Breadcrumb(b"crashed")))
                queue = await driver.children("/svc/n")
                crumbs = {
                    t: await driver.get(f"/svc/b/{t}") for t in await driver.children("/svc/b")
                }
                result = await admin.format_election(driver, "/svc", force=True)
                assert result.holder == b"a" and result.epoch == a.lease.epoch
                assert set(result.removed) == {"failover"}  # x's member node is ephemeral: kept
                assert await driver.children("/svc/n") == queue
                assert {t: await driver.get(f"/svc/b/{t}") for t in crumbs} == crumbs
                await anyio.sleep(0.1)
                assert a.state is State.ACTIVE and a.lease is not None
                assert b.state is State.STANDBY


async def test_format_with_force_clears_queue_nodes_no_session_holds() -> None:
    async with cluster() as name, MemoryDriver(name) as driver:
        await admin.format_election(driver, "/svc")
        # persistent: nobody's, and it would lead for ever
        await driver.create("/svc/n/foreign_x_0000000001", b"foreign")
        await driver.create("/svc/n/junk", b"")
        await driver.create("/svc/members/gone", b"{}", makepath=True)
        with pytest.raises(admin.ElectionInUse, match="'foreign' is in its queue"):
            await admin.format_election(driver, "/svc")
        result = await admin.format_election(driver, "/svc", force=True)
        assert set(result.removed) == {"n/foreign_x_0000000001", "n/junk", "members"}
        assert result.holder is None and result.epoch is None
        assert await driver.children("/svc/n") == []
        # the queue works again
        async with elector(name, "a") as a:
            await wait_until(lambda: a.state is State.ACTIVE, "a active")


async def test_tokens_never_go_back_across_a_forced_format() -> None:
    """The old counter was kept across a format so that fencing tokens never went back; the
    creation order never does, whatever format removes."""
    async with cluster() as name, MemoryDriver(name) as driver:
        async with elector(name, "a") as a:
            await wait_until(lambda: a.state is State.ACTIVE, "a active")
            assert a.lease is not None
            old = a.lease.epoch
        await admin.format_election(driver, "/svc", force=True)
        async with elector(name, "b") as b:
            await wait_until(lambda: b.state is State.ACTIVE, "b active")
            assert b.lease is not None and b.lease.epoch > old


async def test_failover_needs_an_active_that_is_a_supervisor() -> None:
    async with cluster() as name, MemoryDriver(name) as driver:
        with pytest.raises(admin.NoActive):
            await admin.request_failover(driver, "/svc")
        async with elector(name, "a") as a:
            await wait_until(lambda: a.state is State.ACTIVE, "a active")
            with pytest.raises(admin.FailoverError, match="not an `ha run` supervisor"):
                await admin.request_failover(driver, "/svc")
            with pytest.raises(ConfigurationError):
                await admin.request_failover(driver, "/svc", cooldown=0)


async def test_watch_status_yields_on_every_change() -> None:
    async with cluster() as name, MemoryDriver(name) as driver:
        leaders: list[object] = []
        started = False
        async with aclosing(admin.watch_status(driver, "/svc", fallback=60)) as statuses:
            async for status in statuses:
                if not leaders or leaders[-1] != status.leader:
                    leaders.append(status.leader)
                if len(leaders) == 1:
                    if started:
                        continue  # another status before the leader shows: start only once
                    started = True
                    await driver.create("/svc", b"")  # the election appears
                    starting = elector(name, "a")
                    a = await starting.__aenter__()
                elif len(leaders) == 2:
                    assert a.lease is not None
                    epoch = a.lease.epoch
                    a.quit()
                    await starting.__aexit__(None, None, None)
                elif len(leaders) == 3:
                    break
        assert leaders == [None, (b"a", epoch), None]


def test_requests_and_members_round_trip() -> None:
    request = admin.FailoverRequest("id1", b"a\xff", 3, b"b", 2.5, 10.0, "me")
    assert admin.FailoverRequest.decode(request.encode()) == request
    assert admin.FailoverRequest.decode(b"not json") is None
    assert admin.FailoverRequest.decode(b'{"format": "ha.failover/1", "epoch": true}') is None
    member = admin.Member(b"host/a:1", "standby", None, "h", 12, 1.0, "")
    assert admin.Member.decode(member.encode()) == member
    assert admin.Member.decode(b"[]") is None
    assert admin.member_path("/svc", b"host/a:1") == "/svc/members/host%2Fa%3A1"
