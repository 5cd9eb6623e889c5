"""Whether ``ha run`` may take part in the election now: health, cooldown, step-aside.

Pure and clock-injected, like ``ha/election/machine.py``: no I/O, no event loop, no clock of its
own. The supervisor reads the facts (a health check's result, COMMAND's exit, the failover
request with the epoch and the lock's holder, a lock just won) and hands each to a method
with ``now`` (anyio's clock). The method updates the rules' state and returns a ``Decision``:
leave the election, wake the loop that waits to take part, lines to log. ``verdict(now)``
says whether to take part and, if not, why (a ``Standing``), the note for the member node
and when to look again. The supervisor then does that I/O (httpcore's connection pool
decides in a plain method and returns the I/O to do in the same way).

The rules:

- Health (Hadoop's HealthMonitor): out until the first check passes (when there is a check),
  out while it fails; a failing check leaves the election at once.
- Cooldown: COMMAND ending by itself while active leaves the election for a delay that
  doubles on each quick exit (1s up to 30s, back to 1s after a run of over a minute), so a
  crash loop does not keep the lock; ceding for a failover leaves it for the request's
  cooling period.
- Failover requests, as ``ha/admin/failover.py`` says: the active of the request's epoch cedes; with a
  target, every other member steps aside until the target holds the lock past that epoch or
  the cooling period passed on our clock; a member that wins the lock while a request names
  someone else gives way before starting COMMAND. A request is acted on once; one whose
  epoch is over is history.

Time passing is an input too: each call first drops a step-aside whose period is over.
"""

from __future__ import annotations

import enum
import logging
import math
from dataclasses import dataclass
from typing import Literal

from .. import admin

__all__ = ("RESTART_DELAY", "UNKNOWN", "Decision", "Eligibility", "Standing", "Unknown", "Verdict")

RESTART_DELAY = (1.0, 30.0)  # after COMMAND exits on its own: first delay, cap
LONG_RUN = 60.0  # seconds: a run this long was no crash loop, the delay starts again


class Standing(enum.Enum):
    """Where the supervisor stands: eligible, or out and why."""

    ELIGIBLE = "eligible"
    WAITING_FOR_HEALTH = "waiting for the first health check"
    UNHEALTHY = "unhealthy"
    COOLING_DOWN = "cooling down"
    STEPPING_ASIDE = "stepping aside"


class Unknown(enum.Enum):
    UNKNOWN = "unknown"


