"""A contender for in-process electors that leads until cancelled, and an async wait."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

import ha


class Work:
    """A contender that leads until cancelled."""

    def __init__(self) -> None:
        self.leases: list[ha.Lease] = []

    async def become_active(self, lease: ha.Lease) -> None:
        self.leases.append(lease)
        await anyio.sleep_forever()


async def wait_until(check: Callable[[], Any], what: str) -> Any:
    with anyio.move_on_after(10.0):
        while True:
            found = check()
            if found:
                return found
            await anyio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")
