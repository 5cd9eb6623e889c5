"""What the election machine reads and what it asks for: inputs are facts, effects are commands.

Inputs name something that happened, in the past tense (``Queued``, ``SessionExpired``): the
runner (``elector.py``) makes them from driver events, from the answers of ``nodes.py`` and from
its timers. Effects name what to do next (``Join``, ``FenceOldActive``): the runner does them in
order and feeds each outcome back as an input. Every input that concerns a session carries its
id, so the machine can drop what a dead session says (rule P1 of ``machine.py``). Nodes are
named as in the queue (``TICKET_SEQ``, ``nodes.py``). All are frozen, slotted dataclasses:
plain values, compared by content in tests.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass

from .state import State

__all__ = (
    "ActiveFailed",
    "Announce",
    "BackoffElapsed",
    "ClearCrumbs",
    "Connected",
    "CrumbDeleted",
    "CrumbsRead",
    "DeadlineExpired",
    "Disconnected",
    "DropCrumb",
    "EFFECT_TYPES",
    "Effect",
    "FenceFailed",
    "FenceOldActive",
    "FenceSucceeded",
    "Finish",
    "INPUT_TYPES",
    "Input",
    "Join",
    "Joined",
    "Leave",
    "Left",
    "ListQueue",
    "NodeChanged",
    "NodeDeleted",
    "NotQueued",
    "NotifyFatal",
    "NotifyNeutral",
    "NotifyStandby",
    "OperationFailed",
    "PauseChanged",
    "PredecessorGone",
    "Queued",
    "QuitRequested",
    "ReadCrumbs",
    "Reconnected",
    "Report",
    "Resign",
    "SessionExpired",
    "StartActive",
    "StopActive",
    "Superseded",
    "WaitBackoff",
    "Watch",
    "Watching",
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
    """The backend ended the session: its ephemeral nodes (our queue node) are gone."""

    session: int


@dataclass(frozen=True, slots=True)
class Queued:
    """Join's or ListQueue's answer: our node, its token, the nodes below it (lowest first)
    and the identity of the lowest node in the queue (the leader, maybe us). ``strays``:
    breadcrumbs may lie about that no live node owns (False only when the breadcrumbs were
    listed beside the queue and every one belongs to a node in it). ``paused``: the
    election's pause node was there (read in the same round trip). ``behind``: nodes above
    ours were listed (True when not known)."""

    session: int
    node: str
    token: int
    below: tuple[str, ...]
    holder: bytes
    strays: bool = True
    paused: bool = False
    behind: bool = True


@dataclass(frozen=True, slots=True)
class NotQueued:
    """ListQueue's answer: no node of ours is in the queue."""

    session: int


@dataclass(frozen=True, slots=True)
class Watching:
    """Watch's answer: the node below ours lives and is watched (with its breadcrumb).

    For the leader's node: ``crumb`` is its breadcrumb as a fence hook gets it (None: it has
    none), and ``strays`` tells whether other breadcrumbs lie about with no live node.
    ``paused``: the election's pause node was there (read in the same round trip)."""

    session: int
    node: str
    crumb: bytes | None
    strays: bool
    paused: bool = False


@dataclass(frozen=True, slots=True)
class PredecessorGone:
    """Watch's answer: the node below ours was gone already."""

    session: int
    node: str


@dataclass(frozen=True, slots=True)
class NodeDeleted:
    """A watch: a queue node was deleted (the one below ours, or our own)."""

    session: int
    node: str


@dataclass(frozen=True, slots=True)
class NodeChanged:
    """A watch: a queue node's data was written (its owner announced that it leads)."""

    session: int
    node: str


@dataclass(frozen=True, slots=True)
class CrumbDeleted:
    """A watch: the breadcrumb of ``ticket`` was deleted."""

    session: int
    ticket: str


@dataclass(frozen=True, slots=True)
class Left:
    """Leave's answer: the node of ``ticket`` is gone from the queue (or never was in it)."""

    session: int
    ticket: str


@dataclass(frozen=True, slots=True)
class CrumbsRead:
    """ReadCrumbs' answer: the breadcrumbs left below our node, oldest first, each as
    (ticket, what the fence hook gets); ``paused``: the pause node was there."""

    session: int
    crumbs: tuple[tuple[str, bytes], ...]
    paused: bool = False


