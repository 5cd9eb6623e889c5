"""etcd's limit on one transaction (``--max-txn-ops``, 128 operations by default) and the driver.

A recursive delete of any size works (one range delete per level of the subtree, all or
nothing); a transaction of ha's ops within the limit goes through; one truly over it fails with
one line that names the limit, and nothing of it is applied.

Every test runs under asyncio and trio against a real etcd (tests/support/backends/etcd.py).
"""

from __future__ import annotations

import anyio
import pytest

from ha.drivers.base import Create, NodeEvent, NodeEventKind
from ha.drivers.etcd import subtree
from ha.errors import BadVersion, DriverError, NoNode
from tests.support.backends.etcd import EtcdBackend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

WIDE, DEEP = 16, 14  # /big: 16 children of 14 children each, 241 nodes in all


async def grow(driver: object, root: str = "/big") -> list[str]:
    """The tree under ``root``, created one node at a time; its paths, parents first."""
    paths = [root]
    for i in range(WIDE):
        paths.append(f"{root}/n{i}")
        paths += [f"{root}/n{i}/m{j}" for j in range(DEEP)]
    for path in paths:
        await driver.create(path, b"x", ephemeral=path.endswith("m0"))  # type: ignore[attr-defined]
    return paths


async def test_a_recursive_delete_of_241_nodes(etcd_backend: EtcdBackend) -> None:
    async with etcd_backend.driver() as driver:
        paths = await grow(driver)
        await driver.create("/bigger")  # a sibling whose name starts the same: left alone
        deleted: list[NodeEvent] = []
        driver.subscribe("/big/n3/m5", deleted.append)
        await driver.exists("/big/n3/m5")
        await driver.set("/big", b"y")
        with pytest.raises(BadVersion):  # the version is checked before anything goes
            await driver.delete("/big", 0, recursive=True)
        assert await driver.exists(paths[-1]) is not None
        await driver.delete("/big", 1, recursive=True)
        for path in (paths[0], paths[1], paths[-1], "/big/n3/m0"):
            assert await driver.exists(path) is None
        assert await driver.children("/") == ["bigger"]
        with anyio.fail_after(10):
            while not deleted:
                await anyio.sleep(0.01)
        assert deleted == [NodeEvent("/big/n3/m5", NodeEventKind.DELETED)]
        # the paths can be used again, from scratch
        await driver.create("/big")
        assert (await driver.exists("/big")).version == 0  # type: ignore[union-attr]
        with pytest.raises(NoNode):
            await driver.delete("/missing", recursive=True)


async def test_a_subtree_deeper_than_one_transaction(etcd_backend: EtcdBackend) -> None:
    """More levels than one transaction holds: the deepest go first, then the rest at once."""
    async with etcd_backend.driver() as driver:
        path = ""
        for depth in range(subtree.LEVELS + 5):
            path += f"/d{depth}"
            await driver.create(path)
        await driver.delete("/d0", recursive=True)
        assert await driver.children("/") == []


async def test_a_node_born_in_the_subtree_meanwhile_is_not_left_behind(
    etcd_backend: EtcdBackend,
) -> None:
    """The delete pins what it read: a node created under the subtree between the read and
    the delete makes etcd refuse it (nothing goes), and the driver's next try takes it too."""
    async with etcd_backend.driver() as driver:
        await driver.create("/t/a/b", makepath=True)
        levels = await driver._ops.levels("/t")
        await driver.create("/t/a/b/c")  # one level deeper than read
        reply = await driver._transport.operation("kv/txn", subtree.guarded(driver.space, levels))
        assert not reply.get("succeeded")
        assert await driver.children("/t/a/b") == ["c"]
        await driver.delete("/t", recursive=True)
        assert await driver.exists("/t") is None
        assert await driver.exists("/t/a/b/c") is None


async def test_a_transaction_within_the_limit_goes_through(etcd_backend: EtcdBackend) -> None:
    """120 creates under one parent: 121 compares (a node's incarnation record needs none of
    its own) and 120 writes, under etcd's 128."""
    async with etcd_backend.driver() as driver:
        await driver.create("/p")
        done = await driver.transaction([Create(f"/p/c{i:03d}") for i in range(120)])
        assert done[-1] == "/p/c119"
        assert len(await driver.children("/p")) == 120


async def test_a_transaction_over_the_limit_is_one_clear_line(etcd_backend: EtcdBackend) -> None:
    async with etcd_backend.driver() as driver:
        with pytest.raises(DriverError) as caught:
            await driver.transaction([Create(f"/c{i:03d}") for i in range(200)])
        message = str(caught.value)
        assert "\n" not in message
        assert "200 ops" in message and "--max-txn-ops" in message and "128" in message
        assert await driver.children("/") == []
