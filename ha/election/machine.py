"""The elector's state machine: pure, no I/O, no clock, no anyio (the h11 model).

``Machine.handle(input) -> list[Effect]``: inputs are facts that happened (past tense), effects
are commands for the runner (``ha/elector.py``), which executes them in order and feeds their
outcomes back as inputs.

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
"""

from __future__ import annotations

import base64
import enum
import json
import typing
from dataclasses import dataclass

__all__ = (
    "Backoff",
    "BackoffElapsed",
    "Breadcrumb",
    "CommitActive",
    "CommitConflict",
    "Committed",
    "Connected",
    "CreateLock",
    "DeadlineExpired",
    "DeleteBreadcrumb",
    "Disconnected",
    "Effect",
    "ElectionRead",
    "EpochChanged",
    "EpochSuperseded",
    "FenceFailed",
    "FenceOldActive",
    "FenceSucceeded",
    "Finish",
    "Input",
    "Joined",
    "LockChanged",
    "LockCreated",
    "LockDeleted",
    "LockExists",
    "LockMissing",
    "LockOwned",
    "Machine",
    "NotifyFatal",
    "NotifyNeutral",
    "NotifyStandby",
    "OperationFailed",
    "Phase",
    "QuitRequested",
    "ReadElection",
    "ReadLock",
    "Reconnected",
    "ReleaseLock",
    "Report",
    "SessionExpired",
    "StartActive",
    "State",
    "StopActive",
    "ActiveFailed",
    "ClaimActive",
    "ClaimConflict",
    "Claimed",
    "VerifyEpoch",
    "decode_breadcrumb",
    "encode_breadcrumb",
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


PUBLIC: dict[Phase, State] = {
    Phase.IDLE: State.NEUTRAL,
    Phase.CONNECTING: State.NEUTRAL,
    Phase.CREATING: State.NEUTRAL,
    Phase.CHECKING: State.NEUTRAL,
    Phase.STANDBY: State.STANDBY,
    Phase.READING: State.NEUTRAL,
    Phase.FENCING: State.NEUTRAL,
    Phase.COMMITTING: State.NEUTRAL,
    Phase.PROBING: State.NEUTRAL,
    Phase.CLAIMING: State.NEUTRAL,
    Phase.ACTIVE: State.ACTIVE,
    Phase.DETACHED: State.ACTIVE,
    Phase.VERIFYING: State.ACTIVE,
    Phase.OFFLINE: State.NEUTRAL,
    Phase.BACKOFF: State.NEUTRAL,
    Phase.FENCED: State.FENCED,
    Phase.DONE: State.NEUTRAL,
    Phase.FAILED: State.NEUTRAL,
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


# --- breadcrumbs ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Breadcrumb:
    """Who was active last, with which epoch: left in the backend for the next active."""

    identity: bytes
    epoch: int
    data: bytes = b""


def encode_breadcrumb(crumb: Breadcrumb) -> bytes:
    return json.dumps(
        {
            "format": "ha.breadcrumb/1",
            "identity": base64.b64encode(crumb.identity).decode(),
            "epoch": crumb.epoch,
            "data": base64.b64encode(crumb.data).decode(),
        },
        separators=(",", ":"),
    ).encode()


def decode_breadcrumb(raw: bytes) -> Breadcrumb | None:
    """The breadcrumb in ``raw``, or None when it is not one of ours (corrupt or foreign)."""
    try:
        doc = json.loads(raw)
        if doc.get("format") != "ha.breadcrumb/1":
            return None
        epoch = doc["epoch"]
        if not isinstance(epoch, int) or isinstance(epoch, bool):
            return None
        return Breadcrumb(
            base64.b64decode(doc["identity"], validate=True),
            epoch,
            base64.b64decode(doc.get("data", ""), validate=True),
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


# --- inputs: facts, past tense -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Joined:
    pass


@dataclass(frozen=True, slots=True)
class QuitRequested:
    need_fence: bool = False


@dataclass(frozen=True, slots=True)
class Connected:
    session: int


@dataclass(frozen=True, slots=True)
class Disconnected:
    session: int


@dataclass(frozen=True, slots=True)
class Reconnected:
    session: int


@dataclass(frozen=True, slots=True)
class SessionExpired:
    session: int


@dataclass(frozen=True, slots=True)
class LockCreated:
    session: int
    version: int


@dataclass(frozen=True, slots=True)
class LockExists:
    session: int


@dataclass(frozen=True, slots=True)
class LockOwned:
    """ReadLock's answer: the lock exists; ``ours`` if its ephemeral owner is our session."""

    session: int
    ours: bool
    holder: bytes
    version: int


@dataclass(frozen=True, slots=True)
class LockMissing:
    session: int


@dataclass(frozen=True, slots=True)
class LockDeleted:
    session: int


@dataclass(frozen=True, slots=True)
class LockChanged:
    session: int


@dataclass(frozen=True, slots=True)
class ElectionRead:
    session: int
    breadcrumb: bytes | None
    breadcrumb_version: int | None
    epoch: int
    epoch_version: int | None  # None: the epoch node does not exist yet


@dataclass(frozen=True, slots=True)
class FenceSucceeded:
    session: int


@dataclass(frozen=True, slots=True)
class FenceFailed:
    session: int
    error: str


@dataclass(frozen=True, slots=True)
class Committed:
    session: int
    epoch: int
    epoch_version: int
    breadcrumb_version: int


@dataclass(frozen=True, slots=True)
class CommitConflict:
    """The epoch transaction was refused: by the lock check (``lock_lost``) or a version race."""

    session: int
    lock_lost: bool


@dataclass(frozen=True, slots=True)
class Claimed:
    """ClaimActive's transaction applied: the lock, the epoch and the breadcrumb are ours."""

    session: int
    epoch: int
    epoch_version: int
    breadcrumb_version: int


@dataclass(frozen=True, slots=True)
class ClaimConflict:
    """ClaimActive's transaction was refused: the lock exists, or what we read changed."""

    session: int
    lock_exists: bool


@dataclass(frozen=True, slots=True)
class ActiveFailed:
    """``become_active`` raised or timed out: a failure to become active (Hadoop)."""

    session: int
    epoch: int
    error: str


@dataclass(frozen=True, slots=True)
class EpochChanged:
    session: int


@dataclass(frozen=True, slots=True)
class EpochSuperseded:
    session: int
    epoch: int


@dataclass(frozen=True, slots=True)
class DeadlineExpired:
    """The runner's local deadline since the last contact ran out while leading."""

    session: int


@dataclass(frozen=True, slots=True)
class BackoffElapsed:
    token: int


@dataclass(frozen=True, slots=True)
class OperationFailed:
    session: int
    operation: str
    error: str
    transient: bool


Input = (
    Joined
    | QuitRequested
    | Connected
    | Disconnected
    | Reconnected
    | SessionExpired
    | LockCreated
    | LockExists
    | LockOwned
    | LockMissing
    | LockDeleted
    | LockChanged
    | ElectionRead
    | FenceSucceeded
    | FenceFailed
    | Committed
    | CommitConflict
    | Claimed
    | ClaimConflict
    | ActiveFailed
    | EpochChanged
    | EpochSuperseded
    | DeadlineExpired
    | BackoffElapsed
    | OperationFailed
)

INPUT_TYPES: tuple[type, ...] = typing.get_args(Input)

# --- effects: commands ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateLock:
    session: int


@dataclass(frozen=True, slots=True)
class ReadLock:
    session: int


@dataclass(frozen=True, slots=True)
class ReadElection:
    session: int


@dataclass(frozen=True, slots=True)
class FenceOldActive:
    session: int
    breadcrumb: bytes


@dataclass(frozen=True, slots=True)
class CommitActive:
    """One transaction: check the lock's version, CAS the epoch, write the breadcrumb."""

    session: int
    lock_version: int
    epoch: int  # the new epoch
    epoch_version: int | None  # expected version of the epoch node (None: create it)
    breadcrumb_version: int | None  # expected version of the breadcrumb (None: create it)


@dataclass(frozen=True, slots=True)
class ClaimActive:
    """One transaction: create the lock, CAS the epoch, write the breadcrumb (R12)."""

    session: int
    epoch: int  # the new epoch
    epoch_version: int | None
    breadcrumb_version: int | None


@dataclass(frozen=True, slots=True)
class StartActive:
    session: int
    epoch: int
    epoch_version: int


@dataclass(frozen=True, slots=True)
class StopActive:
    """Cancel the leadership scope and wait for the work to finish."""

    cause: str


@dataclass(frozen=True, slots=True)
class VerifyEpoch:
    session: int
    epoch: int
    epoch_version: int


@dataclass(frozen=True, slots=True)
class ReleaseLock:
    session: int


@dataclass(frozen=True, slots=True)
class DeleteBreadcrumb:
    """Delete our breadcrumb (by its version) and, in the same transaction, our lock."""

    session: int
    version: int
    lock_version: int


@dataclass(frozen=True, slots=True)
class NotifyStandby:
    holder: bytes


@dataclass(frozen=True, slots=True)
class NotifyNeutral:
    pass


@dataclass(frozen=True, slots=True)
class NotifyFatal:
    error: str


@dataclass(frozen=True, slots=True)
class Backoff:
    attempt: int
    token: int


@dataclass(frozen=True, slots=True)
class Report:
    """The public state changed; published by the runner when it reaches this effect."""

    old: State
    new: State
    epoch: int | None
    cause: str


@dataclass(frozen=True, slots=True)
class Finish:
    error: str | None = None


Effect = (
    CreateLock
    | ReadLock
    | ReadElection
    | FenceOldActive
    | CommitActive
    | ClaimActive
    | StartActive
    | StopActive
    | VerifyEpoch
    | ReleaseLock
    | DeleteBreadcrumb
    | NotifyStandby
    | NotifyNeutral
    | NotifyFatal
    | Backoff
    | Report
    | Finish
)


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
        self._read: ElectionRead | None = None

    @property
    def state(self) -> State:
        return PUBLIC[self.phase]

    # ---------------------------------------------------------------------------------------

    def handle(self, event: Input) -> list[Effect]:
        """Apply one input; return the effects to execute, in order."""
        if self.phase in (Phase.DONE, Phase.FAILED):
            return []
        if isinstance(event, Reconnected) and self.session is None:
            event = Connected(event.session)  # we never saw this session begin: adopt it
        session = getattr(event, "session", None)
        if session is not None and not isinstance(event, Connected) and session != self.session:
            return []  # R1: stale
        handler = getattr(self, "_on_" + type(event).__name__)
        effects: list[Effect] = handler(event)
        return effects

    # --- helpers ----------------------------------------------------------------------------

    def _go(self, phase: Phase, cause: str, effects: list[Effect] | None = None) -> list[Effect]:
        """Move to ``phase``; if the public state changes, report it after ``effects`` (R11)."""
        out = list(effects or [])
        was, self.phase = self.reported, phase
        now = PUBLIC[phase]
        if now is not was:
            self.reported = now
            out.append(Report(was, now, self.epoch if now is State.ACTIVE else None, cause))
            if now is State.STANDBY:
                out.append(NotifyStandby(self.holder))
            elif now is State.NEUTRAL and phase not in (Phase.DONE, Phase.FAILED):
                out.append(NotifyNeutral())
        return out

    def _stop_if_leading(self, cause: str) -> list[Effect]:
        return [StopActive(cause)] if self.phase in LEADING else []

    def _join(self, cause: str) -> list[Effect]:
        if self.session is None or not self.connected:
            return self._go(Phase.CONNECTING if self.session is None else Phase.OFFLINE, cause)
        return self._go(Phase.CREATING, cause, [CreateLock(self.session)])

    def _fail(self, error: str, *, release: bool, lost: bool = False) -> list[Effect]:
        """R5/R6: stop, maybe release, back off; fatal past the retry bound."""
        self.failures += 1
        effects = self._stop_if_leading(error)
        attempt = max(self.failures, self.active_failures, self.fence_failures)
        if attempt > self.max_retries:
            return self._fatal(error, effects)
        if release and self.session is not None and self.connected:
            effects.append(ReleaseLock(self.session))
        self.backoff_token += 1
        self.epoch = None
        effects = self._go(Phase.FENCED if lost else Phase.BACKOFF, error, effects)
        effects.append(Backoff(attempt, self.backoff_token))
        return effects

    def _fatal(self, error: str, effects: list[Effect] | None = None) -> list[Effect]:
        out = self._stop_if_leading(error) if effects is None else list(effects)
        if self.session is not None and self.connected and self.phase in MAY_HOLD_LOCK:
            out.append(ReleaseLock(self.session))
        self.epoch = None
        out = self._go(Phase.FAILED, error, out)
        out += [NotifyFatal(error), Finish(error)]
        return out

    def _lost(self, cause: str, *, release: bool = True) -> list[Effect]:
        """R6: authority lost while leading (release unless the lock is known not to be ours)."""
        self.active_failures = 0  # the term ended for another reason than its work failing
        return self._fail(cause, release=release, lost=True)

    def _progress(self) -> None:
        self.failures = 0

    # --- handlers: lifecycle ----------------------------------------------------------------

    def _on_Joined(self, event: Joined) -> list[Effect]:
        if self.phase is not Phase.IDLE:
            return []
        return self._join("joined")

    def _on_QuitRequested(self, event: QuitRequested) -> list[Effect]:
        effects = self._stop_if_leading("quit")
        if self.session is not None and self.connected:
            if (
                self.phase in LEADING
                and not event.need_fence
                and self.breadcrumb_version is not None
            ):
                effects.append(
                    DeleteBreadcrumb(self.session, self.breadcrumb_version, self.lock_version)
                )
            if self.phase not in (Phase.IDLE, Phase.CONNECTING, Phase.OFFLINE):
                effects.append(ReleaseLock(self.session))
        self.epoch = None
        effects = self._go(
            Phase.DONE, "quit (fence requested)" if event.need_fence else "quit", effects
        )
        effects.append(Finish())
        return effects

    # --- handlers: connection ---------------------------------------------------------------

    def _on_Connected(self, event: Connected) -> list[Effect]:
        if event.session == self.session:
            return self._on_Reconnected(Reconnected(event.session))
        effects: list[Effect] = []
        if self.session is not None:
            # a new session without a word about the old one: the old one is gone (R9)
            effects = self._on_SessionExpired(SessionExpired(self.session))
        self.session, self.connected = event.session, True
        if self.phase in (Phase.CONNECTING, Phase.OFFLINE):
            effects += self._join("connected")
        return effects

    def _on_Disconnected(self, event: Disconnected) -> list[Effect]:
        self.connected = False
        if self.phase in (Phase.ACTIVE, Phase.VERIFYING):
            if self.hold_on_disconnect:
                return self._go(Phase.DETACHED, "disconnected")  # R7: hold until the deadline
            self.epoch = None
            return self._go(Phase.OFFLINE, "disconnected", [StopActive("disconnected")])
        if self.phase in (Phase.BACKOFF, Phase.FENCED, Phase.DETACHED, Phase.IDLE):
            return []  # the backoff ends by itself; rejoining then waits for contact
        return self._go(Phase.OFFLINE, "disconnected")

    def _on_Reconnected(self, event: Reconnected) -> list[Effect]:
        self.connected = True
        if self.phase is Phase.DETACHED:
            return self._go(Phase.VERIFYING, "reconnected", [ReadLock(event.session)])  # R8
        if self.phase is Phase.OFFLINE:
            return self._go(Phase.CHECKING, "reconnected", [ReadLock(event.session)])  # R8
        return []

    def _on_SessionExpired(self, event: SessionExpired) -> list[Effect]:
        self.session, self.connected = None, False  # R9
        if self.phase in LEADING:
            return self._lost("session expired")
        if self.phase in (Phase.BACKOFF, Phase.FENCED, Phase.IDLE):
            return []
        self.epoch = None
        return self._go(Phase.CONNECTING, "session expired")

    def _on_DeadlineExpired(self, event: DeadlineExpired) -> list[Effect]:
        if self.phase not in LEADING:
            return []
        self.epoch = None
        stop: list[Effect] = [StopActive("local deadline passed")]
        if self.connected and self.session is not None:
            # the driver has not said it lost contact: stop anyway, then see where we stand
            return self._go(
                Phase.CHECKING, "local deadline passed", stop + [ReadLock(self.session)]
            )
        return self._go(Phase.OFFLINE, "local deadline passed", stop)

    # --- handlers: the lock -----------------------------------------------------------------

    def _on_LockCreated(self, event: LockCreated) -> list[Effect]:
        if self.phase is not Phase.CREATING:
            return []
        self._progress()
        self.holder, self.lock_version = self.identity, event.version
        return self._go(Phase.READING, "lock created", [ReadElection(event.session)])

    def _on_LockExists(self, event: LockExists) -> list[Effect]:
        if self.phase is not Phase.CREATING:
            return []
        return self._go(Phase.CHECKING, "lock exists", [ReadLock(event.session)])  # R2

    def _on_LockOwned(self, event: LockOwned) -> list[Effect]:
        self.holder = event.holder
        if self.phase is Phase.VERIFYING:
            if event.ours:
                self._progress()
                return self._go(Phase.ACTIVE, "lock still ours")
            return self._lost("lock taken over", release=False)
        if self.phase is Phase.ACTIVE:  # LockChanged re-check
            return [] if event.ours else self._lost("lock taken over", release=False)
        if self.phase not in (Phase.CHECKING, Phase.STANDBY):
            return []
        self._progress()
        if event.ours:  # R2: our retried create had worked
            self.lock_version = event.version
            return self._go(Phase.READING, "lock is ours", [ReadElection(event.session)])
        return self._go(Phase.STANDBY, "lock held by another")  # R3

    def _on_LockMissing(self, event: LockMissing) -> list[Effect]:
        if self.phase in (Phase.VERIFYING, Phase.ACTIVE):
            return self._lost("lock gone", release=False)
        if self.phase in (Phase.CHECKING, Phase.STANDBY):
            return self._go(Phase.CREATING, "lock missing", [CreateLock(event.session)])
        return []

    def _on_LockDeleted(self, event: LockDeleted) -> list[Effect]:
        if self.phase is Phase.STANDBY:
            return self._go(Phase.PROBING, "lock deleted", [ReadElection(event.session)])  # R12
        if self.phase is Phase.CHECKING:
            # the ReadLock in flight may answer "held by another" from before this deletion:
            # no event would ever wake that STANDBY, so create now; the stale answer is ignored
            return self._go(Phase.CREATING, "lock deleted", [CreateLock(event.session)])
        if self.phase in LEADING:
            return self._lost("lock deleted", release=False)  # R6
        if self.phase in (Phase.READING, Phase.FENCING, Phase.COMMITTING, Phase.CLAIMING):
            return self._fail("lock deleted while taking over", release=False)
        return []

    def _on_LockChanged(self, event: LockChanged) -> list[Effect]:
        if self.phase in (Phase.STANDBY, Phase.ACTIVE):
            return [ReadLock(event.session)]
        return []

    # --- handlers: taking over --------------------------------------------------------------

    def _on_ElectionRead(self, event: ElectionRead) -> list[Effect]:
        if self.phase is Phase.PROBING:
            return self._probed(event)
        if self.phase is not Phase.READING:
            return []
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
                    [FenceOldActive(event.session, event.breadcrumb)],
                )
        return self._commit(event)

    def _probed(self, read: ElectionRead) -> list[Effect]:
        """R12: claim in one transaction if nothing needs fencing, else the usual way."""
        if read.breadcrumb is not None:
            crumb = decode_breadcrumb(read.breadcrumb)
            if crumb is None or crumb.identity != self.identity:
                return self._go(Phase.CREATING, "lock deleted", [CreateLock(read.session)])
        claim = ClaimActive(
            read.session, _next_epoch(read), read.epoch_version, read.breadcrumb_version
        )
        return self._go(Phase.CLAIMING, "claiming the lock", [claim])

    def _on_Claimed(self, event: Claimed) -> list[Effect]:
        if self.phase is not Phase.CLAIMING:
            return []
        self.lock_version = 0
        self.holder = self.identity
        return self._on_Committed(
            Committed(event.session, event.epoch, event.epoch_version, event.breadcrumb_version),
            claimed=True,
        )

    def _on_ClaimConflict(self, event: ClaimConflict) -> list[Effect]:
        if self.phase is not Phase.CLAIMING:
            return []
        if event.lock_exists:  # R2: someone (maybe our own retried claim) holds it: look
            return self._go(Phase.CHECKING, "lock exists", [ReadLock(event.session)])
        return self._go(Phase.CREATING, "claim raced", [CreateLock(event.session)])

    def _commit(self, read: ElectionRead) -> list[Effect]:
        effect = CommitActive(
            read.session,
            self.lock_version,
            _next_epoch(read),
            read.epoch_version,
            read.breadcrumb_version,
        )
        return self._go(Phase.COMMITTING, "committing epoch", [effect])

    def _on_FenceSucceeded(self, event: FenceSucceeded) -> list[Effect]:
        if self.phase is not Phase.FENCING or self._read is None:
            return []
        self.fence_failures = 0
        return self._commit(self._read)

    def _on_FenceFailed(self, event: FenceFailed) -> list[Effect]:
        if self.phase is not Phase.FENCING:
            return []
        self.fence_failures += 1
        return self._fail(f"fencing failed: {event.error}", release=True)

    def _on_Committed(self, event: Committed, claimed: bool = False) -> list[Effect]:
        if self.phase is not Phase.COMMITTING and not claimed:
            return []
        self._progress()
        self.epoch, self.epoch_version = event.epoch, event.epoch_version
        self.breadcrumb_version = event.breadcrumb_version
        return self._go(
            Phase.ACTIVE,
            "won the election",
            [StartActive(event.session, event.epoch, event.epoch_version)],
        )

    def _on_CommitConflict(self, event: CommitConflict) -> list[Effect]:
        if self.phase is not Phase.COMMITTING:
            return []
        if event.lock_lost:
            return self._fail("lock lost while taking over", release=False)
        self.failures += 1  # a racing writer: read again, within the retry bound
        if self.failures > self.max_retries:
            return self._fatal("epoch kept changing under the lock")
        return self._go(Phase.READING, "epoch race", [ReadElection(event.session)])

    # --- handlers: leading ------------------------------------------------------------------

    def _on_ActiveFailed(self, event: ActiveFailed) -> list[Effect]:
        if self.phase not in LEADING or event.epoch != self.epoch:
            return []
        self.active_failures += 1  # backs off longer each time; fatal past max_retries
        return self._fail(f"become_active failed: {event.error}", release=True)

    def _on_EpochChanged(self, event: EpochChanged) -> list[Effect]:
        if self.phase is not Phase.ACTIVE or self.epoch is None:
            return []
        return [VerifyEpoch(event.session, self.epoch, self.epoch_version)]

    def _on_EpochSuperseded(self, event: EpochSuperseded) -> list[Effect]:
        if self.phase not in LEADING or event.epoch != self.epoch:
            return []
        return self._lost("epoch superseded")

    # --- handlers: failures and time --------------------------------------------------------

    def _on_BackoffElapsed(self, event: BackoffElapsed) -> list[Effect]:
        if self.phase not in (Phase.BACKOFF, Phase.FENCED) or event.token != self.backoff_token:
            return []
        return self._join("backoff elapsed")

    def _on_OperationFailed(self, event: OperationFailed) -> list[Effect]:
        if self.phase in (Phase.IDLE, Phase.BACKOFF, Phase.FENCED, Phase.OFFLINE):
            return []
        error = f"{event.operation} failed: {event.error}"
        if not event.transient:
            return self._fatal(error)
        if self.phase in LEADING:
            # a failed check while leading proves nothing: the deadline and events decide
            return []
        return self._fail(error, release=True)


def _next_epoch(read: ElectionRead) -> int:
    """One above the epoch counter, and above the last active's breadcrumb: should the counter
    ever be lost (deleted from outside), fencing tokens still never go back."""
    crumb = decode_breadcrumb(read.breadcrumb) if read.breadcrumb is not None else None
    return max(read.epoch, crumb.epoch if crumb is not None else 0) + 1


def diagram() -> str:
    """The public states and their legal transitions, as a Mermaid state diagram."""
    lines = ["stateDiagram-v2", "    [*] --> neutral"]
    for old, new in sorted(LEGAL, key=lambda t: (t[0].value, t[1].value)):
        lines.append(f"    {old.value} --> {new.value}")
    for state in State:
        phases = ", ".join(p.value for p, s in PUBLIC.items() if s is state)
        lines.append(f"    note right of {state.value}: phases {phases}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(diagram(), end="")