UNKNOWN = Unknown.UNKNOWN  # the lock's holder was not read


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether to take part now; if not, why, and when the clock alone may change that."""

    standing: Standing
    note: str = ""  # for the member node: "unhealthy", "ceded the lead: rejoining in 3.0s"
    cause: str = ""  # the part of the note that stays the same while the reason does
    wake_at: float = math.inf  # the end of the next cooldown or step-aside (anyio time)

    @property
    def eligible(self) -> bool:
        return self.standing is Standing.ELIGIBLE


@dataclass(frozen=True, slots=True)
class Decision:
    """What the supervisor does after a fact: the I/O that the rules cannot do themselves."""

    quit: bool = False  # leave the election now (stopping COMMAND first when active)
    wake: bool = False  # the loop waiting to take part looks at the verdict again
    say: tuple[tuple[int, str], ...] = ()  # (logging level, line) to log, in order

    def then(self, other: Decision) -> Decision:
        return Decision(self.quit or other.quit, self.wake or other.wake, self.say + other.say)


@dataclass(frozen=True, slots=True)
class _Aside:
    """Stepping aside for a failover to another target, until the epoch passes ``epoch``."""

    request_id: str
    epoch: int
    until: float  # anyio time
    to: bytes


def _info(line: str) -> tuple[int, str]:
    return (logging.INFO, line)


class Eligibility:
    """The rules' state for one supervisor of identity ``identity``.

    ``health_check``: whether a health command runs (if not, the member is always healthy).
    """

    def __init__(self, identity: bytes, *, health_check: bool) -> None:
        self.identity = identity
        self.healthy: bool | None = None if health_check else True  # None: not checked yet
        self.cool_until = 0.0  # anyio time: cooling down until then
        self.cool_note = ""
        self.handled: set[str] = set()  # failover requests already acted upon
        self.restart_delay = RESTART_DELAY[0]
        self._aside: _Aside | None = None

    @property
    def stepping_aside(self) -> bool:
        """Whether a step-aside waits for its target (the supervisor then reads the lock)."""
        return self._aside is not None

    def verdict(self, now: float) -> Verdict:
        """Take part now, or stay out (and why, until when)."""
        self._expire(now)
        aside = self._aside
        ends = [t for t in (self.cool_until, aside.until if aside else math.inf) if t > now]
        wake_at = min(ends, default=math.inf)
        if self.healthy is None:
            note = Standing.WAITING_FOR_HEALTH.value
            return Verdict(Standing.WAITING_FOR_HEALTH, note, "", wake_at)
        if not self.healthy:
            return Verdict(Standing.UNHEALTHY, Standing.UNHEALTHY.value, "", wake_at)
        if now < self.cool_until:
            note = f"{self.cool_note}: rejoining in {self.cool_until - now:.1f}s"
            return Verdict(Standing.COOLING_DOWN, note, self.cool_note, wake_at)
        if aside is not None:
            target = repr(admin.text(aside.to))
            note = f"stepping aside for a failover to {target}"
            return Verdict(Standing.STEPPING_ASIDE, note, target, wake_at)
        return Verdict(Standing.ELIGIBLE)

    # --- the facts ----------------------------------------------------------------------------

    def health_checked(self, now: float, healthy: bool, why: str) -> Decision:
        """The health command answered (``why``: how it ended)."""
        self._expire(now)
        if healthy == self.healthy:
            return Decision()
        self.healthy = healthy
        if healthy:
            return Decision(wake=True, say=(_info("health check passes: joining"),))
        line = f"health check failed ({why}): leaving the election"
        return Decision(quit=True, wake=True, say=((logging.WARNING, line),))

    def command_ended(self, now: float, note: str, ran: float) -> Decision:
        """COMMAND ended by itself (or could not start) while we led, after ``ran`` seconds:
        leave, back off, rejoin (a crash loop must not keep the lock, and another host may do
        better meanwhile). ``note`` tells ``ha failover`` why we could not stay active."""
        self._expire(now)
        if ran > LONG_RUN:
            self.restart_delay = RESTART_DELAY[0]
        delay = self.restart_delay
        self.restart_delay = min(RESTART_DELAY[1], delay * 2)
        say = (logging.WARNING, f"leaving the election for {delay:.0f}s")
        return Decision(say=(say,)).then(self._cool_down(now, delay, note))

    def lock_won(self, now: float, request: admin.FailoverRequest | None, epoch: int) -> Decision:
        """We won the lock at ``epoch``, ``request`` read just after: a ``quit`` decision
        means give way without starting COMMAND (admin/failover.py, step 4)."""
        self._expire(now)
        if (
            request is not None
            and request.id not in self.handled
            and request.epoch == epoch - 1
            and request.to is not None
            and request.to != self.identity
        ):
            # we won the race for the lock before hearing of the request
            self._aside = _Aside(request.id, epoch, now + request.cooldown, request.to)
            line = f"won while a failover to {admin.text(request.to)!r} is pending: ceding"
            return Decision(quit=True, say=(_info(line),))
        return Decision()

    def failover_read(
        self,
        now: float,
        request: admin.FailoverRequest | None,
        epoch: int | None,
        holder: bytes | None | Literal[Unknown.UNKNOWN] = UNKNOWN,
        leading: int | None = None,
    ) -> Decision:
        """The failover request, the epoch and the lock's holder as read; ``leading``: our
        lease's epoch while we are active."""
        self._expire(now)
        done = Decision()
        aside = self._aside
        # done when the target holds the lock past the request's epoch: a newer epoch alone
        # may be a non-target (even us) that won the race and gave way, leaving no lock; the
        # cooldown bounds the wait
        if (
            aside is not None
            and epoch is not None
            and epoch > aside.epoch
            and (holder is UNKNOWN or holder == aside.to)
        ):
            self.handled.add(aside.request_id)
            self._aside = None
            done = Decision(
                wake=True, say=(_info(f"the failover is done (epoch {epoch}): rejoining"),)
            )
        if request is None or request.id in self.handled:
            return done
        if self._aside is not None and self._aside.request_id == request.id:
            return done
        if epoch != request.epoch:
            self.handled.add(request.id)  # history: someone became active since
            return done
        if leading == request.epoch and request.active == self.identity:
            self.handled.add(request.id)
            target = "any standby" if request.to is None else repr(admin.text(request.to))
            line = f"graceful failover to {target} asked by {request.by or '?'}: ceding"
            cede = Decision(say=(_info(line),))
            return done.then(cede).then(self._cool_down(now, request.cooldown, "ceded the lead"))
        if request.to is not None and request.to != self.identity:
            self._aside = _Aside(request.id, request.epoch, now + request.cooldown, request.to)
            line = f"failover to {admin.text(request.to)!r} pending: stepping aside"
            return done.then(Decision(quit=True, wake=True, say=(_info(line),)))
        return done

    # --- helpers ------------------------------------------------------------------------------

    def _cool_down(self, now: float, seconds: float, note: str) -> Decision:
        self.cool_until = max(self.cool_until, now + seconds)
        self.cool_note = note
        return Decision(quit=True, wake=True)

    def _expire(self, now: float) -> None:
        # the cooling period of a step-aside passed on our clock: back in (admin/failover.py, step 3)
        if self._aside is not None and now >= self._aside.until:
            self.handled.add(self._aside.request_id)
            self._aside = None
