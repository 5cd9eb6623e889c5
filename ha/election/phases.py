"""The machine's phases, the public states they show as, and its table (``HANDLED``).

``Phase`` is where the machine is, ``PUBLIC`` maps it to the ``State`` a
contender is told (but a ``HELD`` phase shows the state it was entered in), ``LEGAL`` lists the
public changes allowed. ``HANDLED`` declares, for every
input, the phases that act on it; ``Machine.handle`` looks the pair up before any handler runs, and an
input outside the table changes nothing. That is the machine's answer to stale and irrelevant
input, in one place: the answer to an effect of a phase already left, a watch that fires after
we moved on, a duplicate, a timer of an older backoff. Connection facts are recorded in every
live phase; DONE and FAILED act on nothing. Inside the table a handler may still find nothing
to do (a node that is not the one watched, an older backoff's token). ``MOVES`` declares where
each input may take each of those phases. ``python -m ha.election.diagram`` draws the phases
from these tables.
"""

from __future__ import annotations

import enum

from . import events as ev
from .state import State

__all__ = (
    "HANDLED",
    "HELD",
    "LEADING",
    "LEGAL",
    "LIVE",
    "MOVES",
    "PUBLIC",
    "QUEUED",
    "WAITING",
    "Phase",
    "State",
)


class Phase(enum.Enum):
    """Where the machine is; several phases show as one public State."""

    IDLE = "idle"  # not joined
    CONNECTING = "connecting"  # joined, waiting for a session
    JOINING = "joining"  # Join in flight
    LISTING = "listing"  # ListQueue in flight (after a lost reply, a reconnect, a deadline)
    WATCHING = "watching"  # Watch in flight, not yet standby
    STANDBY = "standby"  # behind others, watching the node below ours
    REQUEUING = "requeuing"  # standby whose predecessor left: ListQueue or Watch in flight
    READING = "reading"  # first in the queue: ReadCrumbs in flight (P7)
    FENCING = "fencing"  # FenceOldActive in flight
    PAUSED = "paused"  # first in the queue, the election paused: takes no lead until resumed
    ACTIVE = "active"
    DETACHED = "detached"  # active, contact lost, holding on (hold_on_disconnect)
    VERIFYING = "verifying"  # active, reconnected, listing the queue
    OFFLINE = "offline"  # contact lost, not active: wait for it to come back
    BACKOFF = "backoff"  # waiting before joining again after a failure
    FENCED = "fenced"  # lost authority while active; waiting before joining again
    DONE = "done"  # quit
    FAILED = "failed"  # fatal error


# every phase shows as NEUTRAL but these
PUBLIC: dict[Phase, State] = {phase: State.NEUTRAL for phase in Phase} | {
    Phase.STANDBY: State.STANDBY,
    Phase.REQUEUING: State.STANDBY,
    Phase.ACTIVE: State.ACTIVE,
    Phase.DETACHED: State.ACTIVE,
    Phase.VERIFYING: State.ACTIVE,
    Phase.FENCED: State.FENCED,
}

LEADING = frozenset({Phase.ACTIVE, Phase.DETACHED, Phase.VERIFYING})

# Taking over: these show the state they were entered in (NEUTRAL for a newcomer first in the
# queue, STANDBY for a standby whose leader went), as Hadoop's elector tells a winning standby
# nothing until it is active: a notification is a change the contender must act on, and
# enter_neutral means "stop acting as active" (issue 16). PUBLIC gives NEUTRAL for them.
# PAUSED too: a standby whose leader went during a pause is told nothing, and takes no lead.
HELD = frozenset({Phase.READING, Phase.FENCING, Phase.PAUSED})

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
# phases with a node of ours in the queue (or a join that may have made one)
QUEUED = frozenset(
    {
        Phase.JOINING,
        Phase.LISTING,
        Phase.WATCHING,
        Phase.STANDBY,
        Phase.REQUEUING,
        Phase.READING,
        Phase.FENCING,
        Phase.PAUSED,
    }
)
WAITING = frozenset({Phase.WATCHING, Phase.STANDBY, Phase.REQUEUING})

HANDLED: dict[type[ev.Input], frozenset[Phase]] = {
    # lifecycle and connection: recorded in every live phase
    ev.Joined: frozenset({Phase.IDLE}),
    ev.QuitRequested: LIVE,
    ev.Connected: LIVE,
    ev.Disconnected: LIVE,
    ev.Reconnected: LIVE,
    ev.SessionExpired: LIVE,
    ev.DeadlineExpired: LEADING,
    # the queue (P2, P4, P5, P11)
    ev.Queued: frozenset({Phase.JOINING, Phase.LISTING, Phase.REQUEUING, Phase.VERIFYING}),
    ev.NotQueued: frozenset({Phase.LISTING, Phase.REQUEUING, Phase.VERIFYING}),
    ev.Watching: frozenset({Phase.WATCHING, Phase.REQUEUING}),
    ev.PredecessorGone: frozenset({Phase.WATCHING, Phase.REQUEUING}),
    ev.NodeDeleted: QUEUED | LEADING,
    ev.NodeChanged: frozenset({Phase.STANDBY}),
    ev.CrumbDeleted: WAITING,
    ev.Left: LIVE,
    # taking over (P6, P7)
    ev.CrumbsRead: frozenset({Phase.READING}),
    # the pause (P16): a lead not taken yet waits while paused; the active is unaffected
    ev.PauseChanged: LIVE,
    ev.FenceSucceeded: frozenset({Phase.FENCING}),
    ev.FenceFailed: frozenset({Phase.FENCING}),
    # leading (P9)
    ev.ActiveFailed: LEADING,
    ev.Superseded: LEADING,
    # failures and time (P8): a failure while waiting anyway, or while offline, is no news
    ev.BackoffElapsed: frozenset({Phase.BACKOFF, Phase.FENCED}),
    ev.OperationFailed: LIVE - {Phase.IDLE, Phase.BACKOFF, Phase.FENCED, Phase.OFFLINE},
}


