"""While the election is paused (``ha pause``), ``ha run`` leaves its COMMAND alone.

Patroni's pause: no automatic action. On the active host a failing health check neither
cedes the lead nor stops COMMAND (logged once per failing spell), and a COMMAND that exits by
itself is not restarted, nor followed by ``--on-exit``'s cede, quit or fail: it stays down,
logged once, until ``ha resume``. Not restarted because a paused Patroni does not restart
PostgreSQL either: an operator who paused is working on the service, and a restart in place
could fight them. On resume the normal policies apply again: the exit is handled by
``--on-exit`` as if it had just happened (``restart`` runs COMMAND again, or cedes for a first
run that never came up), and a health check still failing cedes as usual. A standby's policies
are not held: leaving the queue takes the lead from nobody.

The pause is read from the backend when a policy would act (not the elector's view: an active
does not keep it fresh) and watched while waiting for the resume. A read that fails counts as
not paused: the policies then act as they do without ``ha pause``.
"""

from __future__ import annotations

import logging

import anyio

from ..drivers.base import Driver
from ..election.nodes import ElectionNodes
from ..errors import HAError

__all__ = ("PauseWatch",)

log = logging.getLogger("ha.supervisor")

RECHECK = 1.0  # seconds: read the pause again while waiting, in case an event was lost


class PauseWatch:
    """Reads the election's pause node; ``poke`` is its subscription's callback."""

    def __init__(self, driver: Driver, path: str):
        self.driver = driver
        self.node = ElectionNodes(path).pause
        self._changed = anyio.Event()

    def poke(self, _event: object = None) -> None:
        self._changed.set()

    async def paused(self) -> bool:
        """Whether the election is paused now (False when the backend cannot say)."""
        try:
            with anyio.fail_after(self.driver.session_timeout):
                return await self.driver.exists(self.node) is not None
        except (HAError, OSError, TimeoutError) as exc:
            log.debug("reading the pause failed: %s", exc)
            return False

    async def resumed(self) -> None:
        """Return once the election is not paused."""
        while True:
            self._changed = anyio.Event()
            if not await self.paused():
                return
            with anyio.move_on_after(RECHECK):
                await self._changed.wait()
