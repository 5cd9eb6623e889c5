"""Whether a member may take part in the election now, and how it honours a failover request.

The rules of every member: ``ha run``'s supervisor (health, COMMAND's exits, failover
requests) and the services' membership (failover requests only). Pure and clock-injected, like
``ha/election/machine.py``: no I/O, no event loop, no clock of its own. The member reads the
facts (a health check's result, COMMAND's exit, the failover request with the queue as it
stands) and hands each to a method with ``now`` (anyio's clock). The method updates the rules'
state and returns a ``Decision``: leave the election, wake the loop that waits to take part,
lines to log. ``verdict(now)`` says whether to take part and, if not, why (a ``Standing``), the
note for the member node and when to look again. The member then does that I/O (httpcore's
connection pool decides in a plain method and returns the I/O to do in the same way). Leaving
is always the same I/O: quit the elector without fence; while the verdict says eligible, the
member joins again at once, with a new node at the back of the queue.

The rules:

- Health (Hadoop's HealthMonitor, with the thresholds of Kubernetes probes): out until the
  first check passes (when there is a check); a member in the election leaves once
  ``health_failures`` checks in a row have failed (one slow answer or one blip does not cost the
  lead), and the note says the count meanwhile ("health check failed 1 of 3"); out, one pass
  brings it back (a success threshold of 1). A member that never passed stays out on a failure.
- Cooldown: COMMAND ending by itself while active leaves the election for a delay that
  doubles on each quick exit (1s up to 30s, back to 1s after a run of over a minute), so a
  crash loop does not keep the lead. Ceding for a failover does not: the old active joins
  again at once, at the back of the queue, behind the one taking over (Patroni's switchover,
  whose old primary is a replica at once), so an HA pair is never left without a standby.
  Only an active alone in the queue (a forced failover: nobody to hand over to) stays out
  for the request's cooling period, which is what forcing it asks for.
- Failover requests (``ha/admin/failover.py``, ``requests.py``). The queue is FIFO, so "hand
  over to T" is
  "everyone ahead of T steps aside". A request is pending while the queue's leader has the
  request's epoch; once anyone else leads it is history. While it is pending:

  * a member ahead of the target (not the active) leaves and joins again at once: it lands
    behind the target, so it needs no cooling period; a member behind the target does nothing;
  * the active cedes (stops COMMAND, quits without fence, joins again at the back) once the
    one next in the queue is the one asked for: at
    once without a target, else when the target is second in the queue. It waits for the
    members ahead of the target to move, up to the cooling period on its own clock; then the
    request is dropped and it stays active. Waiting, rather than ceding at once, means no
    member ahead of the target can win meanwhile, so nobody has to give the lead back.
    Before it cedes it takes the request (``Decision.take``: the supervisor marks it
    ``ceding``, checking the version it read, and hands the outcome to ``taken``); a request
    cleared by ``ha pause`` or replaced since is not taken, and nothing is done. A request
    read marked already (the answer to our mark was lost) is ceded to at once: the mark says
    so, and ``ha pause`` refuses while it does.
  * while the election is paused (the pause as read after the request), a pending request is
    dropped by everyone: the active stays (the target could not take the lead: P16 of
    ``ha/election/machine.py``), the members ahead of the target stay where they are.
    ``ha pause`` clears a pending request itself; this one came in a race with it.

  Each request is acted on once, and looked at for its cooling period at most (from our first
  reading, on our clock): then the active drops it and the others stop looking. No wall clocks
  are compared between hosts.

Time passing is an input too: ``verdict(now)`` ends a cooldown whose period is over, and each
reading of a request checks its period.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from .records import FailoverRequest, text

__all__ = ("LONG_RUN", "RESTART_DELAY", "Decision", "Eligibility", "Standing", "Verdict")

RESTART_DELAY = (1.0, 30.0)  # after COMMAND exits on its own: first delay, cap
LONG_RUN = 60.0  # seconds: a run this long was no crash loop (the delay starts again)


class Standing(enum.Enum):
    """Where the supervisor stands: eligible, or out and why."""

    ELIGIBLE = "eligible"
    WAITING_FOR_HEALTH = "waiting for the first health check"
    UNHEALTHY = "unhealthy"
    COOLING_DOWN = "cooling down"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether to take part now; if not, why, and when the clock alone may change that."""

    standing: Standing
    # for the member node: "unhealthy", "ceded the lead: rejoining in 3.0s"; eligible, failed
    # health checks under the threshold: "health check failed 1 of 3"
    note: str = ""
    cause: str = ""  # the part of the note that stays the same while the reason does
    wake_at: float = math.inf  # the end of the cooldown (anyio time)

    @property
    def eligible(self) -> bool:
        return self.standing is Standing.ELIGIBLE


