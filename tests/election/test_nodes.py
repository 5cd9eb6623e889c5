"""The election's nodes (protocol 2): paths, codecs, and each call's answer as the machine's
input.

The codecs need no event loop; the calls run on real drivers (memory and sqlite), under asyncio
and trio. One driver plays every contender: the calls care about nodes, not sessions, and a
crash is a node deleted with its breadcrumb left.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import pytest

from ha.drivers.base import Delete, Driver, Op
from ha.election import events as ev
from ha.election.names import (
    BREADCRUMB_FORMAT,
    Breadcrumb,
    QueueEntry,
    decode_breadcrumb,
    encode_breadcrumb,
    identity_bytes,
    in_order,
    parse_entry,
    ticket_for,
    with_epoch,
)
from ha.election.nodes import ElectionNodes
from ha.errors import ConfigurationError, NodeExists

NODES = ElectionNodes("/svc")
ME, OTHER, THIRD = b"me", b"other", b"third"


# --- paths ---------------------------------------------------------------------------------------


def test_paths() -> None:
    assert (NODES.queue, NODES.crumbs) == ("/svc/n", "/svc/b")
    assert NODES.node("t_1_0000000001") == "/svc/n/t_1_0000000001"
    assert NODES.crumb("t_1") == "/svc/b/t_1"
    assert (NODES.members, NODES.failover) == ("/svc/members", "/svc/failover")
    assert ElectionNodes("/a/b").queue == "/a/b/n"


def test_a_member_is_one_path_segment() -> None:
    assert NODES.member(b"host/a:1") == "/svc/members/host%2Fa%3A1"
    assert NODES.member("b") == "/svc/members/b"


# --- tickets and queue entries -------------------------------------------------------------------

IDENTITIES = [b"a", b"host-a:7077", b"a_b", b"_", b"__x__", b"a/b", b"/", b"%41", b"\x00\xff\xe9"]
IDENTITIES.append("żółw/ü_1".encode())


@pytest.mark.parametrize("identity", IDENTITIES)
def test_a_ticket_names_its_identity_in_one_path_segment(identity: bytes) -> None:
    ticket = ticket_for(identity, "9f")
    assert "/" not in ticket and ticket.isascii() and ticket.endswith("_9f")
    name = f"{ticket}_0000000042"
    assert parse_entry(name) == QueueEntry(name, ticket, 42, identity)


def test_sequences_past_ten_digits_parse() -> None:
    entry = parse_entry(f"{ticket_for(ME, '1')}_12345678901")
    assert entry is not None and entry.seq == 12345678901


@pytest.mark.parametrize("name", ["", "x", "x_1", "_1_2", "me_1_x", "me_1_", "me__0000000001"])
def test_a_foreign_name_is_no_entry(name: str) -> None:
    assert parse_entry(name) is None


def test_the_queue_is_ordered_by_sequence_and_foreign_names_left_out() -> None:
    a, b, c = (f"{ticket_for(i, 'n')}_{s:010d}" for i, s in ((OTHER, 3), (ME, 12), (THIRD, 7)))
    assert [e.name for e in in_order([b, "lock", a, c, "x_1"])] == [a, c, b]


def test_identity_bytes() -> None:
    assert identity_bytes("host-a") == b"host-a" and identity_bytes(b"\xff") == b"\xff"
    for bad in (b"", "", None, 5):
        with pytest.raises(ConfigurationError):
            identity_bytes(bad)  # type: ignore[arg-type]


# --- breadcrumbs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "crumb",
    [
        Breadcrumb(b"a"),
        Breadcrumb(b"a", 1),
        Breadcrumb(b"\x00\xffid", 2**40, b"app"),
        Breadcrumb(b"x", 0, b"{}"),
    ],
)
def test_breadcrumb_round_trip(crumb: Breadcrumb) -> None:
    assert decode_breadcrumb(encode_breadcrumb(crumb)) == crumb


def test_breadcrumb_format_is_stable() -> None:
    """The bytes other versions and tools read: the format must not drift."""
    assert BREADCRUMB_FORMAT == "ha.breadcrumb/2"
    assert encode_breadcrumb(Breadcrumb(b"a", None, b"d")) == (
        b'{"format":"ha.breadcrumb/2","identity":"YQ==","data":"ZA=="}'
    )
    assert encode_breadcrumb(Breadcrumb(b"a", 7, b"d")) == (
        b'{"format":"ha.breadcrumb/2","identity":"YQ==","data":"ZA==","epoch":7}'
    )
    assert decode_breadcrumb(b'{"format":"ha.breadcrumb/2","identity":"YQ==","epoch":7}') == (
        Breadcrumb(b"a", 7)
    )


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xff\x00garbage",
        b"[]",
        b"{}",
        b"null",
        b'{"format":"ha.breadcrumb/2"}',
        b'{"format":"ha.breadcrumb/1","identity":"YQ==","epoch":7}',
        b'{"format":"other/1","identity":"YQ==","epoch":1}',
        b'{"format":"ha.breadcrumb/2","identity":"YQ==","epoch":"1"}',
        b'{"format":"ha.breadcrumb/2","identity":"YQ==","epoch":true}',
        b'{"format":"ha.breadcrumb/2","identity":"not base64!"}',
        b'{"format":"ha.breadcrumb/2","identity":"YQ==","data":5}',
    ],
)
def test_a_corrupt_or_foreign_breadcrumb_decodes_as_none(raw: bytes) -> None:
    assert decode_breadcrumb(raw) is None


def test_a_fence_hook_gets_the_breadcrumb_with_its_owners_token() -> None:
    stored = encode_breadcrumb(Breadcrumb(OTHER, None, b"d"))
    assert decode_breadcrumb(with_epoch(stored, 17)) == Breadcrumb(OTHER, 17, b"d")
    assert with_epoch(b"\xffforeign", 17) == b"\xffforeign"  # handed over as it is


# --- the calls, answered as inputs ---------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite"])
async def driver(request: pytest.FixtureRequest) -> AsyncIterator[Driver]:
    backend = request.getfixturevalue(f"{request.param}_backend")
    async with backend.driver() as d:
        yield d


def session(driver: Driver) -> int:
    assert driver.session_id is not None
    return driver.session_id


async def join(driver: Driver, identity: bytes, nonce: str = "1") -> tuple[str, str, int]:
    """A contender joins: its ticket, its node's name and its token."""
    ticket = ticket_for(identity, nonce)
    name = await NODES.join(driver, ticket, Breadcrumb(identity, None, b"data-" + identity))
    stat = await driver.exists(NODES.node(name))
    assert stat is not None
    return ticket, name, stat.created


