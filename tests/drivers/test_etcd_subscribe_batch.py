"""The etcd driver with hundreds of electors starting at once. The watch's first reads
(ha/drivers/etcd/watches.py): paths subscribed together are read in one request, each still
gets the right baseline, and events after subscribing reach every one of them. A writer that
gives up once its write is in flight leaves only when that write has ended
(ha/drivers/etcd/batching.py), so that nothing it sent lands after it moved on.

Requests are counted by the server (etcd's ``grpc_server_handled_total`` for Txn). Every test
runs under asyncio and trio, against a real etcd but the batcher's, which has a fake send.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from ha.drivers.base import NodeEvent, NodeEventKind
from ha.drivers.etcd import EtcdDriver
from ha.drivers.etcd.reads import ReadBatcher
from ha.drivers.etcd.watches import _UNKNOWN
from ha.drivers.etcd.writes import WriteBatcher
from tests.support.backends.etcd import EtcdBackend
from tests.support.etcd_calls import transactions

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PATHS = 200  # 400 range requests: one transaction of the read batcher

CREATED, CHANGED = NodeEventKind.CREATED, NodeEventKind.CHANGED


async def _first_reads_done(driver: EtcdDriver) -> None:
    with anyio.fail_after(15):
        while any(known is _UNKNOWN for known in driver._watches.seen.values()):
            await anyio.sleep(0.01)


async def test_paths_subscribed_together_cost_one_read(etcd_backend: EtcdBackend) -> None:
    # one read per subscription, one after the other in the watch's delivery task, was what
    # held up a thousand electors starting on one driver (200 requests here before)
    async with etcd_backend.driver() as other:
        for number in range(0, PATHS, 2):  # half the paths exist before the watch begins
            await other.create(f"/n{number}", b"0")
        async with etcd_backend.driver() as driver:
            await _subscribe_together(etcd_backend, other, driver)


async def _subscribe_together(backend: EtcdBackend, other: EtcdDriver, driver: EtcdDriver) -> None:
    await driver.transaction([])  # the session and its watch are up before counting
    events: dict[str, list[Any]] = {f"/n{number}": [] for number in range(PATHS)}
    before = transactions(backend)
    subscriptions = [driver.subscribe(path, seen.append) for path, seen in events.items()]
    await _first_reads_done(driver)
    sent = transactions(backend) - before
    assert sent <= 2, f"the first reads of {PATHS} subscriptions took {sent} requests"
    # every baseline as the store was: (created, last write) of a node, None if absent
    for number in range(PATHS):
        known = driver._watches.seen[f"/n{number}"]
        assert (known is None) == (number % 2 == 1), (number, known)
    # what happens after subscribing reaches each path, once
    async with anyio.create_task_group() as tg:
        for number in range(PATHS):
            if number % 2:
                tg.start_soon(other.create, f"/n{number}", b"1")
            else:
                tg.start_soon(other.set, f"/n{number}", b"1")
    with anyio.fail_after(15):
        while any(not seen for seen in events.values()):
            await anyio.sleep(0.01)
    for number in range(PATHS):
        kind = CREATED if number % 2 else CHANGED
        assert events[f"/n{number}"] == [NodeEvent(f"/n{number}", kind)], number
    for subscription in subscriptions:
        subscription.close()


async def test_a_path_unsubscribed_before_its_first_read_is_left_alone(
    etcd_backend: EtcdBackend,
) -> None:
    async with etcd_backend.driver() as other, etcd_backend.driver() as driver:
        await driver.transaction([])
        kept: list[Any] = []
        subscriptions = {}
        for number in range(20):
            subscriptions[number] = driver.subscribe(f"/m{number}", kept.append)
        for number in range(0, 20, 4):  # gone before the watch's task read them
            subscriptions.pop(number).close()
        await _first_reads_done(driver)
        assert sorted(driver._watches.seen) == sorted(f"/m{number}" for number in subscriptions)
        assert not driver._watches.unread
        for number in range(20):
            await other.create(f"/m{number}")
        with anyio.fail_after(15):
            while len(kept) < len(subscriptions):
                await anyio.sleep(0.01)
        assert sorted(event.path for event in kept) == sorted(f"/m{n}" for n in subscriptions)


@pytest.mark.parametrize("kind", ["write", "read"])
async def test_a_writer_giving_up_on_a_write_in_flight_leaves_once_it_has_ended(
    kind: str,
) -> None:
    # an elector whose join timed out looks for the node the join may have made: a write
    # still in flight then would land after the look (a node of ours for the whole session)
    release, sent, returned = anyio.Event(), [], anyio.Event()

    async def send(body: dict[str, Any]) -> dict[str, Any]:
        sent.append(body)
        await release.wait()
        return {"header": {"revision": "7"}, "succeeded": True, "responses": [{}]}

    batcher = WriteBatcher(send) if kind == "write" else ReadBatcher(send)
    caller = anyio.CancelScope()

    async def call() -> None:
        with caller:
            if isinstance(batcher, WriteBatcher):
                await batcher.write({"compare": [], "success": [{"request_put": {"key": "a2V5"}}]})
            else:
                await batcher.read([{"request_range": {"key": "a2V5"}}])
        returned.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(batcher.run)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(call)
        await anyio.wait_all_tasks_blocked()
        assert len(sent) == 1  # taken: in flight
        caller.cancel()
        await anyio.wait_all_tasks_blocked()
        # a writer stays until its write ended (it left at once before); a reader goes
        assert returned.is_set() == (kind == "read")
        release.set()
        with anyio.fail_after(5):
            await returned.wait()
        tg.cancel_scope.cancel()
