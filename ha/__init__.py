"""ha: high availability for Python services, on anyio.

async with ha.connect("memory://cluster-a") as driver:
    elector = ha.Elector(driver, "/dispatcher", identity=b"host-a:7077")
    await elector.run(Dispatcher())

``ha.services`` is the module of the HA services; ``ha.open_services(url, cluster_id)`` builds
them (it was ``ha.services(url, cluster_id)``, which still works with a DeprecationWarning).

The public names load on first use (``_lazy.py``): ``import ha`` costs next to nothing, and a
process that only elects never loads the services, their stores or the memory backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_names

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
else:
    __getattr__, __dir__ = lazy_names(
        __name__,
        {
            "Backoff": ".election.timing:Backoff",
            "Contender": ".election.contender:Contender",
            "Elector": ".election.elector:Elector",
            "JournalWriter": ".election.journal:JournalWriter",
            "LeaderInfo": ".services:LeaderInfo",
            "Lease": ".election.lease:Lease",
            "State": ".election.machine:State",
            "Timing": ".election.timing:Timing",
            "Transition": ".election.journal:Transition",
            "connect": ".drivers:connect",
            "errors": ".errors",
            "open_services": ".services:services",
            "services": ".services",
            # not public names, but 68ed52c's eager imports left them on the package
            "drivers": ".drivers",
            "election": ".election",
            "membership": ".membership",
            "stores": ".stores",
        },
    )

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
