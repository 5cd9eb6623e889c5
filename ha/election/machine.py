"""The elector's state machine: pure, no I/O, no clock, no anyio (the h11 model).

``Machine.handle(input) -> list[Effect]``: inputs are facts that happened (past tense), effects
are commands for the runner (``elector.py``), which executes them in order and feeds their
outcomes back as inputs; both are defined in ``events.py``.

Rules (each names the mechanism it follows):

R1  Every input that names a session other than the current one is stale and dropped
    (Hadoop ActiveStandbyElector's ``isStaleClient``): a late answer or watch of a dead session
    must never move the machine.
R2  Joining creates the ephemeral lock node. "Exists" is not "lost": the create may have been
    retried after a connection loss and be ours, so the owner is read and compared with our
    session (Hadoop's ``NodeExists`` -> ``monitorActiveStatus``; Curator's ``LeaderLatch``).
R3  Lock held by another identity -> STANDBY, watching the lock; lock deleted -> create again.
R4  Winning: read breadcrumb and epoch; a breadcrumb that names another identity (or cannot be
    decoded) is handed to the contender's fence hook, which must succeed (Hadoop
    ``fenceOldActive``); then ONE transaction, guarded by the lock's version, bumps the epoch by
    compare-and-set and writes our breadcrumb (Kafka's controller epoch); only then ACTIVE.
R5  Any failure on the way to ACTIVE releases the lock and backs off (exponential, capped,
    jittered: the runner picks the delay from the attempt number); consecutive failures past
    ``max_retries`` are fatal (Hadoop's ``NUM_RETRIES``). Progress resets the count, except for
    refused fences: re-creating the lock is no progress for those, so they count until a fence
    succeeds or another breadcrumb needs fencing (a real STONITH command is not hammered;
    Hadoop sleeps, then gives up).
R6  Losing authority while ACTIVE (session expired, lock deleted, epoch superseded, a fenced
    write refused) -> FENCED: the leadership scope is stopped first, then back off and rejoin.
R7  Disconnected: by default an ACTIVE stops at once and goes NEUTRAL (Hadoop
    ``enterNeutralMode``); with ``hold_on_disconnect`` it keeps leading until the runner's local
    deadline (shorter than the session timeout, client-go's renew deadline) and, when contact
    comes back within the session, re-checks that the lock is still ours and carries on.
R8  Reconnected in the same session: re-check the lock's owner before anything else.
R9  Session expired: the ephemeral lock is gone; wait for the next session and rejoin.
R10 ``quit(need_fence=False)`` from ACTIVE stops the work, then deletes our own breadcrumb (by
    its version, so never someone else's) so the next active need not fence us, then releases.
R11 A report of the public state is an effect placed after the stop of the leadership scope:
    nobody is told "not active" while the old scope may still run.
R12 Fast takeover: a standby that sees the lock deleted reads the breadcrumb and epoch first;
    when nothing needs fencing (no breadcrumb, or our own) it creates the lock, bumps the epoch
    and writes its breadcrumb in ONE transaction that checks both versions it read (two
    backend writes per graceful handover instead of four). Anything else takes the R2/R4 path.

Theory of operation. ``Phase`` is where the machine is, ``PUBLIC`` maps it to the ``State`` a
contender is told, ``LEGAL`` lists the public changes allowed. ``HANDLED`` declares, for every
input, the phases that act on it; ``handle`` looks the pair up before any handler runs, and an
input outside the table changes nothing. That is the machine's answer to stale and irrelevant
input, in one place: the answer to an effect of a phase already left (a ``LockOwned`` after
the lock was deleted), a watch that fires after we moved on, a duplicate, a timer of an older
backoff. Connection facts are recorded in every live phase; DONE and FAILED act on nothing.
Inside the table a handler may still find nothing to do (an older lease's epoch, an older
backoff's token). ``python -m ha.election.diagram`` draws the phases from the table.
"""

from __future__ import annotations

import enum

from . import events as ev
from .nodes import decode_breadcrumb

__all__ = (
    "HANDLED",
    "HOLDING_LOCK",
    "LEADING",
    "LEGAL",
    "MAY_HOLD_LOCK",
    "PUBLIC",
    "Machine",
    "Phase",
    "State",
)


class State(enum.Enum):
    """What the contender has been told (ARCHITECTURE.md's table)."""

    NEUTRAL = "neutral"
    STANDBY = "standby"
    ACTIVE = "active"
    FENCED = "fenced"


