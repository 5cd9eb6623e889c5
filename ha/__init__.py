"""ha: high availability for Python services, on anyio.

async with ha.connect("memory://cluster-a") as driver:
    elector = ha.Elector(driver, "/dispatcher", identity=b"host-a:7077")
    await elector.run(Dispatcher())

``ha.services`` is the module of the HA services; ``ha.open_services(url, cluster_id)`` builds
them (it was ``ha.services(url, cluster_id)``, which still works with a DeprecationWarning).
"""

from __future__ import annotations

import types
import warnings
from typing import Any

from . import errors, services
from .drivers import connect
from .election.contender import Contender
from .election.elector import Elector
from .election.journal import JournalWriter, Transition
from .election.lease import Lease
from .election.machine import State
from .election.timing import Backoff, Timing
from .services import HAServices, LeaderInfo
from .services import services as open_services

__all__ = (
    "Backoff",
    "Contender",
    "Elector",
    "JournalWriter",
    "LeaderInfo",
    "Lease",
    "State",
    "Timing",
    "Transition",
    "connect",
    "errors",
    "open_services",
    "services",
)


class _CallableModule(types.ModuleType):
    """``ha.services`` was the function (shadowing its own module); a call still works."""

    def __call__(self, *args: Any, **kwargs: Any) -> HAServices:
        warnings.warn(
            "ha.services(...) is deprecated: call ha.open_services(...)",
            DeprecationWarning,
            stacklevel=2,
        )
        return open_services(*args, **kwargs)


services.__class__ = _CallableModule
