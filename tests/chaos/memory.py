"""A chaos round on the memory backend: three electors in this process, one MemoryCluster.

A process cannot be SIGSTOPped here, so the faults are the memory driver's (crash, partition,
freeze, disconnect, expire) and loop stalls (a blocking ``time.sleep`` stops every elector,
the server's clock runs on), with restarts of crashed slots under a new identity.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc

import ha
from ha.drivers.memory import MemoryCluster, MemoryDriver
from ha.errors import HAError
from ha.testing import faults
from tests.chaos import SPAN, Fault, RoundResult, choose, schedule
from tests.chaos.contender import ELECTION, TIMING, ChaosContender, leader_epoch
from tests.support.witness import Witness, landed, prepare, read_lines, verdict

SESSION = 0.5
LIVE_WITHIN = 3.0


@dataclass
class Slot:
    name: str
    incarnation: int = 0
    identity: str = ""
    driver: MemoryDriver | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)
    elector: ha.Elector | None = None

    @property
    def alive(self) -> bool:
        return self.driver is not None and not self.done.is_set()


class MemoryRound:
    def __init__(self, seed: int, workdir: Path, loop: str, broken: bool = False) -> None:
        self.cluster = f"chaos-{uuid.uuid4().hex[:8]}"
        self.file = workdir / f"witness-memory-{seed}.jsonl"
        self.file.unlink(missing_ok=True)  # a replay into the same directory starts afresh
        self.result = RoundResult("memory", seed, loop, schedule("memory", seed))
        self.broken = broken
        self.slots = [Slot(name) for name in "abc"]
        self.epochs: list[tuple[float, int]] = []
        self.expiries: list[tuple[str, float]] = []  # forced: out of the timing model
        self.witnesses: list[Witness] = []

    async def start(self, tg: anyio.abc.TaskGroup, slot: Slot) -> None:
        slot.identity = slot.name + (str(slot.incarnation) if slot.incarnation else "")
        slot.incarnation += 1
        slot.driver = MemoryDriver(self.cluster, session_timeout=SESSION)
        slot.scope, slot.done = anyio.CancelScope(), anyio.Event()
        rng = random.Random(f"{self.result.seed}-{slot.identity}")
        witness = Witness(self.file, slot.identity)
        self.witnesses.append(witness)
        contender = ChaosContender(slot.driver, witness, rng, late=tg, broken=self.broken)
        slot.elector = ha.Elector(slot.driver, ELECTION, slot.identity, timing=TIMING)
        tg.start_soon(self._run, slot, contender, witness)
        self.result.note(f"start {slot.identity}")

    @staticmethod
    async def _run(slot: Slot, contender: ChaosContender, witness: Witness) -> None:
        assert slot.driver is not None and slot.elector is not None
        try:
            with slot.scope:
                async with slot.driver:
                    await slot.elector.run(contender)
        except HAError:
            pass  # a fatal election error ends this "process"; the harness restarts it
        finally:
            slot.done.set()  # its witness stays open: a late write may still come

    def leader_first(self, pick: float) -> Slot | None:
        """The target: the active most of the time, else any live slot."""
        live = [s for s in self.slots if s.alive]
        active = [s for s in live if s.elector and s.elector.state is ha.State.ACTIVE]
        pool = active if active and pick < 0.7 else live
        return choose(pick, pool) if pool else None  # type: ignore[return-value]

    async def observe(self) -> None:
        async with MemoryDriver(self.cluster, session_timeout=5.0) as d:
            while True:
                try:
                    epoch = await leader_epoch(d)
                    if epoch is not None:
                        self.epochs.append((time.monotonic(), epoch))
                except HAError:
                    pass
                await anyio.sleep(0.05)

    async def run(self) -> RoundResult:
        r = self.result
        async with MemoryDriver(self.cluster, session_timeout=5.0) as d:
            await prepare(d)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.observe)
            for slot in self.slots:
                await self.start(tg, slot)
            t0 = anyio.current_time()
            for fault in r.schedule:
                await anyio.sleep_until(t0 + fault.at)
                await self.apply(tg, fault)
            await anyio.sleep_until(t0 + SPAN)
            for slot in self.slots:  # heal
                if slot.alive and slot.driver is not None:
                    f = faults(slot.driver)
                    f.heal()
                    f.thaw()
                    f.reconnect()
                elif not slot.alive:
                    await self.start(tg, slot)
            healed = time.monotonic()
            r.note("healed")
            with anyio.move_on_after(LIVE_WITHIN + 1):
                while not any(
                    x["kind"] == "act" and x["begin"] >= healed for x in read_lines(self.file)
                ):
                    await anyio.sleep(0.05)
            await anyio.sleep(0.1)
            for slot in self.slots:
                if slot.elector is not None and slot.alive:
                    slot.elector.quit()
            with anyio.move_on_after(2):
                for slot in self.slots:
                    await slot.done.wait()
            async with MemoryDriver(self.cluster, session_timeout=5.0) as d:
                records = await landed(d)
            tg.cancel_scope.cancel()
        MemoryCluster.drop(self.cluster)
        for witness in self.witnesses:
            witness.close()
        r.violations = verdict(
            read_lines(self.file),
            records,
            expiries=self.expiries,
            window=SESSION,
            epochs_seen=self.epochs,
            healed_at=healed,
            live_within=LIVE_WITHIN,
            figures=r.figures,
        )
        r.seconds = time.monotonic() - r.started
        return r

    async def apply(self, tg: anyio.abc.TaskGroup, fault: Fault) -> None:
        length = fault.length * SESSION
        if fault.kind == "stall":
            self.result.note(f"stall the loop {length:.2f}s")
            self.result.applied["stall"] += 1
            time.sleep(length)  # noqa: ASYNC251 - every elector and the memory server stall
            return
        if fault.kind == "restart":
            dead = [s for s in self.slots if not s.alive]
            if dead:
                self.result.applied["restart"] += 1
                await self.start(tg, choose(fault.pick, dead))  # type: ignore[arg-type]
            return
        slot = self.leader_first(fault.pick)
        if slot is None or slot.driver is None:
            return
        driver = slot.driver
        self.result.applied[fault.kind] += 1
        self.result.note(f"{fault.kind} {slot.identity} ({length:.2f}s)")
        f = faults(driver)
        if fault.kind == "crash":
            await f.crash()
            slot.scope.cancel()
            await slot.done.wait()
        elif fault.kind == "expire":
            self.expiries.append((slot.identity, time.monotonic()))
            if driver.session_id is not None:  # a slot just started may have none yet
                await f.expire()
        else:
            start, end = {
                "partition": (f.partition, f.heal),
                "freeze": (f.freeze, f.thaw),
                "disconnect": (f.disconnect, f.reconnect),
            }[fault.kind]
            start()

            async def later() -> None:
                await anyio.sleep(length)
                end()

            tg.start_soon(later)


async def memory_round(seed: int, workdir: Path, loop: str, broken: bool = False) -> RoundResult:
    return await MemoryRound(seed, workdir, loop, broken).run()