@dataclass(frozen=True, slots=True)
class Decision:
    """What the supervisor does after a fact: the I/O that the rules cannot do themselves."""

    quit: bool = False  # leave the election now (stopping COMMAND first when active)
    wake: bool = False  # the loop waiting to take part looks at the verdict again
    say: tuple[tuple[int, str], ...] = ()  # (logging level, line) to log, in order
    # take the failover request just read (mark it ceding, at the version read), then hand
    # the outcome to ``Eligibility.taken``
    take: bool = False
    renote: bool = False  # the verdict's note changed while eligible: publish it again

    def then(self, other: Decision) -> Decision:
        return Decision(
            self.quit or other.quit,
            self.wake or other.wake,
            self.say + other.say,
            self.take or other.take,
            self.renote or other.renote,
        )


@dataclass(frozen=True, slots=True)
class _Open:
    """A pending request we read and have not acted on: looked at until ``until``."""

    request_id: str
    until: float  # anyio time: first read plus its cooling period


def _info(line: str) -> tuple[int, str]:
    return (logging.INFO, line)


def _target(to: bytes | None) -> str:
    return "any standby" if to is None else repr(text(to))


def _names(identities: Sequence[bytes]) -> str:
    return ", ".join(repr(text(i)) for i in identities)


class Eligibility:
    """The rules' state for one supervisor of identity ``identity``.

    ``health_check``: whether a health command runs (if not, the member is always healthy);
    ``health_failures``: failed checks in a row that take a healthy member out (>= 1).
    """

    def __init__(self, identity: bytes, *, health_check: bool, health_failures: int = 3) -> None:
        self.identity = identity
        self.healthy: bool | None = None if health_check else True  # None: not checked yet
        self.health_failures = health_failures
        self.failures = 0  # checks failed in a row (at most health_failures: nothing grows)
        self.cool_until = 0.0  # anyio time: cooling down until then
        self.cool_note = ""
        self.handled: set[str] = set()  # failover requests acted on, dropped or over
        self.restart_delay = RESTART_DELAY[0]
        # the last request read is pending and may still ask something of us: the supervisor
        # reads the queue again soon (the queue's changes wake nobody)
        self.pending = False
        self._open: _Open | None = None
        self._alone = False  # nobody else was in the queue when we last read it as the active

    def verdict(self, now: float) -> Verdict:
        """Take part now, or stay out (and why, until when)."""
        wake_at = self.cool_until if self.cool_until > now else math.inf
        if self.healthy is None:
            note = Standing.WAITING_FOR_HEALTH.value
            return Verdict(Standing.WAITING_FOR_HEALTH, note, "", wake_at)
        if not self.healthy:
            return Verdict(Standing.UNHEALTHY, Standing.UNHEALTHY.value, "", wake_at)
        if now < self.cool_until:
            note = f"{self.cool_note}: rejoining in {self.cool_until - now:.1f}s"
            return Verdict(Standing.COOLING_DOWN, note, self.cool_note, wake_at)
        if self.failures:
            note = f"health check failed {self.failures} of {self.health_failures}"
            return Verdict(Standing.ELIGIBLE, note)
        return Verdict(Standing.ELIGIBLE)

    # --- the facts ----------------------------------------------------------------------------

    def health_checked(self, now: float, healthy: bool, why: str) -> Decision:
        """The health command answered (``why``: how it ended)."""
        failed, limit = self.failures, self.health_failures
        if healthy:
            self.failures = 0
            if not self.healthy:
                self.healthy = True
                return Decision(wake=True, say=(_info("health check passes: joining"),))
            if not failed:
                return Decision()
            line = f"health check passes again, after {failed} of {limit} failed"
            return Decision(renote=True, say=(_info(line),))
        self.failures = min(failed + 1, limit)
        if self.healthy is False:
            return Decision()  # out already: no news
        if self.healthy and self.failures < limit:
            line = f"health check failed ({why}): {self.failures} of {limit}, staying in"
            return Decision(renote=True, say=((logging.WARNING, line),))
        self.healthy = False
        in_a_row = f", {limit} times in a row" if self.failures > 1 else ""
        line = f"health check failed ({why}{in_a_row}): leaving the election"
        return Decision(quit=True, wake=True, say=((logging.WARNING, line),))

    def command_ended(self, now: float, note: str, ran: float) -> Decision:
        """COMMAND ended by itself (or could not start) while we led, after ``ran`` seconds:
        leave, back off, rejoin (a crash loop must not keep the lead, and another host may do
        better meanwhile). ``note`` tells ``ha failover`` why we could not stay active."""
        if ran > LONG_RUN:
            self.restart_delay = RESTART_DELAY[0]
        delay = self.restart_delay
        self.restart_delay = min(RESTART_DELAY[1], delay * 2)
        say = (logging.WARNING, f"leaving the election for {delay:.0f}s")
        return Decision(say=(say,)).then(self._cool_down(now, delay, note))

    def failover_read(
        self,
        now: float,
        request: FailoverRequest | None,
        epoch: int | None,
        queue: Sequence[bytes] = (),
        leading: int | None = None,
        *,
        paused: bool = False,
    ) -> Decision:
        """The failover request and the queue as read: ``queue`` the identities in order,
        the leader first, ``epoch`` the leader's token (None: nobody in the queue);
        ``leading`` our lease's epoch while we are active; ``paused``: the pause node, read
        after the request, was there."""
        self.pending = False
        if request is None or request.id in self.handled:
            self._open = None  # a newer request replaced the one we looked at
            return Decision()
        if epoch != request.epoch:
            self._over(request.id)  # history: someone else leads since
            return Decision()
        first = self._open is None or self._open.request_id != request.id
        if self._open is None or first:
            self._open = _Open(request.id, now + request.cooldown)
        expired = now >= self._open.until
        me, to = self.identity, request.to
        active = leading == request.epoch and request.active == me
        if paused:  # no failover while paused: the target could not take the lead (P16)
            self._over(request.id)
            if not active:
                return Decision()
            line = f"failover to {_target(to)} dropped: the election is paused; staying active"
            return Decision(say=((logging.WARNING, line),))
        if active:
            self._alone = all(who == me for who in queue)
            return self._cede(now, request, queue, first, expired)
        if to is not None and to != me and me in queue and to in queue:
            if 0 < queue.index(me) < queue.index(to):
                self._over(request.id)
                line = f"failover to {text(to)!r} pending: joining again behind it"
                return Decision(quit=True, say=(_info(line),))
        if expired:
            self._over(request.id)  # nothing was asked of us in its period: stop looking
        else:
            self.pending = True  # the queue may still move: read it again soon
        return Decision()

    # --- helpers ------------------------------------------------------------------------------

    def _cede(
        self,
        now: float,
        request: FailoverRequest,
        queue: Sequence[bytes],
        first: bool,
        expired: bool,
    ) -> Decision:
        """We are the request's active: cede once the target is next (or there is none),
        having taken the request first."""
        to = request.to
        if request.ceding:  # we took it (the answer was lost): it says we cede, so we do
            return self.taken(now, request, True)
        if to is None or tuple(queue[1:2]) == (to,):
            return Decision(take=True)
        if to in queue:
            where = f"{_names(queue[1 : queue.index(to)])} ahead of it"
        else:
            where = "it is not in the queue"
        if expired:
            self._over(request.id)
            line = (
                f"failover to {text(to)!r} dropped: not next in the queue after"
                f" {request.cooldown:g}s ({where}); staying active"
            )
            return Decision(say=((logging.WARNING, line),))
        self.pending = True
        if first:
            line = f"failover to {text(to)!r} asked: waiting until it is next ({where})"
            return Decision(say=(_info(line),))
        return Decision()

    def taken(self, now: float, request: FailoverRequest, taken: bool) -> Decision:
        """After ``Decision.take``: ``taken``, the request is ours to honour: cede. Else it
        changed since it was read (cleared by ``ha pause``, replaced), or the answer was lost:
        read it again soon, and decide on what is there then."""
        if not taken:
            self.pending = True
            return Decision()
        self._over(request.id)
        line = f"graceful failover to {_target(request.to)} asked by {request.by or '?'}: ceding"
        if not self._alone:  # behind the one taking over: a standby at once
            return Decision(quit=True, wake=True, say=(_info(line + ", then standing by"),))
        cede = Decision(say=(_info(line + " (forced: nobody to hand over to)"),))
        return cede.then(self._cool_down(now, request.cooldown, "ceded the lead"))

    def _over(self, request_id: str) -> None:
        self.handled.add(request_id)
        self._open = None

    def _cool_down(self, now: float, seconds: float, note: str) -> Decision:
        self.cool_until = max(self.cool_until, now + seconds)
        self.cool_note = note
        return Decision(quit=True, wake=True)