async def crash(driver: Driver, name: str) -> None:
    """A contender's session ends: its node goes, its breadcrumb stays."""
    await driver.delete(NODES.node(name))


async def alive(driver: Driver, path: str) -> bool:
    return await driver.exists(path) is not None


@pytest.mark.anyio
async def test_join_creates_node_and_breadcrumb_in_one_transaction(driver: Driver) -> None:
    sid = session(driver)
    assert await NODES.entries(driver) == []  # a new election: no queue yet
    ticket, name, token = await join(driver, ME)
    entry = parse_entry(name)
    assert entry is not None and (entry.ticket, entry.identity) == (ticket, ME)
    data, node = await driver.get(NODES.node(name))
    raw, crumb = await driver.get(NODES.crumb(ticket))
    assert data == ME and node.ephemeral_owner == sid
    assert crumb.ephemeral_owner is None  # the breadcrumb outlives the session
    assert decode_breadcrumb(raw) == Breadcrumb(ME, None, b"data-me")
    assert crumb.created == node.created == token  # one transaction: one creation number
    # every breadcrumb is owned by a node in the queue: nobody to fence
    found = await NODES.find(driver, sid, ticket, None)
    assert found == ev.Queued(sid, name, token, (), ME, False, behind=False)


@pytest.mark.anyio
async def test_a_join_that_fails_creates_nothing(driver: Driver) -> None:
    ticket, _, _ = await join(driver, ME)
    with pytest.raises(NodeExists):  # the ticket is taken: its breadcrumb exists
        await NODES.join(driver, ticket, Breadcrumb(ME))
    assert len(await NODES.entries(driver)) == 1


@pytest.mark.anyio
async def test_find_tells_the_nodes_below_and_the_leader(driver: Driver) -> None:
    sid = session(driver)
    first, leader, _ = await join(driver, OTHER)
    _, middle, _ = await join(driver, THIRD)
    ticket, name, token = await join(driver, ME)
    queued = await NODES.find(driver, sid, ticket, None)
    assert queued == ev.Queued(sid, name, token, (leader, middle), OTHER, False, behind=False)
    # the token, once known, is not read again: the answer carries the one given
    assert await NODES.find(driver, sid, ticket, 5) == ev.Queued(
        sid, name, 5, (leader, middle), OTHER, False, behind=False
    )
    # the leader's listing shows the two behind it
    led = await NODES.find(driver, sid, first, None)
    assert isinstance(led, ev.Queued) and led.behind and led.below == ()
    # a breadcrumb no live node owns (a crash's): strays
    await driver.create(NODES.crumb("crashed_1"), b"?")
    assert (await NODES.find(driver, sid, ticket, 5)).strays  # type: ignore[union-attr]
    assert await NODES.find(driver, sid, ticket_for(ME, "2"), None) == ev.NotQueued(sid)


