"""The ZooKeeper driver's re-armed watches: what a one-shot watch leaves between its firing and
its re-arming read is still reported (issue 16, behaviour 5). Real server, asyncio and trio."""

from __future__ import annotations

import anyio
import pytest
from kazoo.client import KazooClient

from ha.drivers.base import NodeEvent, NodeEventKind
from tests.support.backends.zookeeper import ZooKeeperBackend

pytestmark = [pytest.mark.anyio, pytest.mark.zookeeper, pytest.mark.timeout(60)]


async def test_a_node_created_and_deleted_at_once_is_reported(
    zookeeper_backend: ZooKeeperBackend,
) -> None:
    """Another client creates the node and deletes it right away: the subscriber, whose watch
    fired on the creation and whose re-arming read finds nothing, hears of both."""
    events: list[NodeEventKind] = []
    async with zookeeper_backend.driver() as driver:
        path = "/flicker"
        sub = driver.subscribe(
            path, lambda e: events.append(e.kind) if isinstance(e, NodeEvent) else None
        )
        other = KazooClient(hosts=zookeeper_backend.hosts)
        await anyio.to_thread.run_sync(other.start)
        try:
            full = zookeeper_backend.chroot + path
            for i in range(5):
                # a request of ours goes after the watch's re-arming read, on the same ordered
                # connection: once answered, the watch is set on the server
                await driver.exists(path)
                # both requests go out together: the delete lands before the re-arming read
                other.create_async(full, b"x")
                await anyio.to_thread.run_sync(other.delete_async(full).get)
                with anyio.fail_after(10):
                    while len(events) < 2 * (i + 1):  # noqa: ASYNC110
                        await anyio.sleep(0.01)
            assert events == [NodeEventKind.CREATED, NodeEventKind.DELETED] * 5
        finally:
            sub.close()
            await anyio.to_thread.run_sync(other.stop)
            other.close()


async def test_subscribing_again_reuses_the_watch_still_set(
    zookeeper_backend: ZooKeeperBackend,
) -> None:
    """A standby that re-reads its queue drops and re-subscribes its predecessor's node: the
    server's watch, which ZooKeeper cannot remove, serves again. A second watcher would make
    kazoo's thread run two callbacks when the node goes (at a handover, while the successor's
    loop wants the GIL)."""
    events: list[NodeEvent] = []
    async with zookeeper_backend.driver() as driver, zookeeper_backend.driver() as other:
        await other.create("/pred")
        sub = driver.subscribe("/pred", events.append)
        await driver.exists("/pred")  # the watch is set (see the test above)
        for _ in range(3):
            sub.close()
            sub = driver.subscribe("/pred", events.append)
        await driver.exists("/pred")  # any watch those subscriptions set is set by now
        client = driver._session.client
        assert client is not None
        assert len(client._data_watchers[zookeeper_backend.chroot + "/pred"]) == 1
        await other.set("/pred", b"x")  # nothing missed: the change comes
        with anyio.fail_after(10):
            while len(events) < 1:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        # (deleted before the change's re-arming read, the two would be coalesced)
        await other.delete("/pred")
        with anyio.fail_after(10):
            while len(events) < 2:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        assert events == [
            NodeEvent("/pred", NodeEventKind.CHANGED),
            NodeEvent("/pred", NodeEventKind.DELETED),
        ]
        # dropped, then changed before it is wanted again: a fresh watch, from a fresh read
        await other.create("/pred")
        with anyio.fail_after(10):
            while len(events) < 3:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        sub.close()
        await other.set("/pred", b"y")
        with anyio.fail_after(10):  # its firing reached the driver: the idle watch is gone
            while "/pred" in driver._watches.idle:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        sub = driver.subscribe("/pred", events.append)
        await driver.exists("/pred")
        await other.delete("/pred")
        with anyio.fail_after(10):
            while len(events) < 4:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        assert events[2:] == [
            NodeEvent("/pred", NodeEventKind.CREATED),
            NodeEvent("/pred", NodeEventKind.DELETED),
        ]
        sub.close()