class Phase(enum.Enum):
    """Where the machine is; several phases show as one public State."""

    IDLE = "idle"  # not joined
    CONNECTING = "connecting"  # joined, waiting for a session
    CREATING = "creating"  # CreateLock in flight
    CHECKING = "checking"  # ReadLock in flight
    STANDBY = "standby"  # another identity holds the lock
    READING = "reading"  # we hold the lock; ReadElection in flight
    FENCING = "fencing"  # FenceOldActive in flight
    COMMITTING = "committing"  # CommitActive in flight
    PROBING = "probing"  # lock deleted under a standby: ReadElection in flight (R12)
    CLAIMING = "claiming"  # ClaimActive in flight (R12)
    ACTIVE = "active"
    DETACHED = "detached"  # active, contact lost, holding on (hold_on_disconnect)
    VERIFYING = "verifying"  # active, reconnected, checking the lock is still ours
    OFFLINE = "offline"  # contact lost, not active: wait for it to come back
    BACKOFF = "backoff"  # waiting before rejoining after a failure
    FENCED = "fenced"  # lost authority while active; waiting before rejoining
    DONE = "done"  # quit
    FAILED = "failed"  # fatal error


# every phase shows as NEUTRAL but these
PUBLIC: dict[Phase, State] = {phase: State.NEUTRAL for phase in Phase} | {
    Phase.STANDBY: State.STANDBY,
    Phase.ACTIVE: State.ACTIVE,
    Phase.DETACHED: State.ACTIVE,
    Phase.VERIFYING: State.ACTIVE,
    Phase.FENCED: State.FENCED,
}

LEADING = frozenset({Phase.ACTIVE, Phase.DETACHED, Phase.VERIFYING})
HOLDING_LOCK = frozenset({Phase.READING, Phase.FENCING, Phase.COMMITTING}) | LEADING
# phases in which a create may have succeeded unseen: releasing (owner-checked) is harmless
MAY_HOLD_LOCK = HOLDING_LOCK | {Phase.CREATING, Phase.CHECKING, Phase.STANDBY, Phase.CLAIMING}

# The legal changes of the public state (ARCHITECTURE.md safety property 6).
LEGAL = frozenset(
    {
        (State.NEUTRAL, State.STANDBY),
        (State.NEUTRAL, State.ACTIVE),
        (State.STANDBY, State.NEUTRAL),
        (State.STANDBY, State.ACTIVE),
        (State.ACTIVE, State.NEUTRAL),
        (State.ACTIVE, State.STANDBY),
        (State.ACTIVE, State.FENCED),
        (State.FENCED, State.NEUTRAL),
        (State.FENCED, State.STANDBY),
    }
)


# --- the table: which phases act on each input --------------------------------------------------

LIVE = frozenset(Phase) - {Phase.DONE, Phase.FAILED}
TAKING_OVER = frozenset({Phase.READING, Phase.FENCING, Phase.COMMITTING, Phase.CLAIMING})

HANDLED: dict[type[ev.Input], frozenset[Phase]] = {
    # lifecycle and connection: recorded in every live phase
    ev.Joined: frozenset({Phase.IDLE}),
    ev.QuitRequested: LIVE,
    ev.Connected: LIVE,
    ev.Disconnected: LIVE,
    ev.Reconnected: LIVE,
    ev.SessionExpired: LIVE,
    ev.DeadlineExpired: LEADING,
    # the lock (R2, R3, R6, R8)
    ev.LockCreated: frozenset({Phase.CREATING}),
    ev.LockExists: frozenset({Phase.CREATING}),
    ev.LockOwned: frozenset({Phase.CHECKING, Phase.STANDBY, Phase.ACTIVE, Phase.VERIFYING}),
    ev.LockMissing: frozenset({Phase.CHECKING, Phase.STANDBY, Phase.ACTIVE, Phase.VERIFYING}),
    ev.LockDeleted: frozenset({Phase.CHECKING, Phase.STANDBY}) | TAKING_OVER | LEADING,
    ev.LockChanged: frozenset({Phase.STANDBY, Phase.ACTIVE}),
    # taking over (R4, R12)
    ev.ElectionRead: frozenset({Phase.READING, Phase.PROBING}),
    ev.FenceSucceeded: frozenset({Phase.FENCING}),
    ev.FenceFailed: frozenset({Phase.FENCING}),
    ev.Committed: frozenset({Phase.COMMITTING}),
    ev.CommitConflict: frozenset({Phase.COMMITTING}),
    ev.Claimed: frozenset({Phase.CLAIMING}),
    ev.ClaimConflict: frozenset({Phase.CLAIMING}),
    # leading (R6)
    ev.ActiveFailed: LEADING,
    ev.EpochChanged: frozenset({Phase.ACTIVE}),
    ev.EpochSuperseded: LEADING,
    # failures and time (R5): a failure while waiting anyway, or while offline, is no news
    ev.BackoffElapsed: frozenset({Phase.BACKOFF, Phase.FENCED}),
    ev.OperationFailed: LIVE - {Phase.IDLE, Phase.BACKOFF, Phase.FENCED, Phase.OFFLINE},
}

