"""The election: the pure machine, its runner (the elector), and what a contender is handed.

ARCHITECTURE's "machine" and "runner" layers. `machine` decides, `elector` does the I/O the
machine asks for, `lease` is what a contender holds while active, `journal` records transitions.
"""

from __future__ import annotations

from .contender import Contender
from .elector import Backoff, Elector, Timing
from .journal import JournalWriter, Transition
from .lease import Lease
from .machine import State

__all__ = (
    "Backoff",
    "Contender",
    "Elector",
    "JournalWriter",
    "Lease",
    "State",
    "Timing",
    "Transition",
)
