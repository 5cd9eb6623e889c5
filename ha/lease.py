"""The lease an active holds: its epoch (the fencing token) and the means to fence writes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .drivers.base import Check, Op

__all__ = ("Lease",)


def _never_valid() -> bool:
    return False


def _ignore() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Lease:
    """Given to ``become_active``. Valid while this process leads with this epoch.

    ``epoch`` strictly increases from one active to the next. Writes that must not land once
    this leader is deposed put ``fence_ops()`` in front of their transaction: the backend
    applies them only while the epoch node still has the version this leader wrote.
    """

    election: str
    identity: bytes
    epoch: int
    session_id: int
    epoch_path: str
    epoch_version: int
    _is_valid: Callable[[], bool] = field(default=_never_valid, repr=False, compare=False)
    _on_fenced: Callable[[], None] = field(default=_ignore, repr=False, compare=False)

    @property
    def valid(self) -> bool:
        """True until leadership is lost (then the leadership scope is being cancelled)."""
        return self._is_valid()

    def fence_ops(self) -> list[Op]:
        """Operations to put first in a transaction so it applies only under this epoch."""
        return [Check(self.epoch_path, self.epoch_version)]

    def report_fenced(self) -> None:
        """Tell the elector that a fenced write was refused: it moves to FENCED."""
        self._on_fenced()
