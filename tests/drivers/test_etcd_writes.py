"""The etcd driver under many concurrent writers: their write transactions share etcd
transactions (ha/drivers/etcd/writes.py) and each caller still gets the outcome it would have
had alone: a failing compare fails only its caller, transactions that touch each other's keys
never go together (two checks on keys the other one writes: exactly one may win), a merged
transaction that etcd refuses as a whole is sent again caller by caller, and a caller that
gives up before its request is sent withdraws it (writes and reads alike). ``ensure_path`` is
one round trip.

Requests are counted by the server (etcd's ``grpc_server_handled_total`` for Txn) or by the
send function handed to a ``WriteBatcher``. Every test runs under asyncio and trio against a
real etcd, but the withdrawal tests, which give the batchers a fake send.
"""

from __future__ import annotations

import base64
from typing import Any
from unittest.mock import ANY

import anyio
import pytest

from ha.drivers.base import Check, Create, Delete, SetData, Stat
from ha.drivers.etcd.batching import WORKERS
from ha.drivers.etcd.gateway import Gateway
from ha.drivers.etcd.reads import ReadBatcher
from ha.drivers.etcd.settings import Settings
from ha.drivers.etcd.writes import WriteBatcher, footprint
from ha.errors import BadVersion, NodeExists, NoNode, SessionExpired, TransactionFailed
from tests.support.backends.etcd import EtcdBackend
from tests.support.etcd_calls import sent_at_start, transactions

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

WRITERS = 100


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _put(key: bytes, value: bytes = b"v", lease: int = 0) -> dict[str, Any]:
    request = {"key": _b64(key), "value": _b64(value)}
    if lease:
        request["lease"] = str(lease)
    return {"request_put": request}


def _absent(key: bytes) -> dict[str, Any]:
    return {"key": _b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}


async def test_concurrent_writes_share_transactions_and_keep_their_outcomes(
    etcd_backend: EtcdBackend,
) -> None:
    async with etcd_backend.driver() as driver:
        await driver.transaction([])  # the session is up before counting
        for number in range(WRITERS):
            await driver.create(f"/n{number}", b"0")
        outcomes: dict[int, object] = {}

        async def write(number: int) -> None:
            wrong = number % 10 == 3  # every tenth writer expects a version the node never had
            try:
                outcomes[number] = await driver.set(f"/n{number}", b"1", 5 if wrong else 0)
            except BadVersion as exc:
                outcomes[number] = exc

        before = transactions(etcd_backend)
        async with anyio.create_task_group() as tg:
            for number in range(WRITERS):
                tg.start_soon(write, number)
        sent = transactions(etcd_backend) - before
        for number in range(WRITERS):
            data, stat = await driver.get(f"/n{number}")
            if number % 10 == 3:
                assert isinstance(outcomes[number], BadVersion), number
                assert (data, stat.version) == (b"0", 0)
            else:
                assert getattr(outcomes[number], "version", None) == 1, outcomes[number]
                assert (data, stat.version) == (b"1", 1)
    # the failing writers' transactions are read again on their own (single's Fallback)
    assert sent <= WRITERS // 2, f"{WRITERS} concurrent writes took {sent} transactions"


async def test_writes_that_check_what_the_other_writes_never_both_win(
    etcd_backend: EtcdBackend,
) -> None:
    """Pairs of transactions, each checking the node the other one sets: alone, in either
    order, exactly one succeeds. Merged into one etcd transaction (both compares evaluated
    before either write), both would."""
    pairs = 40
    async with etcd_backend.driver() as driver:
        for number in range(pairs):
            await driver.create(f"/a{number}", b"0")
            await driver.create(f"/b{number}", b"0")
        won: dict[tuple[int, str], bool] = {}

        async def write(number: int, mine: str, theirs: str) -> None:
            ops = [Check(f"/{theirs}{number}", 0), SetData(f"/{mine}{number}", b"1")]
            try:
                await driver.transaction(ops)
                won[number, mine] = True
            except TransactionFailed as exc:
                assert exc.index == 0 and isinstance(exc.cause, BadVersion), exc
                won[number, mine] = False

        async with anyio.create_task_group() as tg:
            for number in range(pairs):
                tg.start_soon(write, number, "a", "b")
                tg.start_soon(write, number, "b", "a")
    both = [number for number in range(pairs) if won[number, "a"] and won[number, "b"]]
    neither = [n for n in range(pairs) if not won[n, "a"] and not won[n, "b"]]
    assert both == [] and neither == [], (both, neither)


