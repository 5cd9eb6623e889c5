"""The lease an active holds: its epoch (the fencing token) and the means to fence writes.

``lease.transaction(driver, ops)`` is the fenced write: the fence ops first, then the caller's,
as one backend transaction; the lease knows where its fence ops stand in it, so it says which
part failed (``Fenced`` for the fence, ``TransactionFailed`` indexed from the caller's ops).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..drivers.base import Check, Driver, Op, Stat
from ..errors import Fenced, TransactionFailed

__all__ = ("Lease",)


def _never_valid() -> bool:
    return False


def _ignore() -> None:
    return None


def _no_deadline() -> float:
    return math.inf


@dataclass(frozen=True, slots=True)
class Lease:
    """Given to ``become_active``. Valid while this process leads with this epoch.

    ``epoch`` (the creation order of this leader's queue node) strictly increases from one
    active to the next. Writes that must not land once this leader is deposed go through
    ``transaction(driver, ops)``, which puts ``fence_ops()`` in front of them: the backend
    applies them only while this leader's queue node lives (no other node is ever created
    under its path, so it cannot come back).
    """

    election: str
    identity: bytes
    epoch: int
    session_id: int
    node: str  # the path of this leader's queue node
    _is_valid: Callable[[], bool] = field(default=_never_valid, repr=False, compare=False)
    _on_fenced: Callable[[], None] = field(default=_ignore, repr=False, compare=False)
    _deadline: Callable[[], float] = field(default=_no_deadline, repr=False, compare=False)

    @property
    def valid(self) -> bool:
        """True while this process may act as the leader, judged at the moment of asking.

        False once leadership is lost (the leadership scope is being cancelled) and also as
        soon as ``stop_deadline()`` has passed, even if the watchdog task has not run yet: after
        a pause (SIGSTOP, a GC, a blocking call) the contender's own timer may wake first.
        Safe to call from any thread.
        """
        return time.monotonic() < self._deadline() and self._is_valid()

    def stop_deadline(self) -> float:
        """``time.monotonic()`` after which this leader must not act: the last contact with the
        backend plus the elector's deadline (a fraction of the session timeout). It moves later
        with every contact; a worker about to act should leave itself a margin before it.
        ``-inf`` once the driver's session is not this lease's, or the driver has said it
        ended (a newer session's contact says nothing of it)."""
        return self._deadline()

    def fence_ops(self) -> list[Op]:
        """Operations to put first in a transaction so it applies only under this epoch.

        A bare ``driver.transaction([*lease.fence_ops(), *ops])`` that fails at the fence
        raises ``TransactionFailed`` with an index below ``len(fence_ops())``;
        ``transaction()`` says ``Fenced`` instead."""
        return [Check(self.node)]

    async def transaction(self, driver: Driver, ops: Sequence[Op]) -> list[str | Stat | None]:
        """Apply ``ops`` atomically, only while this epoch is the newest; return their results.

        Raises ``Fenced`` when a fence op failed (a newer leader has taken over; nothing was
        applied), after ``report_fenced()``; ``TransactionFailed`` when one of ``ops`` failed,
        its ``index`` counted from ``ops[0]``. Other errors (``ConnectionLost``...) pass.
        An empty ``ops`` only checks the fence.
        """
        fence = self.fence_ops()
        try:
            results = await driver.transaction([*fence, *ops])
        except TransactionFailed as exc:
            if exc.index < len(fence):
                self.report_fenced()
                raise Fenced(
                    f"epoch {self.epoch} of {self.election!r} is no longer the newest "
                    f"({self.node}: {exc.cause})"
                ) from exc
            raise TransactionFailed(exc.index - len(fence), exc.cause) from exc
        return results[len(fence) :]

    def report_fenced(self) -> None:
        """Tell the elector that a fenced write was refused: it moves to FENCED."""
        self._on_fenced()
