"""The elector's timing: how long it waits, retries and holds on, checked at construction.

As client-go's ``LeaderElectionConfig``, inconsistent settings are refused when the object is
made, not found out in production. The timing assumption these rely on (the backend expires a
session no earlier than ``session_timeout`` after the last contact) is written once, in
``ha/drivers/base.py``; ``deadline_ratio`` is what keeps an active inside it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ..errors import ConfigurationError

__all__ = ("LASTING_TERM", "Backoff", "Timing", "check_deadline", "renewal_slack")

# seconds: work that ran this long before it failed was no crash loop (as ``ha run``'s LONG_RUN)
LASTING_TERM = 60.0


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before rejoining after the n-th consecutive failure: exponential, capped, jittered."""

    initial: float = 0.05
    maximum: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.5  # the delay is drawn from [d * (1 - jitter), d]

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.maximum:
            raise ConfigurationError("backoff needs 0 < initial <= maximum")
        if self.multiplier < 1 or not 0 <= self.jitter < 1:
            raise ConfigurationError("backoff needs multiplier >= 1 and 0 <= jitter < 1")

    @classmethod
    def for_fences(cls, maximum: float = 30.0) -> Backoff:
        """The wait after a refused fence: 0.5 s doubling to ``maximum`` (``Timing``)."""
        return cls(initial=min(0.5, maximum), maximum=maximum)

    def delay(self, attempt: int, rng: random.Random) -> float:
        steps = max(0, attempt - 1)
        if self.multiplier > 1:  # no further than the cap: refused fences count for ever,
            # and a float power overflows past about a thousand doublings
            steps = min(steps, math.ceil(math.log(self.maximum / self.initial, self.multiplier)))
        base = min(self.maximum, self.initial * self.multiplier**steps)
        return base * (1 - self.jitter * rng.random())


@dataclass(frozen=True, slots=True)
class Timing:
    """The elector's timing, checked at construction (as client-go's LeaderElectionConfig).

    ``deadline_ratio``: the leadership scope is stopped this fraction of the session timeout
    after the last contact (must leave the stop time before the backend can expire us).
    ``hook_timeout``: bound on ``become_standby``, ``enter_neutral``, ``on_fatal_error``.
    ``fence_timeout``: bound on ``fence_old_active``. ``op_timeout``: bound on one backend call
    (default: the session timeout); a join's wait for its turn (``admission.py``) is not counted.
    ``fence_backoff``: the wait after a refused fence, growing with the refusals in a row; they
    are never fatal (``machine.py``, P8). Its cap, 30 s, is for a STONITH device (a PDU, a
    BMC): asked at most every 15-30 s while it refuses, not hammered, and the service leads
    again within 30 s of the device working again. ``backoff``'s 2 s cap is for the backend.
    ``max_retries``: failures in a row past this are fatal (``machine.py``, P8); a term whose
    ``become_active`` ran ``lasting_term`` seconds before it raised starts the count again, so
    that work failing now and then leads again for ever, and a crash loop ends. ``math.inf``:
    never (each failure counts until a term ends otherwise).
    """

    deadline_ratio: float = 2 / 3
    hook_timeout: float = 5.0
    fence_timeout: float = 30.0
    op_timeout: float | None = None
    backoff: Backoff = Backoff()
    fence_backoff: Backoff = Backoff.for_fences()
    max_retries: int = 5
    lasting_term: float = LASTING_TERM
    hold_on_disconnect: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.deadline_ratio < 1:
            raise ConfigurationError(
                f"deadline_ratio must be in (0, 1) so the active stops before its session "
                f"can expire; got {self.deadline_ratio}"
            )
        if self.hook_timeout <= 0 or self.fence_timeout <= 0:
            raise ConfigurationError("hook_timeout and fence_timeout must be positive")
        if self.op_timeout is not None and self.op_timeout <= 0:
            raise ConfigurationError("op_timeout must be positive")
        if self.max_retries < 0:
            raise ConfigurationError("max_retries must be >= 0")
        if not self.lasting_term > 0:  # NaN too
            raise ConfigurationError(f"lasting_term must be positive; got {self.lasting_term}")


def renewal_slack(session_timeout: float) -> float:
    """How much later than the driver's renewal interval a renewal may land on a healthy,
    busy machine (a round trip, a late thread): the deadline must leave this much too."""
    return max(0.05 * session_timeout, 0.02)


def check_deadline(timing: Timing, session_timeout: float, renewal_interval: float) -> None:
    """Refuse a local deadline that comes before the driver's next renewal: the active would
    be stopped, and started again, at every renewal with no fault at all."""
    span = timing.deadline_ratio * session_timeout
    need = renewal_interval + renewal_slack(session_timeout)
    if span < need:
        raise ConfigurationError(
            f"deadline_ratio {timing.deadline_ratio:g} stops the active {span:.3g}s after the"
            f" last contact, before the driver renews it (every {renewal_interval:.3g}s):"
            f" it must be at least {need / session_timeout:.3f}"
        )
