"""What users supply: a contender, any object with ``become_active`` and optional hooks."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..errors import ConfigurationError
from .lease import Lease

__all__ = ("Contender", "HOOKS", "check_contender")

HOOKS = ("become_standby", "enter_neutral", "fence_old_active", "on_fatal_error")


@runtime_checkable
class Contender(Protocol):
    """The service to keep highly available.

    ``become_active(lease)`` is the leader's work. It runs in a cancel scope that is cancelled,
    and awaited, when leadership is lost; if it returns, leadership is kept until lost or quit;
    if it raises, that is a failure to become active (release, back off, rejoin).

    Optional hooks, each bounded by the elector's hook timeout:
    ``become_standby()``, ``enter_neutral()``, ``fence_old_active(breadcrumb: bytes)`` (raise
    to refuse the takeover; the bytes are handed over as stored, even when corrupt), and
    ``on_fatal_error(error: Exception)``.
    """

    async def become_active(self, lease: Lease) -> None: ...


def check_contender(contender: object) -> None:
    """Raise ConfigurationError unless ``contender`` has an async ``become_active``."""
    method = getattr(contender, "become_active", None)
    if not callable(method):
        raise ConfigurationError(
            f"contender {type(contender).__name__} has no become_active(lease) method"
        )
    for name in HOOKS:
        hook = getattr(contender, name, None)
        if hook is not None and not callable(hook):
            raise ConfigurationError(f"contender attribute {name} is not callable")