@pytest.mark.anyio
async def test_tokens_grow_in_join_order(driver: Driver) -> None:
    tokens = [(await join(driver, identity))[2] for identity in (OTHER, THIRD, ME)]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    # a node never comes back under a name used before, and its token is new
    ticket, name, token = await join(driver, ME, "2")
    await crash(driver, name)
    await driver.delete(NODES.crumb(ticket))
    _, again, later = await join(driver, ME, "3")
    assert again != name and later > token


@pytest.mark.anyio
async def test_watch_a_gone_predecessor(driver: Driver) -> None:
    sid = session(driver)
    _, leader, _ = await join(driver, OTHER)
    await crash(driver, leader)
    for first in (True, False):
        assert await NODES.watch(driver, sid, leader, first) == ev.PredecessorGone(sid, leader)


@pytest.mark.anyio
async def test_watch_the_leader_reads_its_breadcrumb_with_its_token(driver: Driver) -> None:
    sid = session(driver)
    ticket, leader, token = await join(driver, OTHER)
    await join(driver, ME)
    watching = await NODES.watch(driver, sid, leader, True)
    assert isinstance(watching, ev.Watching)
    assert (watching.node, watching.strays) == (leader, False)
    assert watching.crumb is not None
    assert decode_breadcrumb(watching.crumb) == Breadcrumb(OTHER, token, b"data-other")
    # its breadcrumb gone (a graceful exit under way): None
    await driver.delete(NODES.crumb(ticket))
    assert await NODES.watch(driver, sid, leader, True) == ev.Watching(sid, leader, None, False)


@pytest.mark.anyio
async def test_watch_tells_of_stray_breadcrumbs(driver: Driver) -> None:
    """A breadcrumb no live node owns (a leader that crashed while another was fencing)."""
    sid = session(driver)
    _, old, _ = await join(driver, THIRD)
    _, leader, _ = await join(driver, OTHER)
    await join(driver, ME)
    await crash(driver, old)
    watching = await NODES.watch(driver, sid, leader, True)
    assert isinstance(watching, ev.Watching) and watching.strays


@pytest.mark.anyio
async def test_watch_a_predecessor_that_is_not_the_leader(driver: Driver) -> None:
    """Nothing is read of its breadcrumb; nothing is told about strays either."""
    sid = session(driver)
    await join(driver, OTHER)
    _, middle, _ = await join(driver, THIRD)
    await join(driver, ME)
    assert await NODES.watch(driver, sid, middle, False) == ev.Watching(sid, middle, None, True)


@pytest.mark.anyio
async def test_read_crumbs_returns_those_left_below_us_oldest_first(driver: Driver) -> None:
    sid = session(driver)
    first_ticket, first, first_token = await join(driver, THIRD)  # crashed
    mine_ticket, mine_before, mine_token = await join(driver, ME, "0")  # ours, crashed
    _, live, _ = await join(driver, OTHER)  # still queued: not left behind
    then_ticket, then, then_token = await join(driver, OTHER, "2")  # crashed
    ticket, _, token = await join(driver, ME)
    _, after, _ = await join(driver, THIRD, "9")  # joined after us: not ours to fence
    for name in (then, first, mine_before, after):
        await crash(driver, name)
    read = await NODES.read_crumbs(driver, sid, ticket, token)
    assert read == ev.CrumbsRead(
        sid,
        (
            (
                first_ticket,
                with_epoch(encode_breadcrumb(Breadcrumb(THIRD, None, b"data-third")), first_token),
            ),
            (
                mine_ticket,
                with_epoch(encode_breadcrumb(Breadcrumb(ME, None, b"data-me")), mine_token),
            ),
            (
                then_ticket,
                with_epoch(encode_breadcrumb(Breadcrumb(OTHER, None, b"data-other")), then_token),
            ),
        ),
    )
    assert live not in {t for t, _ in read.crumbs} and ticket not in {t for t, _ in read.crumbs}


@pytest.mark.anyio
async def test_read_crumbs_of_a_new_election_is_empty(driver: Driver) -> None:
    sid = session(driver)
    assert await NODES.read_crumbs(driver, sid, ticket_for(ME, "1"), 1) == ev.CrumbsRead(sid, ())
    ticket, _, token = await join(driver, ME)
    assert await NODES.read_crumbs(driver, sid, ticket, token) == ev.CrumbsRead(sid, ())


