"""HAServices in-process: a component that records its calls, a services process, and waits."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc

import ha
from ha.drivers.base import Driver
from ha.services import HAServices, LeaderElection, services

FAST = ha.Timing(backoff=ha.Backoff(initial=0.005, maximum=0.05), hook_timeout=1.0)


# not shorter: on loaded cores (CI) a 0.6 s session flapped, and a test lost its leader
SESSION = 2.0


async def wait_for(cond: Callable[[], bool], within: float = 15.0) -> None:
    with anyio.fail_after(within):
        while not cond():  # noqa: ASYNC110 - polls state owned by other tasks
            await anyio.sleep(0.005)


class Comp:
    """A component that records its grants and revocations, and confirms if given an address."""

    def __init__(self, name: str, log: list[tuple[str, str]], address: str | None = None):
        self.name, self.log, self.address = name, log, address
        self.grants: list[uuid.UUID] = []
        self.revokes = 0
        self.election: LeaderElection | None = None

    @property
    def leading(self) -> bool:
        return bool(self.grants) and len(self.grants) > self.revokes

    async def grant_leadership(self, session_id: uuid.UUID) -> None:
        self.grants.append(session_id)
        self.log.append((self.name, "grant"))
        if self.address is not None and self.election is not None:
            await self.election.confirm_leadership(session_id, self.address)

    async def revoke_leadership(self) -> None:
        self.revokes += 1
        self.log.append((self.name, "revoke"))


async def join(
    svc: HAServices, name: str, log: list[tuple[str, str]], address: str | None = None
) -> Comp:
    comp = Comp(f"{svc.identity}/{name}", log, address)
    comp.election = svc.leader_election(name)
    await comp.election.start(comp)
    return comp


@asynccontextmanager
async def process(backend: Any, name: str, **kw: Any) -> AsyncIterator[tuple[HAServices, Driver]]:
    """One process: its own driver (session) and services on the test's backend."""
    async with backend.driver(session_timeout=SESSION) as driver:
        async with services(driver, "c1", identity=name, timing=FAST, **kw) as svc:
            yield svc, driver


async def _until(check: Callable[[], Any], within: float = 15.0) -> None:
    with anyio.fail_after(within):
        while not await check():  # noqa: ASYNC110 - polls the backend
            await anyio.sleep(0.01)