@dataclass(frozen=True, slots=True)
class PauseChanged:
    """A watch: the election's pause node was created, written or deleted (``ha pause``)."""

    session: int


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
class ActiveFailed:
    """``become_active`` raised or timed out: a failure to become active (Hadoop), after the
    work ran ``ran`` seconds."""

    session: int
    epoch: int
    error: str
    ran: float = 0.0


@dataclass(frozen=True, slots=True)
class Superseded:
    """A fenced write was refused: the lease of ``epoch`` no longer holds."""

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
    | Queued
    | NotQueued
    | Watching
    | PredecessorGone
    | NodeDeleted
    | NodeChanged
    | CrumbDeleted
    | Left
    | CrumbsRead
    | PauseChanged
    | FenceSucceeded
    | FenceFailed
    | ActiveFailed
    | Superseded
    | DeadlineExpired
    | BackoffElapsed
    | OperationFailed
)

INPUT_TYPES: tuple[type, ...] = typing.get_args(Input)

# --- effects: commands ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Join:
    """Create our node and breadcrumb under ``ticket`` in one transaction, then list the queue;
    answer Queued (or OperationFailed: the outcome may be unknown, ListQueue finds out)."""

    session: int
    ticket: str


@dataclass(frozen=True, slots=True)
class ListQueue:
    """List the queue and find our node by ``ticket``; answer Queued or NotQueued.
    ``token``: our node's, when already known (None: read it)."""

    session: int
    ticket: str
    token: int | None


@dataclass(frozen=True, slots=True)
class Watch:
    """Watch the node just below ours (``first``: it is the leader's, so its breadcrumb too);
    answer Watching or PredecessorGone."""

    session: int
    node: str
    first: bool


@dataclass(frozen=True, slots=True)
class ReadCrumbs:
    """Read the breadcrumbs left below our node; answer CrumbsRead."""

    session: int
    ticket: str
    token: int


@dataclass(frozen=True, slots=True)
class FenceOldActive:
    """Hand an old leader's breadcrumb to the contender's fence hook."""

    session: int
    breadcrumb: bytes


@dataclass(frozen=True, slots=True)
class StartActive:
    """Open the leadership scope: run ``become_active`` with a lease of ``epoch``, fenced by
    our node."""

    session: int
    epoch: int
    node: str


@dataclass(frozen=True, slots=True)
class ClearCrumbs:
    """Delete the breadcrumbs of ``tickets`` while our node lives (best effort, no answer)."""

    session: int
    node: str
    tickets: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Announce:
    """Write our node's data again (best effort, no answer): the contender just behind us,
    which may not know we lead, looks again and watches us as the leader. ``write`` False:
    nobody can be behind us without knowing (P4); only the history is recorded."""

    session: int
    node: str
    write: bool = True


@dataclass(frozen=True, slots=True)
class DropCrumb:
    """Delete the breadcrumb of a contender that never led (best effort, no answer)."""

    session: int
    ticket: str


@dataclass(frozen=True, slots=True)
class StopActive:
    """Cancel the leadership scope and wait for the work to finish."""

    cause: str


@dataclass(frozen=True, slots=True)
class Resign:
    """A graceful exit: delete our breadcrumb, then our node, in one transaction (the
    breadcrumb stays if the node is gone). Sent once there is contact, again if it failed."""

    session: int
    ticket: str
    node: str


@dataclass(frozen=True, slots=True)
class Leave:
    """Delete our node (found by ticket if ``node`` is None), and our breadcrumb unless
    ``keep_crumb``; answer Left (nothing if it failed: the machine sends it again)."""

    session: int
    ticket: str
    node: str | None
    keep_crumb: bool


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
    """Arm the rejoin timer: the delay grows with ``attempt``; BackoffElapsed answers.
    ``fencing``: after a refused fence, on the fence backoff (``attempt``: refusals in a row)."""

    attempt: int
    token: int
    fencing: bool = False


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
    Join
    | ListQueue
    | Watch
    | ReadCrumbs
    | FenceOldActive
    | StartActive
    | ClearCrumbs
    | Announce
    | DropCrumb
    | StopActive
    | Resign
    | Leave
    | NotifyStandby
    | NotifyNeutral
    | NotifyFatal
    | WaitBackoff
    | Report
    | Finish
)

EFFECT_TYPES: tuple[type, ...] = typing.get_args(Effect)
