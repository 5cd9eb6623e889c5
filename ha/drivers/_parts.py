"""A driver made of parts: the base of the drivers whose session a part keeps.

``Driver``'s four session properties read the state of the part that keeps the session
(``SessionState``: the etcd and Kubernetes drivers' ``Renewal``, the sqlite and ZooKeeper
drivers' session), which each driver hands over from ``_session_state``; the parts send
their events out through ``_pass_on``.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Protocol

from .base import Driver, DriverEvent

__all__ = ("PartsDriver", "SessionState")


class SessionState(Protocol):
    """What a driver's properties read of its session (see ``Driver``)."""

    @property
    def id(self) -> int | None: ...

    @property
    def timeout(self) -> float: ...

    @property
    def last_contact(self) -> float: ...

    @property
    def connected(self) -> bool: ...


class PartsDriver(Driver):
    """A ``Driver`` whose session state a part keeps."""

    @abstractmethod
    def _session_state(self) -> SessionState:
        """The part that keeps the session."""

    def _pass_on(self, event: DriverEvent) -> None:
        """The parts' way out for their events: ``_emit`` looked up at each event, so that a
        wrapper set on the instance (``ha.metrics.backend.tap_node_events``) sees them all."""
        self._emit(event)

    @property
    def session_id(self) -> int | None:
        return self._session_state().id

    @property
    def session_timeout(self) -> float:
        return self._session_state().timeout

    @property
    def last_contact(self) -> float:
        return self._session_state().last_contact

    @property
    def connected(self) -> bool:
        return self._session_state().connected
