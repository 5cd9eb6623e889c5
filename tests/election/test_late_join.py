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

Here the etcd driver's transport holds the first join's transaction (its caller gets
``ConnectionLost``, as after a request that timed out) and sends it, as it was planned, right
before the next join's: as a held proposal would land once its link came back. The leader
quits; the contender that gave up the join must take over.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import ha
from ha.drivers.etcd import EtcdDriver
from ha.drivers.etcd.keys import unb64
from ha.election.names import parse_entry
from ha.election.nodes import ElectionNodes
from ha.errors import ConnectionLost
from tests.support.backends.etcd import EtcdBackend
from tests.support.harness import FAST

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

NODES = ElectionNodes("/svc")


class LateJoin:
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
            if where and where[0] == "node" and where[1].startswith(NODES.queue + "/"):
                entry = parse_entry(where[1].rsplit("/", 1)[1])
                return None if entry is None else entry.ticket
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


class Work:
    def __init__(self) -> None:
        self.began = anyio.Event()

    async def become_active(self, lease: ha.Lease) -> None:
        self.began.set()
        await anyio.sleep_forever()


async def test_a_join_given_up_that_lands_later_does_not_hold_the_queue(
    etcd_backend: EtcdBackend,
) -> None:
    async with (
        etcd_backend.driver(session_timeout=1.0) as dh,
        etcd_backend.driver(session_timeout=1.0) as da,
        anyio.create_task_group() as tg,
    ):
        late = LateJoin(da)
        h = ha.Elector(dh, "/svc", "h", timing=FAST)
        a = ha.Elector(da, "/svc", "a", timing=FAST)
        tg.start_soon(h.run, Work())
        await h.wait_active()
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
