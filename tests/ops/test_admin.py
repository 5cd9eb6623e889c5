"""Operating an election from outside: status, format, failover requests (memory backend)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from typing import Any

import anyio
import pytest

from ha import admin
from ha.drivers.memory import MemoryCluster, MemoryDriver
from ha.election.elector import Elector
from ha.election.lease import Lease
from ha.election.machine import State
from ha.election.nodes import Breadcrumb, encode_breadcrumb
from ha.errors import ConfigurationError

pytestmark = pytest.mark.anyio

_names = itertools.count()


class Work:
    async def become_active(self, lease: Lease) -> None:
        await anyio.sleep_forever()


async def wait_until(check: Callable[[], Any], what: str) -> Any:
    with anyio.move_on_after(10.0):
        while True:
            found = check()
            if found:
                return found
            await anyio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


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
            async with elector(name, "b") as b:
                await wait_until(lambda: b.state is State.STANDBY, "b standby")
                status = await admin.election_status(driver, "/svc")
                assert status.exists
                assert status.active == b"a" and status.holder == b"a"
                assert status.epoch == 1 and status.leader == (b"a", 1)
                assert status.breadcrumb == Breadcrumb(b"a", 1)
                assert status.since is not None and status.since > 0
                assert status.problems == ()
                doc = status.to_json()
                assert doc["active"] == "a" and doc["epoch"] == 1
                assert doc["breadcrumb"]["identity"] == "a" and doc["breadcrumb"]["valid"]
        # both quit without fencing: no breadcrumb, no active, the epoch stays
        status = await admin.election_status(driver, "/svc")
        assert status.active is None and status.breadcrumb_raw is None
        assert status.epoch is not None and status.epoch >= 1


async def test_status_reports_odd_contents_instead_of_failing() -> None:
    async with cluster() as name, MemoryDriver(name) as driver:
        await driver.create("/svc/breadcrumb", b"\xff garbage", makepath=True)
        await driver.create("/svc/epoch", b"seven")
        await driver.create("/svc/failover", b"{}")
        await driver.create("/svc/lock", b"foreign-tool", ephemeral=True)
        status = await admin.election_status(driver, "/svc")
        assert status.active is None and status.holder == b"foreign-tool"
        assert status.breadcrumb is None and status.breadcrumb_raw == b"\xff garbage"
        assert len(status.problems) == 3
        assert status.to_json()["breadcrumb"]["valid"] is False


async def test_a_holder_that_has_not_committed_is_not_active() -> None:
    async with cluster() as name, MemoryDriver(name) as driver:
        crumb = encode_breadcrumb(Breadcrumb(b"old", 4))
        await driver.create("/svc/breadcrumb", crumb, makepath=True)
        await driver.create("/svc/epoch", b"4")
        await driver.create("/svc/lock", b"new", ephemeral=True)
        status = await admin.election_status(driver, "/svc")
        assert status.holder == b"new" and status.active is None and status.epoch == 4


async def test_format_creates_and_refuses_while_the_lock_is_held() -> None:
    async with cluster() as name, MemoryDriver(name) as driver:
        result = await admin.format_election(driver, "/a/b/svc")
        assert result.created and result.removed == ()
        assert await driver.exists("/a/b/svc") is not None
        assert not (await admin.format_election(driver, "/a/b/svc")).created
        async with elector(name, "a", "/a/b/svc") as a:
            await wait_until(lambda: a.state is State.ACTIVE, "a active")
            with pytest.raises(admin.ElectionInUse, match="'a' holds its lock"):
                await admin.format_election(driver, "/a/b/svc")
        with pytest.raises(ConfigurationError):
            await admin.format_election(driver, "/")
        with pytest.raises(ConfigurationError):
            await admin.format_election(driver, "relative")


async def test_format_with_force_keeps_a_live_lock_and_the_breadcrumb() -> None:
    """Item 4 of the safety issue: a forced format deposed the active by deleting its lock and
    breadcrumb, so a standby started at once, without fencing, while the old active could still
    be stopping. Now it clears only what no live session holds."""
    async with cluster() as name, MemoryDriver(name) as driver:
        async with elector(name, "a") as a:
            await wait_until(lambda: a.state is State.ACTIVE, "a active")
            await admin.write_member(driver, "/svc", admin.Member(b"x", "standby"))
            await driver.create("/svc/failover", b"{}")
            crumb = await driver.get("/svc/breadcrumb")
            result = await admin.format_election(driver, "/svc", force=True)
            assert result.holder == b"a" and result.epoch == 1 and not result.epoch_reset
            assert set(result.removed) == {"failover"}  # x's member node is ephemeral: kept
            assert await driver.get("/svc/breadcrumb") == crumb
            await anyio.sleep(0.1)
            assert a.state is State.ACTIVE and a.lease is not None and a.lease.epoch == 1


async def test_format_with_force_clears_a_lock_no_session_holds() -> None:
    async with cluster() as name, MemoryDriver(name) as driver:
        await driver.create("/svc/lock", b"foreign", makepath=True)  # persistent: nobody's
        await driver.create("/svc/members/gone", b"{}", makepath=True)
        result = await admin.format_election(driver, "/svc", force=True)
        assert set(result.removed) == {"lock", "members"} and result.holder is None
        assert await driver.exists("/svc/lock") is None


async def test_format_with_force_resets_an_unreadable_epoch() -> None:
    async with cluster() as name, MemoryDriver(name) as driver:
        await driver.create("/svc/epoch", b"garbage", makepath=True)
        result = await admin.format_election(driver, "/svc", force=True)
        assert result.epoch_reset and result.epoch == 0
        raw, stat = await driver.get("/svc/epoch")
        assert raw == b"0" and stat.version == 1  # a new version: old fenced writes still fail


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
                    a.quit()
                    await starting.__aexit__(None, None, None)
                elif len(leaders) == 3:
                    break
        assert leaders == [None, (b"a", 1), None]


def test_requests_and_members_round_trip() -> None:
    request = admin.FailoverRequest("id1", b"a\xff", 3, b"b", 2.5, 10.0, "me")
    assert admin.FailoverRequest.decode(request.encode()) == request
    assert admin.FailoverRequest.decode(b"not json") is None
    assert admin.FailoverRequest.decode(b'{"format": "ha.failover/1", "epoch": true}') is None
    member = admin.Member(b"host/a:1", "standby", None, "h", 12, 1.0, "")
    assert admin.Member.decode(member.encode()) == member
    assert admin.Member.decode(b"[]") is None
    assert admin.member_path("/svc", b"host/a:1") == "/svc/members/host%2Fa%3A1"
