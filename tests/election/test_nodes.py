"""The election's nodes: paths, codecs, and each call's answer as the machine's input.

The codecs need no event loop; the calls run on the memory driver (every backend runs them
through the elector's scenario tests), under asyncio and trio.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from ha.drivers.base import Driver
from ha.drivers.memory import MemoryCluster, MemoryDriver
from ha.election import events as ev
from ha.election.nodes import (
    Breadcrumb,
    ElectionNodes,
    decode_breadcrumb,
    decode_epoch,
    encode_breadcrumb,
    encode_epoch,
)
from ha.errors import BadVersion, CorruptData

NODES = ElectionNodes("/svc")
ME, OTHER = b"me", b"other"


# --- paths ---------------------------------------------------------------------------------------


def test_paths() -> None:
    assert (NODES.lock, NODES.breadcrumb, NODES.epoch) == (
        "/svc/lock",
        "/svc/breadcrumb",
        "/svc/epoch",
    )
    assert (NODES.members, NODES.failover) == ("/svc/members", "/svc/failover")
    assert ElectionNodes("/a/b").lock == "/a/b/lock"


def test_a_member_is_one_path_segment() -> None:
    assert NODES.member(b"host/a:1") == "/svc/members/host%2Fa%3A1"
    assert NODES.member("b") == "/svc/members/b"


# --- codecs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "crumb",
    [Breadcrumb(b"a", 1), Breadcrumb(b"\x00\xffid", 2**40, b"app"), Breadcrumb(b"x", 0, b"{}")],
)
def test_breadcrumb_round_trip(crumb: Breadcrumb) -> None:
    assert decode_breadcrumb(encode_breadcrumb(crumb)) == crumb


def test_breadcrumb_format_is_stable() -> None:
    """The bytes other versions and tools read: the format must not drift."""
    assert encode_breadcrumb(Breadcrumb(b"a", 7, b"d")) == (
        b'{"format":"ha.breadcrumb/1","identity":"YQ==","epoch":7,"data":"ZA=="}'
    )
    assert decode_breadcrumb(b'{"format":"ha.breadcrumb/1","identity":"YQ==","epoch":7}') == (
        Breadcrumb(b"a", 7)
    )


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xff\x00garbage",
        b"[]",
        b"{}",
        b'{"format":"ha.breadcrumb/1"}',
        b'{"format":"other/1","identity":"YQ==","epoch":1}',
        b'{"format":"ha.breadcrumb/1","identity":"YQ==","epoch":"1"}',
        b'{"format":"ha.breadcrumb/1","identity":"YQ==","epoch":true}',
        b'{"format":"ha.breadcrumb/1","identity":"not base64!","epoch":1}',
        b'{"format":"ha.breadcrumb/1","identity":"YQ==","epoch":1,"data":5}',
    ],
)
def test_a_corrupt_or_foreign_breadcrumb_decodes_as_none(raw: bytes) -> None:
    assert decode_breadcrumb(raw) is None


@pytest.mark.parametrize("epoch", [0, 1, 2**63])
def test_epoch_round_trip(epoch: int) -> None:
    assert encode_epoch(epoch) == str(epoch).encode()
    assert decode_epoch(encode_epoch(epoch)) == epoch


@pytest.mark.parametrize("raw", [b"", b"seven", b"\xff", b"1.5", b"0x10"])
def test_an_epoch_that_is_not_a_number_decodes_as_none(raw: bytes) -> None:
    assert decode_epoch(raw) is None


# --- the calls, answered as inputs ---------------------------------------------------------------


@pytest.fixture
async def driver() -> AsyncIterator[Driver]:
    name = f"nodes-{uuid.uuid4().hex}"
    async with MemoryDriver(name) as d:
        yield d
    MemoryCluster.drop(name)


def session(driver: Driver) -> int:
    assert driver.session_id is not None
    return driver.session_id


@pytest.mark.anyio
async def test_read_epoch(driver: Driver) -> None:
    assert await NODES.read_epoch(driver) == (0, None)
    await driver.create(NODES.epoch, b"4", makepath=True)
    assert await NODES.read_epoch(driver) == (4, 0)
    for raw, reason in ((b"seven", "not a decimal number"), (b"-1", "negative")):
        await driver.set(NODES.epoch, raw)
        with pytest.raises(CorruptData, match=reason) as info:
            await NODES.read_epoch(driver)
        assert info.value.path == NODES.epoch


@pytest.mark.anyio
async def test_create_then_read_the_lock(driver: Driver) -> None:
    sid = session(driver)
    assert await NODES.read_lock(driver, sid, ME) == ev.LockMissing(sid)
    assert await NODES.create_lock(driver, sid, ME) == ev.LockCreated(sid, 0)
    assert await NODES.create_lock(driver, sid, ME) == ev.LockExists(sid)
    assert await NODES.read_lock(driver, sid, ME) == ev.LockOwned(sid, True, ME, 0)
    # the same session under another identity (two electors sharing a driver): not ours
    assert await NODES.read_lock(driver, sid, OTHER) == ev.LockOwned(sid, False, ME, 0)


@pytest.mark.anyio
async def test_commit_then_read_the_election(driver: Driver) -> None:
    sid = session(driver)
    await NODES.create_lock(driver, sid, ME)
    assert await NODES.read_election(driver, sid) == ev.ElectionRead(sid, None, None, 0, None)
    commit = ev.CommitActive(sid, 0, 1, None, None)
    assert await NODES.commit(driver, commit, Breadcrumb(ME, 1, b"d")) == ev.Committed(sid, 1, 0, 0)
    read = await NODES.read_election(driver, sid)
    assert read.breadcrumb is not None and decode_breadcrumb(read.breadcrumb) == Breadcrumb(
        ME, 1, b"d"
    )
    assert (read.breadcrumb_version, read.epoch, read.epoch_version) == (0, 1, 0)
    assert await NODES.verify_epoch(driver, ev.VerifyEpoch(sid, 1, 0)) is None
    # a racing writer moved the epoch: a conflict, the lock still ours
    again = ev.CommitActive(sid, 0, 2, 0, 0)
    await driver.set(NODES.epoch, b"5")
    assert await NODES.commit(driver, again, Breadcrumb(ME, 2)) == ev.CommitConflict(sid, False)
    assert await NODES.verify_epoch(driver, ev.VerifyEpoch(sid, 1, 0)) == ev.EpochSuperseded(sid, 1)
    # the lock's version changed: the lock check fails first
    await driver.set(NODES.lock, ME)
    assert await NODES.commit(driver, again, Breadcrumb(ME, 2)) == ev.CommitConflict(sid, True)


@pytest.mark.anyio
async def test_claim(driver: Driver) -> None:
    sid = session(driver)
    await driver.ensure_path(NODES.path)  # a standby claims where it saw a lock
    claim = ev.ClaimActive(sid, 1, None, None)
    assert await NODES.claim(driver, claim, Breadcrumb(ME, 1)) == ev.Claimed(sid, 1, 0, 0)
    assert await NODES.read_lock(driver, sid, ME) == ev.LockOwned(sid, True, ME, 0)
    assert await NODES.claim(driver, claim, Breadcrumb(ME, 1)) == ev.ClaimConflict(sid, True)
    await NODES.release_lock(driver, sid, ME)
    # the breadcrumb we read is gone meanwhile: the lock creation passed, the rest did not
    stale = ev.ClaimActive(sid, 2, 0, 0)
    await driver.delete(NODES.breadcrumb)
    assert await NODES.claim(driver, stale, Breadcrumb(ME, 2)) == ev.ClaimConflict(sid, False)
    assert await driver.exists(NODES.lock) is None  # all or nothing


@pytest.mark.anyio
async def test_release_deletes_only_our_lock(driver: Driver) -> None:
    sid = session(driver)
    await NODES.release_lock(driver, sid, ME)  # no lock: nothing to do
    await NODES.create_lock(driver, sid, OTHER)
    await NODES.release_lock(driver, sid, ME)  # names another identity
    assert await driver.exists(NODES.lock) is not None
    await NODES.release_lock(driver, sid + 1, OTHER)  # another session's
    assert await driver.exists(NODES.lock) is not None
    await NODES.release_lock(driver, sid, OTHER)
    assert await driver.exists(NODES.lock) is None


@pytest.mark.anyio
async def test_resign_deletes_breadcrumb_and_lock(driver: Driver) -> None:
    sid = session(driver)
    await NODES.create_lock(driver, sid, ME)
    await NODES.commit(driver, ev.CommitActive(sid, 0, 1, None, None), Breadcrumb(ME, 1))
    await NODES.resign(driver, ev.DeleteBreadcrumb(sid, 0, 0))
    assert await driver.exists(NODES.breadcrumb) is None and await driver.exists(NODES.lock) is None


@pytest.mark.anyio
async def test_resign_with_a_changed_lock_deletes_the_breadcrumb_alone(driver: Driver) -> None:
    sid = session(driver)
    await NODES.create_lock(driver, sid, ME)
    await NODES.commit(driver, ev.CommitActive(sid, 0, 1, None, None), Breadcrumb(ME, 1))
    await driver.set(NODES.lock, ME)  # version 1 now
    await NODES.resign(driver, ev.DeleteBreadcrumb(sid, 0, 0))
    assert await driver.exists(NODES.breadcrumb) is None
    assert await driver.exists(NODES.lock) is not None  # ReleaseLock's job


@pytest.mark.anyio
async def test_resign_refuses_a_breadcrumb_that_is_not_ours(driver: Driver) -> None:
    sid = session(driver)
    await NODES.create_lock(driver, sid, ME)
    await NODES.commit(driver, ev.CommitActive(sid, 0, 1, None, None), Breadcrumb(ME, 1))
    await driver.set(NODES.breadcrumb, encode_breadcrumb(Breadcrumb(OTHER, 2)))
    with pytest.raises(BadVersion):
        await NODES.resign(driver, ev.DeleteBreadcrumb(sid, 0, 0))
    assert await driver.exists(NODES.breadcrumb) is not None
