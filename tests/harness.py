"""A cluster of electors on the memory backend, for scenario and property tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import anyio.abc

import ha
from ha.drivers.memory import MemoryCluster, MemoryDriver
from ha.testing import History, Recorder, check_history

TIMEOUT = 0.3
FAST = ha.Timing(backoff=ha.Backoff(initial=0.005, maximum=0.05), hook_timeout=0.5)


async def wait_for(cond: Callable[[], bool], within: float = 5.0) -> None:
    with anyio.fail_after(within):
        while not cond():  # noqa: ASYNC110 - polls state owned by other tasks
            await anyio.sleep(0.005)


class Node:
    def __init__(self, name: str, driver: MemoryDriver, elector: ha.Elector, rec: Recorder):
        self.name, self.driver, self.elector, self.rec = name, driver, elector, rec
        self.scope = anyio.CancelScope()
        self.error: BaseException | None = None
        self.done = anyio.Event()

    @property
    def state(self) -> ha.State:
        return self.elector.state


class Cluster:
    def __init__(self, tg: anyio.abc.TaskGroup, stack: AsyncExitStack, name: str) -> None:
        self.tg, self.stack, self.name = tg, stack, name
        self.history = History()
        self.nodes: list[Node] = []

    async def add(self, name: str, timing: ha.Timing = FAST, **kw: Any) -> Node:
        driver = MemoryDriver(self.name, session_timeout=kw.pop("session_timeout", TIMEOUT))
        await self.stack.enter_async_context(driver)
        elector = ha.Elector(driver, "/svc", name, timing=timing, **kw)
        rec = Recorder(name, self.history)
        node = Node(name, driver, elector, rec)

        elector.add_listener(self.history.transition)

        async def run() -> None:
            with node.scope:
                try:
                    await elector.run(rec)
                except Exception as exc:
                    node.error = exc
            node.done.set()

        self.tg.start_soon(run)
        self.nodes.append(node)
        return node

    def active(self) -> list[Node]:
        return [n for n in self.nodes if n.state is ha.State.ACTIVE]

    def settled(self) -> bool:
        live = [n for n in self.nodes if not n.done.is_set()]
        return len(self.active()) == 1 and all(
            n.state in (ha.State.ACTIVE, ha.State.STANDBY) for n in live
        )

    def crash(self, node: Node) -> None:
        self.history.add(node.name, "crash")
        node.driver.crash()
        node.scope.cancel()


@asynccontextmanager
async def cluster() -> AsyncIterator[Cluster]:
    name = f"elector-{id(object())}"
    # the drivers are closed (stack) before the task group ends: proper nesting
    async with anyio.create_task_group() as tg, AsyncExitStack() as stack:
        c = Cluster(tg, stack, name)
        try:
            yield c
        finally:
            for n in c.nodes:
                n.elector.quit()
            with anyio.move_on_after(2):
                for n in c.nodes:
                    await n.done.wait()
            tg.cancel_scope.cancel()
    MemoryCluster.drop(name)
    check_history(c.history)
