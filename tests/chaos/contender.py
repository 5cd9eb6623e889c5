"""The chaos contender: an ``ha.Elector`` whose work acts on the witness while the lease allows.

Its hooks sleep a random short while now and then (a slow fence, a slow start), and its work
stalls the event loop with a blocking ``time.sleep`` now and then (a GC pause, a blocking call),
sometimes past its lease. Run as a process::

    python tests/chaos/contender.py URL IDENTITY WITNESS_FILE ANYIO_BACKEND SEED

or in-process (the memory backend) through ``ChaosContender``.
"""

from __future__ import annotations

import logging
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

if os.environ.get("HA_SLEEP_BY_WAIT"):  # under libfaketime: see tests/netns/envs.py, Clocks
    import threading

    time.sleep = lambda seconds: threading.Event().wait(seconds) and None  # before kazoo

import anyio
import anyio.abc

if __name__ == "__main__":  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ha
import ha.election.nodes
from ha.drivers.base import Driver
from ha.errors import Unavailable
from tests.support.witness import Witness

ELECTION = "/svc"


async def leader_epoch(driver: Driver) -> int | None:
    """The token of the queue's first node, read from outside: the epoch in force by now
    (every older leader's node is gone). None when the queue is empty."""
    nodes = ha.election.nodes.ElectionNodes(ELECTION)
    entries = await nodes.entries(driver)
    if not entries:
        return None
    stat = await driver.exists(nodes.node(entries[0].name))
    return None if stat is None else stat.created


TIMING = ha.Timing(
    backoff=ha.Backoff(initial=0.01, maximum=0.2), hook_timeout=1.0, fence_timeout=2.0
)
STALL = 0.02  # chance of a stall before an act, and between an act and its write
STALLS = (0.1, 0.5, 1.2)  # its length, in session timeouts (the last outlives the lease)


class ChaosContender:
    """Acts every ~20 ms while active: one witness act and its fenced write.

    ``broken`` plays a contender that ignores its lease, for the harness's self-test: it acts
    without asking, writes without the fence, and goes on for a while after being cancelled.
    """

    def __init__(
        self,
        driver: Driver,
        witness: Witness,
        rng: random.Random,
        *,
        late: anyio.abc.TaskGroup | None = None,
        broken: bool = False,
    ) -> None:
        self.driver, self.witness, self.rng, self.broken = driver, witness, rng, broken
        self.session = driver.session_timeout
        self.late = late  # where a deposed leader's late writes run
        self.lates = 0

    async def _nap(self, chance: float, most: float) -> None:
        if self.rng.random() < chance:
            await anyio.sleep(self.rng.uniform(0, most))

    async def fence_old_active(self, breadcrumb: bytes) -> None:
        await self._nap(0.5, 0.3 * self.session)

    async def become_standby(self) -> None:
        await self._nap(0.3, 0.1)

    async def enter_neutral(self) -> None:
        await self._nap(0.3, 0.1)

    async def become_active(self, lease: ha.Lease) -> None:
        await self._nap(0.5, 0.2 * self.session)
        try:
            while True:
                await self._step(lease)
        finally:
            if self.late is not None and self.rng.random() < 0.5:
                # an in-flight request of the deposed leader: its write must be fenced off
                self.late.start_soon(self._late_write, lease, self.rng.uniform(0, self.session))
            if self.broken:  # ignores the cancellation for a while
                with anyio.CancelScope(shield=True):
                    with anyio.move_on_after(self.session):
                        while True:
                            await self._step(lease)

    async def _late_write(self, lease: ha.Lease, delay: float) -> None:
        await anyio.sleep(delay)
        self.lates += 1
        act = f"{self.witness.identity}/{self.witness.pid}/late{self.lates}"
        try:
            await self.witness.write(self.driver, lease, act, fenced=not self.broken)
        except Exception:  # the driver may be closed by now
            pass

    def _stall(self) -> None:
        if self.rng.random() < STALL:
            length = self.rng.choice(STALLS) * self.session
            self.witness.note("stall", length=length)
            time.sleep(length)  # blocks the loop

    async def _step(self, lease: ha.Lease) -> None:
        self._stall()
        act = self.witness.act(lease, valid=True if self.broken else None)
        if act is not None:
            self._stall()  # between the act and its write: the write may come from a deposed leader
            await self.witness.write(self.driver, lease, act, fenced=not self.broken)
        await anyio.sleep(0.02)


async def main(url: str, identity: str, witness_file: str, seed: str) -> None:
    witness = Witness(witness_file, identity)
    rng = random.Random(f"{seed}-{identity}")
    while True:
        driver = ha.connect(url)
        try:
            await driver.start()
        except (
            Unavailable
        ):  # a busy file or a server out of reach: try again, as a supervisor would
            await anyio.sleep(0.1)
            continue
        try:
            elector = ha.Elector(driver, ELECTION, identity, timing=TIMING)
            async with anyio.create_task_group() as late:
                await elector.run(ChaosContender(driver, witness, rng, late=late))
                late.cancel_scope.cancel()
        finally:
            await driver.aclose()
        return


if __name__ == "__main__":
    if os.environ.get("HA_CHAOS_DEBUG"):
        handler = logging.StreamHandler()  # stamped with the witness's clock
        handler.addFilter(lambda r: setattr(r, "mono", time.monotonic()) or True)
        handler.setFormatter(logging.Formatter("%(mono).3f %(name)s %(message)s"))
        logging.basicConfig(level=logging.DEBUG, handlers=[handler])
    url, identity, witness_file, backend, seed = sys.argv[1:6]
    args: Any = (url, identity, witness_file, seed)
    anyio.run(main, *args, backend=backend)