@pytest.mark.anyio
async def test_clear_deletes_the_fenced_breadcrumbs_while_our_node_lives(driver: Driver) -> None:
    a, a_node, _ = await join(driver, OTHER)
    b, b_node, _ = await join(driver, THIRD)
    _, mine, _ = await join(driver, ME)
    await crash(driver, a_node)
    await crash(driver, b_node)
    await driver.delete(NODES.crumb(a))  # cleared already by someone else
    assert await NODES.clear(driver, mine, [a, b, "nobody_1"]) is True
    assert not await alive(driver, NODES.crumb(b))
    assert await NODES.clear(driver, mine, []) is True


@pytest.mark.anyio
async def test_clear_without_our_node_deletes_nothing(driver: Driver) -> None:
    a, a_node, _ = await join(driver, OTHER)
    _, mine, _ = await join(driver, ME)
    await crash(driver, a_node)
    await crash(driver, mine)
    assert await NODES.clear(driver, mine, [a]) is False
    assert await alive(driver, NODES.crumb(a))


@pytest.mark.anyio
async def test_resign_deletes_breadcrumb_and_node(driver: Driver) -> None:
    ticket, name, _ = await join(driver, ME)
    await NODES.resign(driver, ticket, name)
    assert not await alive(driver, NODES.crumb(ticket))
    assert not await alive(driver, NODES.node(name))


@pytest.mark.anyio
async def test_resign_is_all_or_nothing(driver: Driver) -> None:
    """Our node gone already: the breadcrumb stays (whoever leads next fences us, safely);
    our breadcrumb gone already: the node is left all the same."""
    ticket, name, _ = await join(driver, ME)
    await crash(driver, name)
    await NODES.resign(driver, ticket, name)
    assert await alive(driver, NODES.crumb(ticket))
    ticket, name, _ = await join(driver, ME, "2")
    await driver.delete(NODES.crumb(ticket))
    await NODES.resign(driver, ticket, name)
    assert not await alive(driver, NODES.node(name))


@pytest.mark.anyio
@pytest.mark.parametrize("keep_crumb", [False, True])
@pytest.mark.parametrize("by_ticket", [False, True])
async def test_leave(driver: Driver, keep_crumb: bool, by_ticket: bool) -> None:
    """With node=None (a join whose reply was lost) the node is found by its ticket."""
    _, other, _ = await join(driver, OTHER)
    ticket, name, _ = await join(driver, ME)
    await NODES.leave(driver, ticket, None if by_ticket else name, keep_crumb=keep_crumb)
    assert not await alive(driver, NODES.node(name))
    assert await alive(driver, NODES.crumb(ticket)) is keep_crumb
    assert [e.name for e in await NODES.entries(driver)] == [other]
    # nothing left to leave: no error
    await NODES.leave(driver, ticket, None if by_ticket else name, keep_crumb=False)
    await NODES.leave(driver, ticket_for(ME, "never"), None, keep_crumb=False)


class CrumbWitness:
    """Forwards to a driver and fails if a breadcrumb is deleted alone while its node lives:
    P6 lets a successor act on a breadcrumb's deletion, so it must never go before its node."""

    def __init__(self, driver: Driver, node: str) -> None:
        self.driver, self.node = driver, node

    def __getattr__(self, name: str) -> Any:
        return getattr(self.driver, name)

    async def delete(self, path: str, version: int = -1) -> None:
        if path.startswith(NODES.crumbs + "/"):
            assert not await alive(self.driver, NODES.node(self.node)), "breadcrumb before node"
        await self.driver.delete(path, version)

    async def transaction(self, ops: Sequence[Op]) -> list[Any]:
        paths = [op.path for op in ops if isinstance(op, Delete)]
        if any(p.startswith(NODES.crumbs + "/") for p in paths):
            assert NODES.node(self.node) in paths or not await alive(
                self.driver, NODES.node(self.node)
            ), "breadcrumb without its node"
        return await self.driver.transaction(ops)


@pytest.mark.anyio
@pytest.mark.parametrize("by_ticket", [False, True])
async def test_a_breadcrumb_never_goes_while_its_node_lives(
    driver: Driver, by_ticket: bool
) -> None:
    for exit in ("resign", "leave"):
        ticket, name, _ = await join(driver, ME, exit)
        witness = cast(Driver, CrumbWitness(driver, name))
        if exit == "resign":
            await NODES.resign(witness, ticket, name)
        else:
            await NODES.leave(witness, ticket, None if by_ticket else name, keep_crumb=False)
        assert not await alive(driver, NODES.crumb(ticket))
        assert not await alive(driver, NODES.node(name))


@pytest.mark.anyio
async def test_drop_crumb(driver: Driver) -> None:
    ticket, _, _ = await join(driver, OTHER)
    await NODES.drop_crumb(driver, ticket)
    assert not await alive(driver, NODES.crumb(ticket))
    await NODES.drop_crumb(driver, ticket)  # gone already: no error
