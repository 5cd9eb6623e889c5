"""One component's grant, and the contender the services' one elector runs.

``HAServices`` keeps a ``Grant`` per component, from ``grant_leadership`` until its
``revoke_leadership`` is owed no more, and runs its elector with ``Leadership``: every
component of the process leads together.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from ..election.lease import Lease
from .component import LeaderElection
from .retrieval import LeaderInfo

if TYPE_CHECKING:
    from . import HAServices

__all__ = ("Grant", "Leadership", "revoke_bounded")

log = logging.getLogger("ha.services")


@dataclass(eq=False, slots=True)
class Grant:
    """One component's grant, from ``grant_leadership`` until ``revoke_leadership`` is owed
    no more. It ends first (no more leadership, nothing more published, its task stopped);
    the revoke follows."""

    session_id: uuid.UUID
    scope: anyio.CancelScope  # the grant_leadership task's
    done: anyio.Event  # that task has finished
    confirmed: LeaderInfo | None = None  # the address confirmed for this grant
    ended: bool = False

    def current(self, session_id: uuid.UUID) -> bool:
        return not self.ended and session_id == self.session_id


class Leadership:
    """The contender the services' one elector runs: all components lead together."""

    def __init__(self, services: HAServices) -> None:
        self.services = services

    async def become_active(self, lease: Lease) -> None:
        await self.services._lead(lease)


async def revoke_bounded(election: LeaderElection, limit: float) -> None:
    """The component's ``revoke_leadership``, bounded by ``limit``; a failure is told."""
    assert election.component is not None
    name = election.name
    try:
        with anyio.fail_after(limit):
            await election.component.revoke_leadership()
    except TimeoutError as exc:
        log.error("%s: revoke_leadership did not finish in %gs", name, limit)
        election.report_error("revoke_leadership", exc)
    except Exception as exc:
        log.exception("%s: revoke_leadership raised", name)
        election.report_error("revoke_leadership", exc)
