"""What a component sees of its process's leader election: the ``Component`` protocol it
implements and the ``LeaderElection`` handle it gets (Flink's ``LeaderContender`` and
``LeaderElection``).

The handle holds no state of the grant: ``HAServices`` keeps each component's grant in one
record and publishes what the component confirms; the handle asks it.

Errors (Flink's ``LeaderContender.handleError``): what goes wrong on a component's behalf in
the services' own tasks, where nobody could catch it (its address not published, not
corrected or not removed, its ``grant_leadership`` or ``revoke_leadership`` failing), reaches
that component's ``on_error(error)`` as a ``ComponentError``, besides the log; the other
components are not told.
"""

from __future__ import annotations

import inspect
import logging
import uuid
from typing import TYPE_CHECKING, Protocol

from ..errors import ConfigurationError, DriverError, HAError
from .retrieval import LeaderInfo

if TYPE_CHECKING:
    from . import HAServices

__all__ = ("Component", "ComponentError", "LeaderElection")

log = logging.getLogger("ha.services")


class Component(Protocol):
    """What a component supplies to take part in its process's leader election.

    ``grant_leadership`` runs in a task of the leadership scope: it may start the component's
    work and return, or do the work itself until cancelled. ``revoke_leadership`` is called
    when the grant ends (leadership lost, component closed); it should return promptly (it is
    bounded by the elector's hook timeout) and must not rely on the backend. An exception from
    ``grant_leadership`` is logged and ends nothing but that task: the grant stands, and no
    address is published for it unless it was confirmed.

    Optional: ``on_error(error: ComponentError) -> None``, a plain (not async) method that
    must not block, called with each error of the services concerning this component (see
    the module docstring). Without it, those errors are only logged.
    """

    async def grant_leadership(self, session_id: uuid.UUID) -> None: ...

    async def revoke_leadership(self) -> None: ...


class ComponentError(HAError):
    """An error of the HA services on one component's behalf, as its ``on_error`` gets it.

    ``component``: its name; ``action``: what failed ("publish the address", "correct the
    published address", "remove the published address", "grant_leadership",
    "revoke_leadership"); ``cause``: the error itself (also ``__cause__``); ``transient``:
    the cause is passing (contact lost), not lasting (a foreign node, access denied). The
    services retry a publication or correction either way, for as long as the grant lasts.
    """

    def __init__(self, component: str, action: str, cause: BaseException) -> None:
        super().__init__(f"{component}: {action} failed: {cause or type(cause).__name__}")
        self.component = component
        self.action = action
        self.cause = cause
        self.__cause__ = cause
        self.transient = isinstance(cause, DriverError) and cause.transient


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
        on_error = getattr(component, "on_error", None)
        if on_error is not None and (
            not callable(on_error) or inspect.iscoroutinefunction(on_error)
        ):
            raise ConfigurationError(
                f"component {self.name!r}: on_error must be a plain function (not async): it"
                " is called from the services' tasks and must not block"
            )
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

    def report_error(self, action: str, cause: BaseException) -> ComponentError:
        """Tell the component (its ``on_error``, if it has one) that ``action`` failed on its
        behalf; the services call it, and log the error too. Returns the error told."""
        error = ComponentError(self.name, action, cause)
        on_error = getattr(self.component, "on_error", None)
        if on_error is not None:
            try:
                on_error(error)
            except Exception:
                log.exception("%s: on_error raised", self.name)
        return error