async def test_ensure_path_is_one_round_trip(etcd_backend: EtcdBackend) -> None:
    async with etcd_backend.driver() as driver:
        await driver.create("/a", b"kept")
        before = transactions(etcd_backend)
        await driver.ensure_path("/a/b/c/d")
        sent = transactions(etcd_backend) - before
        assert (await driver.get("/a"))[0] == b"kept"
        for path in ("/a/b", "/a/b/c", "/a/b/c/d"):
            data, stat = await driver.get(path)
            assert (data, stat.version, stat.ephemeral_owner) == (b"", 0, None), path
    assert sent == 1, f"ensure_path of 3 missing levels took {sent} transactions"


async def test_ensure_paths_is_one_round_trip(etcd_backend: EtcdBackend) -> None:
    async with etcd_backend.driver() as driver:
        before = transactions(etcd_backend)
        await driver.ensure_paths(["/a/n", "/a/b"])  # a new election's two folders
        sent = transactions(etcd_backend) - before
        assert await driver.children("/a") == ["b", "n"]
    assert sent == 1, f"ensure_paths of 3 missing nodes took {sent} transactions"


async def test_writes_made_as_the_driver_starts_share_transactions(
    etcd_backend: EtcdBackend,
) -> None:
    async with etcd_backend.driver() as driver:
        for number in range(WRITERS):
            await driver.create(f"/w{number}")
    sent = await sent_at_start(etcd_backend, lambda d, n: d.set(f"/w{n}", b"x"), WRITERS)
    assert sent <= WRITERS // 4, f"{WRITERS} writes at the start took {sent} transactions"


async def test_the_write_with_the_earliest_deadline_goes_first() -> None:
    recorder = _Recorder()
    batcher = WriteBatcher(recorder)
    key = _put(b"same")  # the two writes conflict: they go one after the other

    async with anyio.create_task_group() as tg:
        tg.start_soon(batcher.run)
        await anyio.wait_all_tasks_blocked()
        async with anyio.create_task_group() as callers:
            for number in range(BUSY):  # every sender busy
                callers.start_soon(
                    batcher.write, {"compare": [], "success": [_put(b"b%d" % number)]}
                )
                await anyio.wait_all_tasks_blocked()
            later = {"compare": [], "success": [key, _put(b"later")]}
            sooner = {"compare": [], "success": [key, _put(b"sooner")]}
            callers.start_soon(batcher.write, later)  # no deadline: the horizon, none here
            await anyio.wait_all_tasks_blocked()

            async def within() -> None:
                with anyio.fail_after(30):
                    await batcher.write(sooner)

            callers.start_soon(within)
            await anyio.wait_all_tasks_blocked()
            recorder.release.set()
        tg.cancel_scope.cancel()
    assert recorder.sent[BUSY:] == [sooner, later], recorder.sent[BUSY:]


async def test_a_fenced_write_is_one_round_trip(etcd_backend: EtcdBackend) -> None:
    async with etcd_backend.driver() as driver:
        await driver.create("/leader", ephemeral=True)
        await driver.create("/data", b"0")
        before = transactions(etcd_backend)
        results = await driver.transaction([Check("/leader"), SetData("/data", b"1", 0)])
        created = await driver.transaction([Check("/leader", 0), Create("/log", b"x")])
        sent = transactions(etcd_backend) - before
        assert results[0] is None and isinstance(results[1], Stat) and results[1].version == 1
        assert created == [None, "/log"]
        assert (await driver.get("/data"))[0] == b"1"
    assert sent == 2, f"two fenced writes took {sent} transactions"


