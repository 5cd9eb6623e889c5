"""The election: the pure machine, its runner (the elector), and what a contender is handed.

ARCHITECTURE's "machine" and "runner" layers. `machine` decides on the facts and commands of
`events`, `elector` does the I/O the machine asks for through `nodes` (every path and encoding
of an election), `timing` bounds it, `leadership` runs the active work under its watchdog,
`lease` is what a contender holds while active, `reporting` sends each transition on, `journal`
records transitions.
"""

from __future__ import annotations

from .contender import Contender
from .elector import Elector
from .journal import JournalWriter, Transition
from .lease import Lease
from .machine import State
from .reporting import ElectorStatistics
from .timing import Backoff, Timing

__all__ = (
    "Backoff",
    "Contender",
    "Elector",
    "ElectorStatistics",
    "JournalWriter",
    "Lease",
    "State",
    "Timing",
    "Transition",
)
