"""A quit the backend could not hear is paid once it can: the old node never stands first for good.

Found by the supervised chaos soak on Kubernetes (seed 5017): a supervisor ceding the lead
quit while the API server was down; its elector stopped trying to leave once it had had no
contact for a session timeout, taking the session for expired. Nothing had expired it: the
server was down, and when it came back the session was renewed, so its node stood first in the
queue and every supervisor, its own next elector too, stood by behind it, with no leader.
Here the memory server goes down for three session timeouts (``MemoryCluster.server_down``:
nothing expires meanwhile, and sessions resume after, as on ZooKeeper, etcd and Kubernetes)
while the active is cut off and quits. Judged by the other contender: it must lead.
"""

from __future__ import annotations

import uuid

import anyio
import pytest

import ha
from ha.drivers.memory import MemoryCluster, MemoryDriver
from ha.testing import faults
from tests.support.harness import FAST

pytestmark = pytest.mark.anyio

TIMEOUT = 0.5


class Work:
    """The contender's own record: when its work began and when it stopped."""

    def __init__(self) -> None:
        self.began = anyio.Event()
        self.stopped = anyio.Event()

    async def become_active(self, lease: ha.Lease) -> None:
        self.began.set()
        try:
            await anyio.sleep_forever()
        finally:
            self.stopped.set()


async def test_a_quit_during_a_server_outage_leaves_the_queue_once_the_server_is_back() -> None:
    name = f"owed-{uuid.uuid4()}"
    cluster = MemoryCluster.named(name)
    async with (
        MemoryDriver(name, session_timeout=TIMEOUT) as da,
        MemoryDriver(name, session_timeout=TIMEOUT) as db,
    ):
        a = ha.Elector(da, "/svc", "a", timing=FAST)
        b = ha.Elector(db, "/svc", "b", timing=FAST)
        async with anyio.create_task_group() as tg:
            work_a, work_b = Work(), Work()
            tg.start_soon(a.run, work_a)
            with anyio.fail_after(10):
                await a.wait_active()
            tg.start_soon(b.run, work_b)
            with anyio.fail_after(10):
                await b.wait_state(ha.State.STANDBY)
            session = da.session_id

            cluster.server_down()
            faults(da).disconnect()
            a.quit()
            with anyio.fail_after(10):  # a quit does not wait for a backend that is down
                await a.wait_state(ha.State.NEUTRAL)
            await anyio.sleep(3 * TIMEOUT)  # past a's tries of its own
            faults(da).reconnect()
            cluster.server_up()

            with anyio.fail_after(10):  # judged by b's work, not by what its elector says
                await work_b.began.wait()
            assert work_a.stopped.is_set()  # a's work had stopped: never two at once
            assert da.session_id == session  # the session lived on: nothing expired a's node
            tg.cancel_scope.cancel()
