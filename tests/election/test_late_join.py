"""A join whose reply was lost, applied by etcd after the elector looked for it and gave it up.

etcd may apply a request after its client has given up on it (etcd-io/etcd#17332): a
follower forwards a proposal to the leader, and when the link between them holds it up (a
partition, a lossy link, a member restarting), it reaches the leader, and is committed, once
the link comes back. The client's timeout does not withdraw it. The elector looked for such a
join by its ticket (P2: the Leave of a failed join, or the listing after a reconnect) and,
finding nothing, forgot the ticket and joined again with a new one. The old join then landed
just before the new one (etcd's compare on the queue's counter lets it land only while no
other join has), so the queue held a node of ours, in our own live session, that the machine
knew nothing of: ahead of our real node, and once the leader left, first. Nobody leads while
that session lives; every standby waits behind it (a liveness miss of the network soak, etcd
seed 3187, fits this: after the faults healed nobody acted, and `ha status` found no active).

Kubernetes' API server does the same: a request whose client timed out is still carried out
(kubernetes/kubernetes#128509). A PUT of the tree carries the resourceVersion it was read at,
so it lands late only while nobody else wrote the tree: just what happens when the elector's
look for the lost join found nothing and wrote nothing, and its next join was read at the same
version (that join then meets 409 and is made again, behind the late one).

Here the driver's transport holds the first join's write (its caller gets ``ConnectionLost``,
as after a request that timed out) and sends it, as it was planned, right before the next
join's: as a held proposal would land once its link came back, or a timed-out PUT be carried
out. The leader quits; the contender that gave up the join must take over.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import ha
from ha.drivers.etcd import EtcdDriver
from ha.drivers.etcd.keys import unb64
from ha.drivers.kubernetes import KubernetesDriver
from ha.drivers.kubernetes.tree import Tree
from ha.election.names import parse_entry
from ha.election.nodes import ElectionNodes
from ha.errors import ConnectionLost
from tests.support.harness import FAST

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

NODES = ElectionNodes("/svc")


def joined_ticket(path: str) -> str | None:
    """The ticket of the queue node at ``path``, if it is one."""
    if not path.startswith(NODES.queue + "/"):
        return None
    entry = parse_entry(path.rsplit("/", 1)[1])
    return None if entry is None else entry.ticket


class LateJoinEtcd:
    """On ``driver``'s transport: the first join's etcd transaction is held (its caller gets
    ConnectionLost) and sent as it stood right before the next join's transaction."""

    def __init__(self, driver: EtcdDriver) -> None:
        self.space = driver.space
        self.transport = driver._transport
        self.send = self.transport.operation
        self.transport.operation = self.operation
        self.held: dict[str, Any] | None = None
        self.held_ticket: str | None = None
        self.landed: bool | None = None  # whether the held transaction applied when sent

    def _joined(self, body: dict[str, Any]) -> str | None:
        """The ticket whose queue node ``body`` creates, if it is a join's transaction."""
        for write in body.get("success") or []:
            put = write.get("request_put")
            where = put and self.space.path_of(unb64(put.get("key")))
            if where and where[0] == "node" and joined_ticket(where[1]):
                return joined_ticket(where[1])
        return None

    async def operation(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        ticket = self._joined(body) if method == "kv/txn" else None
        if ticket is not None and self.landed is None:
            if self.held is None:
                self.held, self.held_ticket = body, ticket
                raise ConnectionLost("no reply from etcd (held on its way to the leader)")
            if ticket != self.held_ticket:  # the next join: the held one reaches the leader
                reply = await self.send("kv/txn", self.held)
                self.landed = bool(reply.get("succeeded"))
        return await self.send(method, body)


class LateJoinKubernetes:
    """On ``driver``'s transport: the first PUT of the tree that makes a queue node is held (its
    caller gets ConnectionLost) and sent as it stood, with the resourceVersion it was read at,
    right before the next join's PUT."""

    def __init__(self, driver: KubernetesDriver) -> None:
        self.transport = driver._transport
        self.send = self.transport.request
        self.transport.request = self.request
        self.held: dict[str, Any] | None = None
        self.held_ticket: str | None = None
        self.landed: bool | None = None  # whether the held PUT applied when sent

    def _joined(self, body: dict[str, Any]) -> str | None:
        """The ticket whose queue node the tree ``body`` makes, if it is a join's PUT."""
        tree = Tree.decode(body, "the test's")
        for path in tree.touched:
            if path in tree.nodes and joined_ticket(path):
                return joined_ticket(path)
        return None

    async def request(self, method: str, url: str, body: Any = None, **options: Any) -> Any:
        joining = method == "PUT" and url == self.transport.tree_url
        ticket = self._joined(body) if joining else None
        if ticket is not None and self.landed is None:
            if self.held is None:
                self.held, self.held_ticket = body, ticket
                raise ConnectionLost("no reply from the API server (the PUT is carried out later)")
            if ticket != self.held_ticket:  # the next join: the held PUT is carried out now
                status, _ = await self.send("PUT", url, self.held, **options)
                self.landed = status == 200
        return await self.send(method, url, body, **options)


LATE = {"etcd": LateJoinEtcd, "kubernetes": LateJoinKubernetes}


class Work:
    def __init__(self) -> None:
        self.began = anyio.Event()

    async def become_active(self, lease: ha.Lease) -> None:
        self.began.set()
        await anyio.sleep_forever()


@pytest.mark.parametrize("backend", sorted(LATE))
async def test_a_join_given_up_that_lands_later_does_not_hold_the_queue(
    backend: str, request: pytest.FixtureRequest
) -> None:
    servers = request.getfixturevalue(f"{backend}_backend")
    async with (
        servers.driver(session_timeout=1.0) as dh,
        servers.driver(session_timeout=1.0) as da,
        anyio.create_task_group() as tg,
    ):
        late = LATE[backend](da)
        h = ha.Elector(dh, "/svc", "h", timing=FAST)
        a = ha.Elector(da, "/svc", "a", timing=FAST)
        tg.start_soon(h.run, Work())
        await h.wait_active()
        with anyio.fail_after(10):  # h's term is written: the tree rests (Kubernetes)
            while await dh.exists(NODES.history) is None:
                await anyio.sleep(0.01)
        work = Work()
        tg.start_soon(a.run, work)
        with anyio.fail_after(10):
            await a.wait_state(ha.State.STANDBY)
        assert late.landed, "the held join did not land: the scenario did not happen"

        h.quit()  # the leader leaves: a is next, unless a node of its own stands before it
        with anyio.move_on_after(5):
            await work.began.wait()
        queue = [e.identity for e in await NODES.entries(dh)]
        state = a.state
        tg.cancel_scope.cancel()
    # a leads, with its own node only: the one that landed late is gone
    assert (work.began.is_set(), queue) == (True, [b"a"]), f"a is {state.value}"
