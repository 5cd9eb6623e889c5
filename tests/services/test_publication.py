"""The publication's decision, with no event loop: which transaction makes the leader node
hold our address, for each thing a look at the node can find; and that every write of a term
goes behind the lease's fence."""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence

import pytest

from ha.drivers.base import Check, Create, Delete, Op, SetData, Stat
from ha.drivers.memory import MemoryCluster, MemoryDriver
from ha.election.lease import Lease
from ha.election.names import Breadcrumb, ticket_for
from ha.election.nodes import ElectionNodes
from ha.services.publication import Found, Term, plan
from ha.services.retrieval import LeaderInfo

PATH = "/ha/c/leader/dispatcher"
DATA = b'{"address": "a:1"}'
US, THEM = 11, 22


def test_without_a_look_it_creates_under_an_existing_parent() -> None:
    assert plan(PATH, DATA, US, None) == [Create(PATH, DATA, ephemeral=True)]


def test_no_node_creates_it_with_its_missing_parents() -> None:
    parents = (Create("/ha/c/leader", b""),)
    found = Found(None, parents=parents)
    assert plan(PATH, DATA, US, found) == [*parents, Create(PATH, DATA, ephemeral=True)]


def test_our_node_with_our_address_needs_nothing() -> None:
    assert plan(PATH, DATA, US, Found(Stat(4, US), DATA)) is None


def test_our_node_with_another_address_is_set_at_its_version() -> None:
    found = Found(Stat(4, US), b"old")
    assert plan(PATH, DATA, US, found) == [SetData(PATH, DATA, 4)]


def test_another_sessions_node_is_replaced_by_ours() -> None:
    for owner in (THEM, None):  # an old leader's node, or a stray persistent write
        found = Found(Stat(7, owner))
        assert plan(PATH, DATA, US, found) == [
            Delete(PATH, 7),
            Create(PATH, DATA, ephemeral=True),
        ]


class Recording(MemoryDriver):
    """Records every transaction it is asked for."""

    def __init__(self, cluster: str) -> None:
        super().__init__(cluster)
        self.sent: list[list[Op]] = []

    async def transaction(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        self.sent.append(list(ops))
        return await super().transaction(ops)


@pytest.mark.anyio
async def test_every_write_checks_the_leaders_queue_node_first() -> None:
    """Each write of a term goes behind the lease's fence (our queue node lives); once the
    node is gone (deposed), nothing more is written."""
    cluster = "publication-fence"
    try:
        async with Recording(cluster) as driver, MemoryDriver(cluster) as vandal:
            nodes = ElectionNodes("/ha/c/election")
            name = await nodes.join(driver, ticket_for(b"a", "n1"), Breadcrumb(b"a"))
            _, stat = await driver.get(nodes.node(name))
            lease = Lease(
                "/ha/c/election",
                b"a",
                stat.created,
                driver.session_id or 0,
                nodes.node(name),
                _is_valid=lambda: True,
                _deadline=lambda: math.inf,
            )
            term = Term(driver, lease)
            fence = Check(nodes.node(name))

            def info(address: str) -> LeaderInfo:
                return LeaderInfo(address, uuid.UUID(int=1))

            driver.sent.clear()
            await term.publish("d", PATH, info("a:1"), lambda: True)  # no parent yet
            await term.publish("d", PATH, info("a:2"), lambda: True)  # ours, another address
            await vandal.delete(PATH)
            await vandal.create(PATH, b"stray")  # someone else's node
            await term.publish("d", PATH, info("a:3"), lambda: True)
            assert (await driver.get(PATH))[0] == info("a:3").encode()
            await term.unpublish("d", PATH)
            assert await driver.exists(PATH) is None
            assert len(driver.sent) >= 4 and all(ops[0] == fence for ops in driver.sent)
            # deposed: our node is gone, the write is refused at the fence
            await vandal.delete(nodes.node(name))
            await term.publish("d", PATH, info("a:4"), lambda: True)
            assert await driver.exists(PATH) is None
    finally:
        MemoryCluster.drop(cluster)
