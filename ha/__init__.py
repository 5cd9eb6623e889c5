"""ha: high availability for Python services, on anyio.

async with ha.connect("memory://cluster-a") as driver:
    elector = ha.Elector(driver, "/dispatcher", identity=b"host-a:7077")
    await elector.run(Dispatcher())
"""

from __future__ import annotations

from . import errors
from .drivers import connect
from .election.contender import Contender
from .election.elector import Elector
from .election.journal import JournalWriter, Transition
from .election.lease import Lease
from .election.machine import State
from .election.timing import Backoff, Timing
from .services import LeaderInfo, services

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
    "services",
)
