"""ha: high availability for Python services, on anyio.

async with ha.connect("memory://cluster-a") as driver:
    elector = ha.Elector(driver, "/dispatcher", identity=b"host-a:7077")
    await elector.run(Dispatcher())

``ha.services`` is the module of the HA services; ``ha.open_services(url, cluster_id)`` builds
them (it was ``ha.services(url, cluster_id)``, which still works with a DeprecationWarning).

The public names are loaded on first use (PEP 562): ``import ha`` costs next to nothing, and a
process that only elects never loads the services, their stores or the memory backend.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import errors, services
    from .drivers import connect
    from .election.contender import Contender
    from .election.elector import Elector
    from .election.journal import JournalWriter, Transition
    from .election.lease import Lease
    from .election.machine import State
    from .election.timing import Backoff, Timing
    from .services import LeaderInfo
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

# public name -> (module, its attribute; None: the module itself)
_WHERE: dict[str, tuple[str, str | None]] = {
    "Backoff": ("ha.election.timing", "Backoff"),
    "Contender": ("ha.election.contender", "Contender"),
    "Elector": ("ha.election.elector", "Elector"),
    "JournalWriter": ("ha.election.journal", "JournalWriter"),
    "LeaderInfo": ("ha.services", "LeaderInfo"),
    "Lease": ("ha.election.lease", "Lease"),
    "State": ("ha.election.machine", "State"),
    "Timing": ("ha.election.timing", "Timing"),
    "Transition": ("ha.election.journal", "Transition"),
    "connect": ("ha.drivers", "connect"),
    "errors": ("ha.errors", None),
    "open_services": ("ha.services", "services"),
    "services": ("ha.services", None),
}

if not TYPE_CHECKING:  # mypy reads the imports above; a typo like ``ha.Electer`` stays an error

    def __getattr__(name: str) -> Any:
        try:
            module_name, attribute = _WHERE[name]
        except KeyError:
            raise AttributeError(f"module 'ha' has no attribute {name!r}") from None
        value = importlib.import_module(module_name)
        if attribute is not None:
            value = getattr(value, attribute)
        globals()[name] = value  # the next lookup is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__all__))
