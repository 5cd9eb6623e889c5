"""What the election machine reads and what it asks for: inputs are facts, effects are commands.

Inputs name something that happened, in the past tense (``LockCreated``, ``SessionExpired``):
the runner (``elector.py``) makes them from driver events, from the answers of ``nodes.py`` and
from its timers. Effects name what to do next (``CreateLock``, ``FenceOldActive``): the runner
does them in order and feeds each outcome back as an input. Every input that concerns a session
carries its id, so the machine can drop what a dead session says (rule R1 of ``machine.py``).
All are frozen, slotted dataclasses: plain values, compared by content in tests.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass

if typing.TYPE_CHECKING:
    from .machine import State

__all__ = (
    "ActiveFailed",
    "BackoffElapsed",
    "ClaimActive",
    "ClaimConflict",
    "Claimed",
    "CommitActive",
    "CommitConflict",
    "Committed",
    "Connected",
    "CreateLock",
    "DeadlineExpired",
    "DeleteBreadcrumb",
    "Disconnected",
    "EFFECT_TYPES",
    "Effect",
    "ElectionRead",
    "EpochChanged",
    "EpochSuperseded",
    "FenceFailed",
    "FenceOldActive",
    "FenceSucceeded",
    "Finish",
    "INPUT_TYPES",
    "Input",
    "Joined",
    "LockChanged",
    "LockCreated",
    "LockDeleted",
    "LockExists",
    "LockMissing",
    "LockOwned",
    "NotifyFatal",
    "NotifyNeutral",
    "NotifyStandby",
    "OperationFailed",
    "QuitRequested",
    "ReadElection",
    "ReadLock",
    "Reconnected",
    "ReleaseLock",
    "Report",
    "SessionExpired",
    "StartActive",
    "StopActive",
    "VerifyEpoch",
    "WaitBackoff",
)


# --- inputs: facts, past tense -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Joined:
    """``Elector.run`` started: take part."""


@dataclass(frozen=True, slots=True)
class QuitRequested:
    """``Elector.quit``, or ``run`` cancelled from outside (``need_fence=True``)."""

    need_fence: bool = False


@dataclass(frozen=True, slots=True)
class Connected:
    """The driver opened a session (a new one, or the one we already knew)."""

    session: int


@dataclass(frozen=True, slots=True)
class Disconnected:
    """Contact with the backend was lost; the session may still live."""

    session: int


@dataclass(frozen=True, slots=True)
class Reconnected:
    """Contact came back within the same session."""

    session: int


@dataclass(frozen=True, slots=True)
class SessionExpired:
    """The backend ended the session: its ephemeral nodes (our lock) are gone."""

    session: int


@dataclass(frozen=True, slots=True)
class LockCreated:
    """CreateLock's answer: the lock node is ours."""

    session: int
    version: int


@dataclass(frozen=True, slots=True)
class LockExists:
    """CreateLock's answer: a lock node exists (maybe ours, from a retried create)."""

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
    """ReadLock's answer: there is no lock node."""

    session: int


@dataclass(frozen=True, slots=True)
class LockDeleted:
    """A watch: the lock node was deleted."""

    session: int


@dataclass(frozen=True, slots=True)
class LockChanged:
    """A watch: the lock node's data changed."""

    session: int


@dataclass(frozen=True, slots=True)
class ElectionRead:
    """ReadElection's answer: the breadcrumb (raw) and the epoch, with their versions."""

    session: int
    breadcrumb: bytes | None
    breadcrumb_version: int | None
    epoch: int
    epoch_version: int | None  # None: the epoch node does not exist yet


@dataclass(frozen=True, slots=True)
class FenceSucceeded:
    """The contender's ``fence_old_active`` returned (or there is no such hook)."""

    session: int


@dataclass(frozen=True, slots=True)
class FenceFailed:
    """The contender's ``fence_old_active`` raised or timed out."""

    session: int
    error: str


@dataclass(frozen=True, slots=True)
class Committed:
    """CommitActive's transaction applied: the new epoch and breadcrumb are written."""

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
    """A watch: the epoch node changed (maybe a new active, maybe a foreign write)."""

    session: int


@dataclass(frozen=True, slots=True)
class EpochSuperseded:
    """VerifyEpoch, or a refused fenced write: ``epoch`` is no longer current."""

    session: int
    epoch: int


@dataclass(frozen=True, slots=True)
class DeadlineExpired:
    """The runner's local deadline since the last contact ran out while leading."""

    session: int


@dataclass(frozen=True, slots=True)
class BackoffElapsed:
    """The timer of WaitBackoff ``token`` ran out."""

    token: int


@dataclass(frozen=True, slots=True)
class OperationFailed:
    """A backend call failed (``transient``: may work if tried again)."""

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
    """Create the ephemeral lock node naming us; answer LockCreated or LockExists."""

    session: int


@dataclass(frozen=True, slots=True)
class ReadLock:
    """Read the lock's owner; answer LockOwned or LockMissing."""

    session: int


@dataclass(frozen=True, slots=True)
class ReadElection:
    """Read breadcrumb and epoch together; answer ElectionRead."""

    session: int


@dataclass(frozen=True, slots=True)
class FenceOldActive:
    """Hand the old active's breadcrumb to the contender's fence hook."""

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
    """Open the leadership scope: run ``become_active`` with a lease of ``epoch``."""

    session: int
    epoch: int
    epoch_version: int


@dataclass(frozen=True, slots=True)
class StopActive:
    """Cancel the leadership scope and wait for the work to finish."""

    cause: str


@dataclass(frozen=True, slots=True)
class VerifyEpoch:
    """Check that the epoch node still has our version; answer EpochSuperseded if not."""

    session: int
    epoch: int
    epoch_version: int


@dataclass(frozen=True, slots=True)
class ReleaseLock:
    """Delete the lock if our session holds it (owner-checked, best effort)."""

    session: int


@dataclass(frozen=True, slots=True)
class DeleteBreadcrumb:
    """Delete our breadcrumb (by its version) and, in the same transaction, our lock."""

    session: int
    version: int
    lock_version: int


@dataclass(frozen=True, slots=True)
class NotifyStandby:
    """Call the contender's ``become_standby``."""

    holder: bytes


@dataclass(frozen=True, slots=True)
class NotifyNeutral:
    """Call the contender's ``enter_neutral``."""


@dataclass(frozen=True, slots=True)
class NotifyFatal:
    """Call the contender's ``on_fatal_error``."""

    error: str


@dataclass(frozen=True, slots=True)
class WaitBackoff:
    """Arm the rejoin timer: the delay grows with ``attempt``; BackoffElapsed answers."""

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
    """End ``run``: with ``error``, it raises ElectionFailed."""

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
    | WaitBackoff
    | Report
    | Finish
)

EFFECT_TYPES: tuple[type, ...] = typing.get_args(Effect)
