"""The memory driver's faults for ``ha.testing.faults``: its own public methods (a
``MemoryDriver`` is a simulated client of a simulated server; its faults are its model)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .driver import MemoryDriver

__all__ = ("MemoryFaults",)


class MemoryFaults:
    """``FaultHooks`` over a ``MemoryDriver``'s fault methods; it injects all of them."""

    backend = "memory"
    cannot: Mapping[str, str] = {}

    def __init__(self, driver: MemoryDriver) -> None:
        self._driver = driver

    async def crash(self) -> None:
        self._driver.crash()

    async def expire(self) -> None:
        self._driver.expire()

    def disconnect(self) -> None:
        self._driver.disconnect()

    def reconnect(self) -> None:
        self._driver.reconnect()

    def partition(self) -> None:
        self._driver.partition()

    def heal(self) -> None:
        self._driver.heal()

    def freeze(self) -> None:
        self._driver.freeze()

    def thaw(self) -> None:
        self._driver.thaw()

    def fail_next(self, count: int = 1, *, transient: bool = True) -> None:
        self._driver.fail_next(count, transient=transient)