async def test_a_fenced_write_names_the_op_that_fails(etcd_backend: EtcdBackend) -> None:
    async with etcd_backend.driver() as driver:
        await driver.create("/leader", b"a")
        await driver.set("/leader", b"b")  # version 1
        await driver.create("/data", b"0")
        cases: list[tuple[list[Any], int, type[Exception]]] = [
            ([Check("/gone"), SetData("/data", b"x")], 0, NoNode),
            ([Check("/leader", 0), SetData("/data", b"x")], 0, BadVersion),
            ([Check("/leader"), Check("/gone"), SetData("/data", b"x")], 1, NoNode),
            ([Check("/leader", 1), Create("/data", b"x")], 1, NodeExists),
            ([Check("/leader"), SetData("/data", b"x", 5)], 1, BadVersion),
            ([Check("/leader"), Delete("/nothing")], 1, NoNode),
        ]
        for ops, index, cause in cases:
            with pytest.raises(TransactionFailed) as failed:
                await driver.transaction(ops)
            assert failed.value.index == index and isinstance(failed.value.cause, cause), ops
        assert (await driver.get("/data"))[0] == b"0"  # nothing was applied
        # a node re-created in place has an incarnation record: its check goes the long way
        await driver.transaction([Delete("/leader"), Create("/leader", b"c")])
        assert await driver.transaction([Check("/leader", 0), SetData("/data", b"y")]) == [
            None,
            Stat(1, None, ANY, 0, ANY),
        ]
        with pytest.raises(TransactionFailed) as failed:
            await driver.transaction([Check("/leader", 1), SetData("/data", b"z")])
        assert failed.value.index == 0 and isinstance(failed.value.cause, BadVersion)


async def test_ensure_path_below_an_ephemeral_node_fails_as_a_create_does(
    etcd_backend: EtcdBackend,
) -> None:
    async with etcd_backend.driver() as driver:
        await driver.create("/e", ephemeral=True)
        with pytest.raises(NoNode, match="ephemeral"):
            await driver.ensure_path("/e/x/y")
        assert await driver.children("/e") == []