# --- the moves: where each input may take each phase that acts on it ---------------------------
# As h11's EVENT_TRIGGERED_TRANSITIONS: the destinations are data, so the diagram can be drawn
# without running the machine. A phase that acts on an input without being named here stays
# where it is (a re-check, a recorded disconnection). The table test holds the handlers to it:
# every move they make is listed here, and every move listed here is made in some situation.

_LOST = frozenset({Phase.FENCED, Phase.FAILED})  # P9 (fatal past max_retries)
_FAILS = frozenset({Phase.BACKOFF, Phase.FAILED})  # P8
_JOIN = frozenset({Phase.CONNECTING, Phase.JOINING, Phase.OFFLINE})  # contact first
# first in the queue: act, hold while paused, or read the breadcrumbs (and the pause) again
_WIN = frozenset({Phase.ACTIVE, Phase.PAUSED, Phase.READING})
_TAKE = _WIN | {Phase.FENCING}  # the same, with a breadcrumb to fence first (P7)


def _each(phases: frozenset[Phase], to: frozenset[Phase]) -> dict[Phase, frozenset[Phase]]:
    return dict.fromkeys(phases, to)


MOVES: dict[type[ev.Input], dict[Phase, frozenset[Phase]]] = {
    ev.Joined: {Phase.IDLE: _JOIN},
    ev.QuitRequested: _each(LIVE, frozenset({Phase.DONE})),
    ev.Connected: {
        Phase.CONNECTING: frozenset({Phase.JOINING}),
        **_each(QUEUED - {Phase.JOINING}, frozenset({Phase.JOINING})),  # a new session (P12)
        **_each(LEADING, _LOST),
        Phase.DETACHED: _LOST | {Phase.VERIFYING},
        Phase.OFFLINE: frozenset({Phase.JOINING, Phase.LISTING}),
    },
    ev.Disconnected: {
        **_each(QUEUED | {Phase.CONNECTING}, frozenset({Phase.OFFLINE})),
        Phase.ACTIVE: frozenset({Phase.DETACHED, Phase.OFFLINE}),  # P10
        Phase.VERIFYING: frozenset({Phase.DETACHED, Phase.OFFLINE}),
    },
    ev.Reconnected: {
        Phase.CONNECTING: frozenset({Phase.JOINING}),
        Phase.DETACHED: frozenset({Phase.VERIFYING}),  # P11
        Phase.OFFLINE: frozenset({Phase.JOINING, Phase.LISTING}),
    },
    ev.SessionExpired: {
        **_each(QUEUED | {Phase.OFFLINE}, frozenset({Phase.CONNECTING})),  # P12
        **_each(LEADING, _LOST),
    },
    ev.DeadlineExpired: _each(LEADING, frozenset({Phase.LISTING, Phase.OFFLINE})),  # P17
    ev.Queued: {
        Phase.JOINING: _WIN | {Phase.WATCHING},
        Phase.LISTING: _WIN | {Phase.WATCHING},
        Phase.REQUEUING: _WIN,
        Phase.VERIFYING: _LOST | {Phase.ACTIVE},
    },
    ev.NotQueued: {
        Phase.LISTING: frozenset({Phase.JOINING, Phase.OFFLINE}),
        Phase.REQUEUING: frozenset({Phase.JOINING, Phase.OFFLINE}),
        Phase.VERIFYING: _LOST,
    },
    ev.Watching: {
        Phase.WATCHING: frozenset({Phase.STANDBY, Phase.LISTING}),  # P4; P16: read again
        Phase.REQUEUING: frozenset({Phase.STANDBY}),
    },
    ev.PredecessorGone: {  # P5
        Phase.WATCHING: _TAKE | {Phase.REQUEUING},
        Phase.REQUEUING: _TAKE,
    },
    ev.NodeDeleted: {
        **_each(QUEUED - WAITING, _FAILS),  # our own node, deleted from outside
        Phase.WATCHING: _FAILS | _TAKE | {Phase.REQUEUING},
        Phase.STANDBY: _FAILS | _TAKE | {Phase.REQUEUING},
        Phase.REQUEUING: _FAILS | _TAKE,
        **_each(LEADING, _LOST),
    },
    ev.NodeChanged: {Phase.STANDBY: frozenset({Phase.REQUEUING})},  # P4
    ev.CrumbDeleted: _each(WAITING, _WIN),  # P6
    ev.Left: {},
    ev.CrumbsRead: {Phase.READING: frozenset({Phase.ACTIVE, Phase.FENCING, Phase.PAUSED})},
    ev.PauseChanged: {
        Phase.STANDBY: frozenset({Phase.REQUEUING}),
        Phase.PAUSED: frozenset({Phase.READING}),
    },
    ev.FenceSucceeded: {Phase.FENCING: _WIN},
    ev.FenceFailed: {Phase.FENCING: frozenset({Phase.BACKOFF})},  # never fatal (P8)
    ev.ActiveFailed: _each(LEADING, _FAILS),
    ev.Superseded: _each(LEADING, _LOST),
    ev.BackoffElapsed: _each(frozenset({Phase.BACKOFF, Phase.FENCED}), _JOIN),
    ev.OperationFailed: {
        **_each(HANDLED[ev.OperationFailed] - LEADING, _FAILS),
        **_each(LEADING, frozenset({Phase.FAILED})),  # only a fatal one: P8
    },
}
