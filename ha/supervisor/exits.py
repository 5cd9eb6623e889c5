"""What ``ha run`` does when COMMAND exits by itself while active: ``--on-exit``.

Pure, like ``ha/membership/rules.py``: no I/O and no clock; the supervisor hands in how long COMMAND
ran and does what the answer says.

- ``restart`` (the default): run COMMAND again, still active, after a delay that doubles
  from ``RESTART_BACKOFF[0]`` (0.5 s, 1 s, 2 s ... up to ``RESTART_BACKOFF[1]``), at most
  ``--max-restarts`` times in a row (3 by default); a run longer than ``LONG_RUN`` starts the
  count again. Past the limit it is a crash loop that restarting here does not mend: the
  supervisor cedes the lead to another host and stays out for a cooling period
  (``ha/membership/rules.py``: 1 s doubling to 30 s), then rejoins the queue. This is what systemd's
  ``Restart=always`` with ``StartLimitBurst`` and supervisord's ``autorestart`` do, with the
  failover an HA pair adds: the lease is kept (no failover, no fence) when a restart is
  enough, and handed on when it is not. Only a COMMAND that came up is restarted: if the
  term's first run ends within ``STARTED`` seconds (supervisord's ``startsecs``), it never
  started here (a bad configuration, a missing disk), so the lead is ceded at once and a
  standby gets its chance; ``ha failover --confirm`` (2 s) then sees the failure too.
- ``quit``: COMMAND was a job that finished (whatever its status): leave the election without
  fencing, so a standby takes over at once if there is one, and exit 0; the status is logged.
- ``fail``: leave the election in the same way, and exit non-zero: COMMAND's own status (128+N
  for a signal N, 1 when it exited 0), as a unit that failed, for systemd or a script to see.

Why ``restart`` by default: a COMMAND under ``ha run`` is a service meant to run while this
host leads. Quitting after one crash would leave the election one host short (with one host,
no service at all), while restarting in place is the quickest mend and the limit still moves
the service to another host when it does not help. ``ha run`` before ``--on-exit`` left the
election after every exit, even exit 0, and rejoined for ever: that is ``restart`` with
``--max-restarts 0``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..errors import ConfigurationError
from ..membership.rules import LONG_RUN  # the rules restart their cooldown after one too

__all__ = (
    "LONG_RUN",
    "RESTART_BACKOFF",
    "STARTED",
    "OnExit",
    "Restarts",
    "check_max_restarts",
    "status",
)

RESTART_BACKOFF = (0.5, 10.0)  # seconds: the first delay before a restart, and the cap
STARTED = 2.0  # seconds the first run of a term must last to be restarted (``ha failover``'s
# default --confirm: a target whose COMMAND ends sooner has not taken over)


class OnExit(enum.StrEnum):
    """``--on-exit``: what to do when COMMAND exits by itself while active."""

    RESTART = "restart"
    QUIT = "quit"
    FAIL = "fail"


def check_max_restarts(value: int) -> int:
    if value < 0:
        raise ConfigurationError(f"--max-restarts must be >= 0, got {value}")
    return value


def status(code: int) -> int:
    """``ha run``'s exit status after ``--on-exit fail``: never 0."""
    if code < 0:
        return 128 - code  # killed by signal -code, as a shell says it
    return min(code, 255) or 1


@dataclass(slots=True)
class Restarts:
    """The restarts of one term (a new term, after a failover, starts from none)."""

    limit: int
    started: float = STARTED  # the first run must last this long to be restarted
    done: int = 0  # restarts in a row, each after a run shorter than LONG_RUN
    runs: int = 0

    def after_exit(self, ran: float) -> float | None:
        """COMMAND ended after ``ran`` seconds: the delay before running it again, or None
        to cede the lead (the limit is reached, or the term's first run never came up)."""
        self.runs += 1
        if ran > LONG_RUN:
            self.done = 0
        if self.done >= self.limit or (self.runs == 1 and ran < self.started):
            return None
        first, cap = RESTART_BACKOFF
        delay = min(cap, first * 2.0**self.done)
        self.done += 1
        return delay
