"""The services' process as a member of its election, so that ``ha failover`` can move it.

``ha failover PATH`` (``ha/admin/failover.py``) asks members only: a process with a member
node ``PATH/members/<identity>`` that honours requests, as ``ha run`` supervisors do. With
``ha.open_services(..., members=True)`` the services' process is such a member: it claims its
node before it first joins (a second live process with its identity is refused), keeps its
state there (the elector's, or "out" while it cools down after ceding) and follows the
failover requests with the members' pure rules (``ha/membership/rules.py``).
What the rules decide is done by ``HAServices``: leave the election without fence (every
component revoked first: one failover moves them all) and join again, at the back of the
queue, once the rules allow it (at once when stepping aside behind a target, after the
request's cooling period when ceding).
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from ..drivers.base import ConnectionEvent
from ..election.elector import Elector
from ..election.journal import Transition
from ..election.machine import State
from ..election.names import identity_bytes
from ..election.nodes import ElectionNodes
from ..errors import HAError
from ..membership.follow import Wakeup, follow_failover, keep_member
from ..membership.members import claim_member, remove_member
from ..membership.records import Member
from ..membership.rules import Decision, Eligibility

if TYPE_CHECKING:
    from . import HAServices

__all__ = ("Membership",)

log = logging.getLogger("ha.services")


class Membership:
    """One process's member node and its handling of failover requests (see the module)."""

    def __init__(self, services: HAServices) -> None:
        self.services = services
        self.identity = identity_bytes(services.identity)
        self.rules = Eligibility(self.identity, health_check=False)
        self.state = State.NEUTRAL.value
        self.epoch: int | None = None
        self.scope = anyio.CancelScope()
        self._member_poke = Wakeup()
        self._failover_poke = Wakeup()
        self._tg: anyio.abc.TaskGroup | None = None
        self.out = False  # left the election on a request's rule, until it lets us back

    def eligible(self) -> bool:
        """Whether the process may take part now (not cooling down after a cede)."""
        return self.rules.verdict(anyio.current_time()).eligible

    def observe(self, elector: Elector, contender: object) -> object:
        """Follow ``elector``'s states (for the member node); the contender is left as is."""
        elector.add_listener(self._transition)
        return contender

    def _transition(self, t: Transition) -> None:
        self.state = t.new.value
        self.epoch = t.epoch if t.new is State.ACTIVE else None
        self._poke_member()

    def _poke_member(self) -> None:
        self._member_poke.set()

    def _poke_failover(self, _event: object = None) -> None:
        self._failover_poke.set()

    def _on_connection(self, event: ConnectionEvent) -> None:
        self._poke_member()  # a new session lost our ephemeral node: write it again
        self._poke_failover()

    def _member(self) -> Member:
        verdict = self.rules.verdict(anyio.current_time())
        state, note = (self.state, "") if verdict.eligible else ("out", verdict.note)
        return Member(
            self.identity,
            state,
            self.epoch if state == State.ACTIVE.value else None,
            socket.gethostname(),
            os.getpid(),
            time.time(),
            note,
        )

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Claim the member node, then follow requests until ``scope`` is cancelled."""
        driver, path = self.services.driver, self.services.election_path
        await claim_member(driver, path, self._member(), wait=1.5 * driver.session_timeout)
        subs = [
            driver.subscribe(ElectionNodes(path).failover, self._poke_failover),
            driver.subscribe(None, self._on_connection),
        ]
        task_status.started()
        try:
            with self.scope:
                async with anyio.create_task_group() as self._tg:
                    self._tg.start_soon(keep_member, driver, path, self._member, self._member_poke)
                    self._tg.start_soon(
                        follow_failover,
                        driver,
                        path,
                        self._failover_poke,
                        self.rules,
                        self._leading,
                        self._act,
                    )
        finally:
            for sub in subs:
                sub.close()
            with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
                try:
                    await remove_member(driver, path, self.identity)
                except (HAError, OSError):
                    pass

    def _leading(self) -> int | None:
        lease = self.services.lease
        return lease.epoch if lease is not None else None

    def _act(self, decision: Decision) -> None:
        for level, line in decision.say:
            log.log(level, "%s", line)
        if decision.quit and not self.out and self._tg is not None:
            self.out = True
            self._tg.start_soon(self._rejoin)
        if decision.wake:
            self._poke_member()

    async def _rejoin(self) -> None:
        """Leave the election without fence (every component revoked first), wait out the
        cooldown the rules set (none after stepping aside), join again at the queue's back."""
        services = self.services  # (in our task group: cancelled with the membership)
        try:
            await services._stop_elector()
            await self._until_eligible()
        finally:
            self.out = False
        if services._elector is None and any(e.component for e in services._elections.values()):
            await services._start_elector()

    async def _until_eligible(self) -> None:
        self._poke_member()  # "out", with the reason, while it lasts
        while True:
            verdict = self.rules.verdict(anyio.current_time())
            if verdict.eligible:
                break
            if math.isfinite(verdict.wake_at):
                await anyio.sleep(max(0.0, verdict.wake_at - anyio.current_time()))
            else:
                await anyio.sleep(0.1)
        self._poke_member()
