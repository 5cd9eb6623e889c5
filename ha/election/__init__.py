"""The election: the pure machine, its runner (the elector), and what a contender is handed.

ARCHITECTURE's "machine" and "runner" layers. `machine` decides on the facts and commands of
`events`, `elector` does the I/O the machine asks for through `nodes` (every path and encoding
of an election), `timing` bounds it, `lease` is what a contender holds while active, `journal`
records transitions.
"""

from __future__ import annotations

from .contender import Contender
from .elector import Elector, ElectorStatistics
from .journal import JournalWriter, Transition
from .lease import Lease
from .machine import State
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
