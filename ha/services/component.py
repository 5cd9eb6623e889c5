"""What a component sees of its process's leader election: the ``Component`` protocol it
implements and the ``LeaderElection`` handle it gets (Flink's ``LeaderContender`` and
``LeaderElection``).

The handle holds no state of the grant: ``HAServices`` keeps each component's grant in one
record and publishes what the component confirms; the handle asks it.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Protocol

from ..errors import ConfigurationError
from .retrieval import LeaderInfo

if TYPE_CHECKING:
    from . import HAServices

__all__ = ("Component", "LeaderElection")

log = logging.getLogger("ha.services")


class Component(Protocol):
    """What a component supplies to take part in its process's leader election.

    ``grant_leadership`` runs in a task of the leadership scope: it may start the component's
    work and return, or do the work itself until cancelled. ``revoke_leadership`` is called
    when the grant ends (leadership lost, component closed); it should return promptly (it is
    bounded by the elector's hook timeout) and must not rely on the backend. An exception from
    ``grant_leadership`` is logged and ends nothing but that task: the grant stands, and no
    address is published for it unless it was confirmed.
    """

    async def grant_leadership(self, session_id: uuid.UUID) -> None: ...

    async def revoke_leadership(self) -> None: ...


class LeaderElection:
    """One component's part in its process's election (Flink's ``LeaderElection``).

    A handle: the grant itself is kept by the services (``HAServices._grants``).
    """

    def __init__(self, services: HAServices, name: str) -> None:
        self.services = services
        self.name = name
        self.path = f"{services.layout.root}/leader/{name}"
        self.component: Component | None = None

    async def start(self, component: Component) -> None:
        """Register the component; it is granted leadership whenever this process leads."""
        if self.component is not None:
            raise ConfigurationError(f"component {self.name!r} is already started")
        for hook in ("grant_leadership", "revoke_leadership"):
            if not callable(getattr(component, hook, None)):
                raise ConfigurationError(f"component {self.name!r} has no {hook}() method")
        self.component = component
        await self.services._registered(self)

    def has_leadership(self, session_id: uuid.UUID) -> bool:
        """True while ``session_id`` is the current grant and the process still leads."""
        return self.services._has_leadership(self.name, session_id)

    async def confirm_leadership(self, session_id: uuid.UUID, address: str) -> None:
        """Publish ``address`` as this component's leader, if ``session_id`` is still current.

        A stale session id (an older grant, or leadership already lost) is ignored. Returns
        once the address is written, or once the write failed for lack of contact: then it is
        written as soon as it can be, for as long as the grant lasts.
        """
        if not self.has_leadership(session_id):
            log.info("%s: ignoring a confirm with stale session id %s", self.name, session_id)
            return
        await self.services._confirmed(self, LeaderInfo(address, session_id))

    async def close(self) -> None:
        """Leave the election: revoke the grant, remove the published address if ours."""
        if self.component is None:
            return
        await self.services._unregistered(self)
        self.component = None