class _Held:
    """A send function whose first ``WORKERS`` calls wait for ``release``: the batcher's
    senders are then all busy, and the writes made meanwhile wait together."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.sent: list[dict[str, Any]] = []
        self.release = anyio.Event()
        self.held = 0

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        self.sent.append(body)
        if self.held < WORKERS:
            self.held += 1
            await self.release.wait()
        return await self.gateway.call("kv/txn", body, 5)


async def _batched(
    etcd_backend: EtcdBackend, bodies: list[dict[str, Any]]
) -> tuple[list[object], list[dict[str, Any]]]:
    """Each body's reply (or error) through a WriteBatcher whose senders were busy while
    they were written, and the requests it sent."""
    gateway = Gateway(Settings.check(etcd_backend.hosts, ""))
    gateway.open()
    send = _Held(gateway)
    batcher = WriteBatcher(send)
    outcomes: list[object] = [None] * len(bodies)

    async def write(index: int, body: dict[str, Any]) -> None:
        try:
            outcomes[index] = await batcher.write(body)
        except Exception as exc:
            outcomes[index] = exc

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(batcher.run)
            await anyio.wait_all_tasks_blocked()
            async with anyio.create_task_group() as writers:
                for index in range(WORKERS):  # one by one: each sender's first write, held
                    writers.start_soon(write, index, bodies[index])
                    await anyio.wait_all_tasks_blocked()
                for index in range(WORKERS, len(bodies)):
                    writers.start_soon(write, index, bodies[index])
                await anyio.wait_all_tasks_blocked()
                send.release.set()
            tg.cancel_scope.cancel()
    finally:
        await gateway.aclose()
    return outcomes, send.sent[WORKERS:]


async def test_transactions_on_the_same_key_are_not_merged(etcd_backend: EtcdBackend) -> None:
    base = f"{etcd_backend.prefix}/raw/".encode()
    fillers = [{"success": [_put(base + b"f%d" % i)], "compare": []} for i in range(WORKERS)]
    one = {"compare": [_absent(base + b"k")], "success": [_put(base + b"k", b"1")]}
    other = {"compare": [_absent(base + b"k")], "success": [_put(base + b"k", b"2")]}
    apart = {"compare": [_absent(base + b"j")], "success": [_put(base + b"j")]}
    outcomes, sent = await _batched(etcd_backend, [*fillers, one, other, apart])
    won = [bool(o.get("succeeded")) for o in outcomes[WORKERS:]]  # type: ignore[union-attr]
    assert won in ([True, False, True], [False, True, True]), outcomes
    nested = [
        [op["request_txn"] for op in body["success"]] for body in sent if "compare" not in body
    ]
    # apart goes with whichever of one and other came first; the second one, which writes
    # the first one's key, goes on its own
    assert len(nested) == 1 and len(nested[0]) == 2 and apart in nested[0], sent
    first, second = (one, other) if one in nested[0] else (other, one)
    assert first in nested[0] and second in sent, sent


async def test_a_transaction_etcd_refuses_fails_only_its_caller(
    etcd_backend: EtcdBackend,
) -> None:
    """A put on a lease etcd does not have makes etcd refuse the whole merged transaction:
    each one is then sent alone, and only that one fails."""
    base = f"{etcd_backend.prefix}/raw/".encode()
    fillers = [{"success": [_put(base + b"f%d" % i)], "compare": []} for i in range(WORKERS)]
    good = [
        {"compare": [_absent(base + b"g%d" % i)], "success": [_put(base + b"g%d" % i)]}
        for i in range(3)
    ]
    bad = {"compare": [], "success": [_put(base + b"bad", lease=0x7E57)]}
    outcomes, sent = await _batched(etcd_backend, [*fillers, good[0], bad, *good[1:]])
    results = outcomes[WORKERS:]
    assert isinstance(results[1], SessionExpired), results[1]
    assert [bool(r.get("succeeded")) for i, r in enumerate(results) if i != 1] == [True] * 3  # type: ignore[union-attr]
    assert len(sent) == 1 + 4, sent  # the merged one, refused, then each alone


def test_footprints_conflict_when_one_writes_what_the_other_touches() -> None:
    def body(compare: list[bytes], put: list[bytes], ranges: list[tuple[bytes, bytes]] = []):  # noqa: B006
        return footprint(
            {
                "compare": [_absent(key) for key in compare],
                "success": [_put(key) for key in put]
                + [{"request_range": {"key": _b64(s), "range_end": _b64(e)}} for s, e in ranges],
            }
        )

    a = body([b"/x"], [b"/x"])
    assert a is not None
    assert a.conflicts(body([], [b"/x"]))  # both write /x
    assert a.conflicts(body([b"/x"], [b"/y"]))  # reads what the other writes
    assert body([b"/y"], [b"/y"]).conflicts(body([b"/x"], [b"/y2"], [(b"/y", b"/z")]))  # a range
    assert not body([b"/k"], []).conflicts(body([b"/k"], [b"/j"]))  # both only read /k
    assert not a.conflicts(body([b"/y"], [b"/y"]))
    nested = footprint({"success": [{"request_txn": {"compare": [_absent(b"/n")]}}]})
    assert nested is not None and nested.ops == 2 and nested.conflicts(body([], [b"/n"]))
    assert footprint({"success": [{"request_lease": {}}]}) is None  # unknown: sent alone


# requests that keep a write batcher busy: one per sender, and the first, sent by its caller
# (it found nothing in flight); a read batcher's are its senders'
BUSY = WORKERS + 1


class _Recorder:
    """A fake etcd for a batcher: records each request and answers it with success; the
    first ``hold`` wait for ``release`` (every sender busy)."""

    def __init__(self, hold: int = BUSY) -> None:
        self.sent: list[dict[str, Any]] = []
        self.release = anyio.Event()
        self.hold = hold

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        self.sent.append(body)
        if len(self.sent) <= self.hold:
            await self.release.wait()
        ops = body.get("success") or []
        replies = [{"response_txn": {"succeeded": True}} if "request_txn" in o else {} for o in ops]
        return {"header": {"revision": "7"}, "succeeded": True, "responses": replies}


async def _withdrawn(batcher: WriteBatcher | ReadBatcher, recorder: _Recorder) -> None:
    """Every sender busy; a caller gives up on a request (``first``), another does not
    (``second``); then the senders are freed."""

    async def call(tag: bytes) -> None:
        if isinstance(batcher, WriteBatcher):
            await batcher.write({"compare": [], "success": [_put(tag)]})
        else:
            await batcher.read([{"request_range": {"key": _b64(tag)}}])

    async with anyio.create_task_group() as tg:
        tg.start_soon(batcher.run)
        await anyio.wait_all_tasks_blocked()
        async with anyio.create_task_group() as callers:
            for number in range(recorder.hold):
                callers.start_soon(call, b"busy%d" % number)
                await anyio.wait_all_tasks_blocked()
            with anyio.move_on_after(0.05) as waited:
                await call(b"first")
            assert waited.cancelled_caught
            callers.start_soon(call, b"second")
            await anyio.wait_all_tasks_blocked()
            recorder.release.set()
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("kind", ["write", "read"])
async def test_a_request_given_up_before_it_is_sent_is_never_sent(kind: str) -> None:
    recorder = _Recorder(BUSY if kind == "write" else WORKERS)
    batcher = WriteBatcher(recorder) if kind == "write" else ReadBatcher(recorder)
    await _withdrawn(batcher, recorder)
    sent = str(recorder.sent)
    assert _b64(b"second") in sent and _b64(b"first") not in sent, recorder.sent
