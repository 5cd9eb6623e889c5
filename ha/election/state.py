"""The public state: what a contender has been told (ARCHITECTURE.md's table).

Its own module, below ``events.py`` (a ``Report`` carries it) and ``phases.py`` (each phase
shows as one), so that neither has to import the other's importer.
"""

from __future__ import annotations

import enum

__all__ = ("State",)


class State(enum.Enum):
    """What the contender has been told (ARCHITECTURE.md's table)."""

    NEUTRAL = "neutral"
    STANDBY = "standby"
    ACTIVE = "active"
    FENCED = "fenced"
