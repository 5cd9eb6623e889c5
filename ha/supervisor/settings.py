"""What ``ha run`` was asked to do (``Settings``), and the elector timing that fits it.

``timing_for`` shortens the elector's local deadline so that COMMAND is stopped, grace period
included, before the backend's session can expire and another host take over; it also holds
COMMAND through a short disconnection when asked (``--hold-on-disconnect``), within that rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..drivers.base import validate_path
from ..election.names import check_priority
from ..election.timing import Timing, renewal_slack
from ..errors import ConfigurationError
from .exits import STARTED, OnExit, check_max_restarts

__all__ = ("Settings", "timing_for")


@dataclass(frozen=True, slots=True)
class Settings:
    """What ``ha run`` was asked to do."""

    path: str
    identity: str
    command: tuple[str, ...]
    grace: float = 0.5
    fence: tuple[str, ...] = ()
    fence_timeout: float = 30.0
    fence_retry_max: float = 30.0  # the longest wait before trying a refused fence again
    health: tuple[str, ...] = ()
    health_interval: float = 2.0
    health_timeout: float = 5.0
    health_failures: int = (
        3  # failed checks in a row that take the member out (membership/rules.py)
    )
    journal: str | None = None
    priority: int = 0  # a preferred leader's rank (0: none), ha/election/names.py
    settle: float = 10.0  # seconds in the queue before a preferred standby gets the lead back
    extra_env: Mapping[str, str] = field(default_factory=dict)
    http: tuple[str, int] | None = None  # --http: serve /, /healthz /readyz /leader /metrics
    on_exit: OnExit = OnExit.RESTART  # COMMAND exited while active (exits.py)
    max_restarts: int = 3  # restarts in a row, with on_exit restart, before ceding
    started: float = STARTED  # a term's first run ending sooner is not restarted (exits.py)
    hold_on_disconnect: float = 0.0  # seconds COMMAND runs on without contact (timing_for)

    def __post_init__(self) -> None:
        validate_path(self.path)
        if self.path == "/":
            raise ConfigurationError("the election path must not be the root '/'")
        if not self.identity:
            raise ConfigurationError("the supervisor needs a non-empty --id")
        if not self.command:
            raise ConfigurationError("no COMMAND to run (put it after --)")
        if not (math.isfinite(self.grace) and self.grace >= 0):
            raise ConfigurationError(f"--grace must be >= 0 seconds, got {self.grace}")
        check_priority(self.priority)
        if self.on_exit not in tuple(OnExit):
            choices = ", ".join(OnExit)
            raise ConfigurationError(f"--on-exit must be one of {choices}, got {self.on_exit!r}")
        check_max_restarts(self.max_restarts)
        failures = self.health_failures
        if isinstance(failures, bool) or not isinstance(failures, int) or failures < 1:
            raise ConfigurationError(
                f"--health-failures must be a whole number >= 1 (failed checks in a row that"
                f" take this host out), got {failures!r}"
            )
        if not (math.isfinite(self.settle) and self.settle >= 0):
            raise ConfigurationError(f"--settle must be >= 0 seconds, got {self.settle}")
        for name in ("hold_on_disconnect", "started"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigurationError(f"{name.replace('_', '-')} must be >= 0, got {value}")
        for name in ("fence_timeout", "fence_retry_max", "health_interval", "health_timeout"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigurationError(f"{name.replace('_', '-')} must be > 0, got {value}")


def timing_for(
    session_timeout: float, grace: float, hold: float = 0.0, renewal: float | None = None
) -> Timing:
    """Elector timing that leaves room to stop COMMAND before the session can expire.

    The elector stops the active work at ``deadline_ratio * session_timeout`` after the last
    contact; stopping takes up to ``grace`` (then SIGKILL), plus a margin for the loop. That
    deadline must also come after the driver's next renewal (``renewal``, the driver's
    ``renewal_interval``; default a third of the session timeout), or COMMAND is stopped and
    started again at every renewal with no fault at all: ``--grace`` is bounded by both.

    ``hold`` (``--hold-on-disconnect``), when not 0: a lost connection does not stop COMMAND at
    once; it runs on until ``hold`` seconds after the last contact, and goes on as before if
    contact comes back by then in the same session (a ZooKeeper blip). The rule that keeps it
    safe: the hold ends, COMMAND stopped, before the backend may expire the session and let
    another host lead, so ``hold`` may not be longer than the deadline above. Nor shorter
    than half the session timeout: it is counted from the last contact even while connected,
    and a backend may renew that rarely (sqlite every third of the session timeout).
    """
    # Not counted: a guard stuck past the grace (a descendant in uninterruptible sleep) is
    # killed GUARD_MARGIN later, COMMAND with it (PDEATHSIG) but not daemons that left its
    # group; counting 2 s here would forbid the short sessions tests and demos use.
    margin = max(0.1 * session_timeout, 0.05)
    ratio = min(2 / 3, (session_timeout - grace - margin) / session_timeout)
    renews = session_timeout / 3 if renewal is None else renewal
    shortest = renews + renewal_slack(session_timeout)
    if ratio * session_timeout < shortest:
        most = max(0.0, session_timeout - margin - shortest)
        raise ConfigurationError(
            f"--grace {grace:g}s leaves no time to stop COMMAND before the backend's session"
            f" timeout ({session_timeout:g}s) lets another host take over, once the backend"
            f" has been given time to renew the session (every {renews:.3g}s): lower --grace"
            f" to {math.floor(most * 100) / 100:g}s or less, or raise session_timeout in the"
            f" backend URL (e.g. ?session_timeout={math.ceil(2 * grace + 1)})"
        )
    if not hold:
        return Timing(deadline_ratio=ratio)
    longest, shortest = ratio * session_timeout, max(session_timeout / 2, shortest)
    if not shortest <= hold <= longest:
        if hold > longest:
            why = "COMMAND must be stopped, --grace included, before the session can expire"
            fix = "raise session_timeout in the backend URL to hold longer"
        else:
            why = "it counts from the last contact, which may be that old while connected"
            fix = "lower session_timeout in the backend URL to hold for less"
        raise ConfigurationError(
            f"--hold-on-disconnect {hold:g}s: with a session timeout of {session_timeout:g}s"
            f" and --grace {grace:g}s it must be 0 (stop at once) or from {shortest:.3g}s to"
            f" {math.floor(longest * 100) / 100:g}s ({why}): {fix}"
        )
    return Timing(deadline_ratio=hold / session_timeout, hold_on_disconnect=True)