# --- the machine -------------------------------------------------------------------------------


class Machine:
    """One contender's view of one election. Feed inputs to ``handle``; do what it returns."""

    __slots__ = (
        "identity", "max_retries", "hold_on_disconnect", "phase", "session", "connected",
        "reported", "failures", "active_failures", "fence_failures", "fence_target",
        "backoff_token", "holder", "lock_version", "epoch",
        "epoch_version", "breadcrumb_version", "_read",
    )  # fmt: skip

    def __init__(
        self, identity: bytes, *, max_retries: int = 5, hold_on_disconnect: bool = False
    ) -> None:
        self.identity = identity
        self.max_retries = max_retries
        self.hold_on_disconnect = hold_on_disconnect
        self.phase = Phase.IDLE
        self.session: int | None = None
        self.connected = False
        self.reported = State.NEUTRAL  # the public state as last reported
        self.failures = 0  # consecutive failures (R5)
        # consecutive terms whose become_active raised: winning the lock again is no progress
        # for these, so only a term that ends otherwise resets them (R5)
        self.active_failures = 0
        # consecutive refused fences of one breadcrumb: only a fence that works, or another
        # breadcrumb to fence (a new incident), resets the count
        self.fence_failures = 0
        self.fence_target: bytes | None = None
        self.backoff_token = 0
        self.holder = b""  # who holds the lock, as last seen
        self.lock_version = 0
        self.epoch: int | None = None  # our epoch while leading
        self.epoch_version = 0
        self.breadcrumb_version: int | None = None
        self._read: ev.ElectionRead | None = None

    @property
    def state(self) -> State:
        return PUBLIC[self.phase]

    # ---------------------------------------------------------------------------------------

    def handle(self, event: ev.Input) -> list[ev.Effect]:
        """Apply one input; return the effects to execute, in order."""
        if isinstance(event, ev.Reconnected) and self.session is None:
            event = ev.Connected(event.session)  # we never saw this session begin: adopt it
        session = getattr(event, "session", None)
        if session is not None and not isinstance(event, ev.Connected) and session != self.session:
            return []  # R1: stale
        if self.phase not in HANDLED[type(event)]:
            return []  # irrelevant here (or too late): see the theory of operation
        handler = getattr(self, "_on_" + type(event).__name__)
        effects: list[ev.Effect] = handler(event)
        return effects

    # --- helpers ----------------------------------------------------------------------------

    def _go(
        self, phase: Phase, cause: str, effects: list[ev.Effect] | None = None
    ) -> list[ev.Effect]:
        """Move to ``phase``; if the public state changes, report it after ``effects`` (R11)."""
        out = list(effects or [])
        was, self.phase = self.reported, phase
        now = PUBLIC[phase]
        if now is not was:
            self.reported = now
            out.append(ev.Report(was, now, self.epoch if now is State.ACTIVE else None, cause))
            if now is State.STANDBY:
                out.append(ev.NotifyStandby(self.holder))
            elif now is State.NEUTRAL and phase not in (Phase.DONE, Phase.FAILED):
                out.append(ev.NotifyNeutral())
        return out

    def _stop_if_leading(self, cause: str) -> list[ev.Effect]:
        return [ev.StopActive(cause)] if self.phase in LEADING else []

    def _join(self, cause: str) -> list[ev.Effect]:
        if self.session is None or not self.connected:
            return self._go(Phase.CONNECTING if self.session is None else Phase.OFFLINE, cause)
        return self._go(Phase.CREATING, cause, [ev.CreateLock(self.session)])

    def _fail(self, error: str, *, release: bool, lost: bool = False) -> list[ev.Effect]:
        """R5/R6: stop, maybe release, back off; fatal past the retry bound."""
        self.failures += 1
        effects = self._stop_if_leading(error)
        attempt = max(self.failures, self.active_failures, self.fence_failures)
        if attempt > self.max_retries:
            return self._fatal(error, effects)
        if release and self.session is not None and self.connected:
            effects.append(ev.ReleaseLock(self.session))
        self.backoff_token += 1
        self.epoch = None
        effects = self._go(Phase.FENCED if lost else Phase.BACKOFF, error, effects)
        effects.append(ev.WaitBackoff(attempt, self.backoff_token))
        return effects

    def _fatal(self, error: str, effects: list[ev.Effect] | None = None) -> list[ev.Effect]:
        out = self._stop_if_leading(error) if effects is None else list(effects)
        if self.session is not None and self.connected and self.phase in MAY_HOLD_LOCK:
            out.append(ev.ReleaseLock(self.session))
        self.epoch = None
        out = self._go(Phase.FAILED, error, out)
        out += [ev.NotifyFatal(error), ev.Finish(error)]
        return out

    def _lost(self, cause: str, *, release: bool = True) -> list[ev.Effect]:
        """R6: authority lost while leading (release unless the lock is known not to be ours)."""
        self.active_failures = 0  # the term ended for another reason than its work failing
        return self._fail(cause, release=release, lost=True)

    def _progress(self) -> None:
        self.failures = 0

    # --- handlers: lifecycle ----------------------------------------------------------------

    def _on_Joined(self, event: ev.Joined) -> list[ev.Effect]:
        return self._join("joined")

    def _on_QuitRequested(self, event: ev.QuitRequested) -> list[ev.Effect]:
        effects = self._stop_if_leading("quit")
        if self.session is not None and self.connected:
            if (
                self.phase in LEADING
                and not event.need_fence
                and self.breadcrumb_version is not None
            ):
                effects.append(
                    ev.DeleteBreadcrumb(self.session, self.breadcrumb_version, self.lock_version)
                )
            if self.phase not in (Phase.IDLE, Phase.CONNECTING, Phase.OFFLINE):
                effects.append(ev.ReleaseLock(self.session))
        self.epoch = None
        effects = self._go(
            Phase.DONE, "quit (fence requested)" if event.need_fence else "quit", effects
        )
        effects.append(ev.Finish())
        return effects

    # --- handlers: connection ---------------------------------------------------------------

    def _on_Connected(self, event: ev.Connected) -> list[ev.Effect]:
        if event.session == self.session:
            return self._on_Reconnected(ev.Reconnected(event.session))
        effects: list[ev.Effect] = []
        if self.session is not None:
            # a new session without a word about the old one: the old one is gone (R9)
            effects = self._on_SessionExpired(ev.SessionExpired(self.session))
        self.session, self.connected = event.session, True
        if self.phase in (Phase.CONNECTING, Phase.OFFLINE):
            effects += self._join("connected")
        return effects

    def _on_Disconnected(self, event: ev.Disconnected) -> list[ev.Effect]:
        self.connected = False
        if self.phase in (Phase.ACTIVE, Phase.VERIFYING):
            if self.hold_on_disconnect:
                return self._go(Phase.DETACHED, "disconnected")  # R7: hold until the deadline
            self.epoch = None
            return self._go(Phase.OFFLINE, "disconnected", [ev.StopActive("disconnected")])
        if self.phase in (Phase.BACKOFF, Phase.FENCED, Phase.DETACHED, Phase.IDLE):
            return []  # the backoff ends by itself; rejoining then waits for contact
        return self._go(Phase.OFFLINE, "disconnected")

    def _on_Reconnected(self, event: ev.Reconnected) -> list[ev.Effect]:
        self.connected = True
        if self.phase is Phase.DETACHED:
            return self._go(Phase.VERIFYING, "reconnected", [ev.ReadLock(event.session)])  # R8
        if self.phase is Phase.OFFLINE:
            return self._go(Phase.CHECKING, "reconnected", [ev.ReadLock(event.session)])  # R8
        return []

    def _on_SessionExpired(self, event: ev.SessionExpired) -> list[ev.Effect]:
        self.session, self.connected = None, False  # R9
        if self.phase in LEADING:
            return self._lost("session expired")
        if self.phase in (Phase.BACKOFF, Phase.FENCED, Phase.IDLE):
            return []
        self.epoch = None
        return self._go(Phase.CONNECTING, "session expired")

    def _on_DeadlineExpired(self, event: ev.DeadlineExpired) -> list[ev.Effect]:
        self.epoch = None
        stop: list[ev.Effect] = [ev.StopActive("local deadline passed")]
        if self.connected and self.session is not None:
            # the driver has not said it lost contact: stop anyway, then see where we stand
            return self._go(
                Phase.CHECKING, "local deadline passed", stop + [ev.ReadLock(self.session)]
            )
        return self._go(Phase.OFFLINE, "local deadline passed", stop)

    # --- handlers: the lock -----------------------------------------------------------------

    def _on_LockCreated(self, event: ev.LockCreated) -> list[ev.Effect]:
        self._progress()
        self.holder, self.lock_version = self.identity, event.version
        return self._go(Phase.READING, "lock created", [ev.ReadElection(event.session)])

    def _on_LockExists(self, event: ev.LockExists) -> list[ev.Effect]:
        return self._go(Phase.CHECKING, "lock exists", [ev.ReadLock(event.session)])  # R2

    def _on_LockOwned(self, event: ev.LockOwned) -> list[ev.Effect]:
        self.holder = event.holder
        if self.phase is Phase.VERIFYING:
            if event.ours:
                self._progress()
                return self._go(Phase.ACTIVE, "lock still ours")
            return self._lost("lock taken over", release=False)
        if self.phase is Phase.ACTIVE:  # LockChanged re-check
            return [] if event.ours else self._lost("lock taken over", release=False)
        self._progress()  # CHECKING or STANDBY
        if event.ours:  # R2: our retried create had worked
            self.lock_version = event.version
            return self._go(Phase.READING, "lock is ours", [ev.ReadElection(event.session)])
        return self._go(Phase.STANDBY, "lock held by another")  # R3

    def _on_LockMissing(self, event: ev.LockMissing) -> list[ev.Effect]:
        if self.phase in (Phase.VERIFYING, Phase.ACTIVE):
            return self._lost("lock gone", release=False)
        return self._go(Phase.CREATING, "lock missing", [ev.CreateLock(event.session)])

    def _on_LockDeleted(self, event: ev.LockDeleted) -> list[ev.Effect]:
        if self.phase is Phase.STANDBY:
            return self._go(Phase.PROBING, "lock deleted", [ev.ReadElection(event.session)])  # R12
        if self.phase is Phase.CHECKING:
            # the ReadLock in flight may answer "held by another" from before this deletion:
            # no event would ever wake that STANDBY, so create now; the stale answer is ignored
            return self._go(Phase.CREATING, "lock deleted", [ev.CreateLock(event.session)])
        if self.phase in LEADING:
            return self._lost("lock deleted", release=False)  # R6
        return self._fail("lock deleted while taking over", release=False)

    def _on_LockChanged(self, event: ev.LockChanged) -> list[ev.Effect]:
        return [ev.ReadLock(event.session)]

    # --- handlers: taking over --------------------------------------------------------------

    def _on_ElectionRead(self, event: ev.ElectionRead) -> list[ev.Effect]:
        if self.phase is Phase.PROBING:
            return self._probed(event)
        self._read = event
        if event.breadcrumb is not None:
            crumb = decode_breadcrumb(event.breadcrumb)
            if crumb is None or crumb.identity != self.identity:
                # R4: someone else (or something unreadable) was active: fence it first
                if event.breadcrumb != self.fence_target:
                    self.fence_target, self.fence_failures = event.breadcrumb, 0
                return self._go(
                    Phase.FENCING,
                    "fencing old active",
                    [ev.FenceOldActive(event.session, event.breadcrumb)],
                )
        return self._commit(event)

    def _probed(self, read: ev.ElectionRead) -> list[ev.Effect]:
        """R12: claim in one transaction if nothing needs fencing, else the usual way."""
        if read.breadcrumb is not None:
            crumb = decode_breadcrumb(read.breadcrumb)
            if crumb is None or crumb.identity != self.identity:
                return self._go(Phase.CREATING, "lock deleted", [ev.CreateLock(read.session)])
        claim = ev.ClaimActive(
            read.session, _next_epoch(read), read.epoch_version, read.breadcrumb_version
        )
        return self._go(Phase.CLAIMING, "claiming the lock", [claim])

    def _on_Claimed(self, event: ev.Claimed) -> list[ev.Effect]:
        self.lock_version = 0
        self.holder = self.identity
        return self._won(event.session, event.epoch, event.epoch_version, event.breadcrumb_version)

    def _on_ClaimConflict(self, event: ev.ClaimConflict) -> list[ev.Effect]:
        if event.lock_exists:  # R2: someone (maybe our own retried claim) holds it: look
            return self._go(Phase.CHECKING, "lock exists", [ev.ReadLock(event.session)])
        return self._go(Phase.CREATING, "claim raced", [ev.CreateLock(event.session)])

    def _commit(self, read: ev.ElectionRead) -> list[ev.Effect]:
        effect = ev.CommitActive(
            read.session,
            self.lock_version,
            _next_epoch(read),
            read.epoch_version,
            read.breadcrumb_version,
        )
        return self._go(Phase.COMMITTING, "committing epoch", [effect])

    def _on_FenceSucceeded(self, event: ev.FenceSucceeded) -> list[ev.Effect]:
        if self._read is None:
            return []
        self.fence_failures = 0
        return self._commit(self._read)

    def _on_FenceFailed(self, event: ev.FenceFailed) -> list[ev.Effect]:
        self.fence_failures += 1
        return self._fail(f"fencing failed: {event.error}", release=True)

    def _on_Committed(self, event: ev.Committed) -> list[ev.Effect]:
        return self._won(event.session, event.epoch, event.epoch_version, event.breadcrumb_version)

    def _won(
        self, session: int, epoch: int, epoch_version: int, breadcrumb_version: int
    ) -> list[ev.Effect]:
        self._progress()
        self.epoch, self.epoch_version = epoch, epoch_version
        self.breadcrumb_version = breadcrumb_version
        return self._go(
            Phase.ACTIVE, "won the election", [ev.StartActive(session, epoch, epoch_version)]
        )

    def _on_CommitConflict(self, event: ev.CommitConflict) -> list[ev.Effect]:
        if event.lock_lost:
            return self._fail("lock lost while taking over", release=False)
        self.failures += 1  # a racing writer: read again, within the retry bound
        if self.failures > self.max_retries:
            return self._fatal("epoch kept changing under the lock")
        return self._go(Phase.READING, "epoch race", [ev.ReadElection(event.session)])

    # --- handlers: leading ------------------------------------------------------------------

    def _on_ActiveFailed(self, event: ev.ActiveFailed) -> list[ev.Effect]:
        if event.epoch != self.epoch:
            return []  # an older term's report
        self.active_failures += 1  # backs off longer each time; fatal past max_retries
        return self._fail(f"become_active failed: {event.error}", release=True)

    def _on_EpochChanged(self, event: ev.EpochChanged) -> list[ev.Effect]:
        if self.epoch is None:
            return []
        return [ev.VerifyEpoch(event.session, self.epoch, self.epoch_version)]

    def _on_EpochSuperseded(self, event: ev.EpochSuperseded) -> list[ev.Effect]:
        if event.epoch != self.epoch:
            return []  # an older lease's report
        return self._lost("epoch superseded")

    # --- handlers: failures and time --------------------------------------------------------

    def _on_BackoffElapsed(self, event: ev.BackoffElapsed) -> list[ev.Effect]:
        if event.token != self.backoff_token:
            return []  # the timer of an older backoff
        return self._join("backoff elapsed")

    def _on_OperationFailed(self, event: ev.OperationFailed) -> list[ev.Effect]:
        error = f"{event.operation} failed: {event.error}"
        if not event.transient:
            return self._fatal(error)
        if self.phase in LEADING:
            # a failed check while leading proves nothing: the deadline and events decide
            return []
        return self._fail(error, release=True)


def _next_epoch(read: ev.ElectionRead) -> int:
    """One above the epoch counter, and above the last active's breadcrumb: should the counter
    ever be lost (deleted from outside), fencing tokens still never go back."""
    crumb = decode_breadcrumb(read.breadcrumb) if read.breadcrumb is not None else None
    return max(read.epoch, crumb.epoch if crumb is not None else 0) + 1
