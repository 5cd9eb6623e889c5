"""What ``ha run`` was asked to do (``Settings``), and the elector timing that fits it.

``timing_for`` shortens the elector's local deadline so that COMMAND is stopped, grace period
included, before the backend's session can expire and another host take over.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..drivers.base import validate_path
from ..election.preference import check_priority
from ..election.timing import Timing
from ..errors import ConfigurationError

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
    health: tuple[str, ...] = ()
    health_interval: float = 2.0
    health_timeout: float = 5.0
    journal: str | None = None
    priority: int = 0  # a preferred leader's rank (0: none), ha/election/preference.py
    settle: float = 10.0  # seconds in the queue before a preferred standby gets the lead back
    extra_env: Mapping[str, str] = field(default_factory=dict)
    http: tuple[str, int] | None = None  # --http: serve /healthz /readyz /leader /metrics

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
        if not (math.isfinite(self.settle) and self.settle >= 0):
            raise ConfigurationError(f"--settle must be >= 0 seconds, got {self.settle}")
        for name in ("fence_timeout", "health_interval", "health_timeout"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigurationError(f"{name.replace('_', '-')} must be > 0, got {value}")


def timing_for(session_timeout: float, grace: float) -> Timing:
    """Elector timing that leaves room to stop COMMAND before the session can expire.

    The elector stops the active work at ``deadline_ratio * session_timeout`` after the last
    contact; stopping takes up to ``grace`` (then SIGKILL), plus a margin for the loop.
    """
    # Not counted: a guard stuck past the grace (a descendant in uninterruptible sleep) is
    # killed GUARD_MARGIN later, COMMAND with it (PDEATHSIG) but not daemons that left its
    # group; counting 2 s here would forbid the short sessions tests and demos use.
    margin = max(0.1 * session_timeout, 0.05)
    ratio = min(2 / 3, (session_timeout - grace - margin) / session_timeout)
    if ratio < 0.1:
        raise ConfigurationError(
            f"--grace {grace:g}s leaves no time to stop COMMAND before the backend's session"
            f" timeout ({session_timeout:g}s) lets another host take over: lower --grace or"
            f" raise session_timeout in the backend URL (e.g. ?session_timeout="
            f"{math.ceil((grace + margin) * 1.5 + 1)})"
        )
    return Timing(deadline_ratio=ratio)
