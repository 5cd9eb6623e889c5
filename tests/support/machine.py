"""What the machine's tests share: a queue below us, the breadcrumbs left in it, and
machines brought to a phase by its own inputs (no attribute is set by hand)."""

from __future__ import annotations

from ha.election import events as ev
from ha.election.machine import LEGAL, Machine, Phase, State
from ha.election.names import Breadcrumb, encode_breadcrumb, ticket_for

ME, OTHER, THIRD = b"me:1", b"other:2", b"third:3"
S1, S2 = 11, 22
TOKEN = 30  # our node's creation order, as Queued tells it


def node_of(ticket: str, seq: int) -> str:
    return f"{ticket}_{seq:010d}"


def crumb(identity: bytes, epoch: int | None = None) -> bytes:
    return encode_breadcrumb(Breadcrumb(identity, epoch, b"app"))


# the queue below us: the leader, and a contender between it and us
L_TICKET, M_TICKET = ticket_for(OTHER, "a"), ticket_for(THIRD, "b")
LEADER, MIDDLE = node_of(L_TICKET, 1), node_of(M_TICKET, 2)
L_CRUMB, M_CRUMB = crumb(OTHER, 10), crumb(THIRD, 20)
# breadcrumbs left by crashed leaders: another contender's, and ours from an earlier join
OLD_TICKET, MY_OLD_TICKET = ticket_for(b"zero:0", "z"), ticket_for(ME, "0")
OLD_CRUMB, MY_OLD_CRUMB = crumb(b"zero:0", 5), crumb(ME, 7)


def kinds(effects: list[ev.Effect]) -> list[str]:
    return [type(e).__name__ for e in effects]


def mine(mach: Machine) -> str:
    """Our node's name for the machine's current ticket (seq 3: behind LEADER and MIDDLE)."""
    assert mach.ticket is not None
    return node_of(mach.ticket, 3)


def joined(*, hold: bool = False, max_retries: int = 5) -> Machine:
    mach = Machine(ME, hold_on_disconnect=hold, max_retries=max_retries)
    assert mach.handle(ev.Connected(S1)) == []
    assert mach.handle(ev.Joined()) == [ev.Join(S1, ticket_for(ME, "1"))]
    assert mach.ticket == ticket_for(ME, "1") == "me%3A1_1"
    return mach


def queued(mach: Machine, *below: str, holder: bytes = OTHER) -> list[ev.Effect]:
    return mach.handle(ev.Queued(S1, mine(mach), TOKEN, below, holder))


def won(mach: Machine, cause: str, *clear: str) -> list[ev.Effect]:
    """What taking over returns (call it before the input): act first, tell (P14), then
    clear what was fenced and announce it to the contender behind (P4)."""
    effects: list[ev.Effect] = [
        ev.StartActive(S1, TOKEN, mine(mach)),
        ev.Report(mach.reported, State.ACTIVE, TOKEN, cause),
    ]
    if clear:
        effects.append(ev.ClearCrumbs(S1, mine(mach), clear))
    return [*effects, ev.Announce(S1, mine(mach))]


def first(mach: Machine) -> Machine:
    """``mach`` first in the queue: reading the breadcrumbs below it."""
    assert queued(mach, holder=ME) == [ev.ReadCrumbs(S1, mach.ticket or "", TOKEN)]
    assert mach.phase is Phase.READING and mach.state is State.NEUTRAL
    return mach


def active(*, hold: bool = False, max_retries: int = 5) -> Machine:
    mach = first(joined(hold=hold, max_retries=max_retries))
    expected = won(mach, "won the election")
    assert mach.handle(ev.CrumbsRead(S1, ())) == expected
    assert mach.state is State.ACTIVE and mach.epoch == TOKEN
    return mach


def standby(crumb: bytes | None = L_CRUMB, *, strays: bool = False) -> Machine:
    """Behind the leader, its node and breadcrumb watched."""
    mach = joined()
    assert queued(mach, LEADER) == [ev.Watch(S1, LEADER, True)]
    assert mach.phase is Phase.WATCHING and mach.state is State.NEUTRAL  # not told yet
    effects = mach.handle(ev.Watching(S1, LEADER, crumb, strays))
    assert effects == [
        ev.Report(State.NEUTRAL, State.STANDBY, None, "behind other:2"),
        ev.NotifyStandby(OTHER),
    ]
    assert mach.phase is Phase.STANDBY
    return mach


def check_effects(mach: Machine, before: State, effects: list[ev.Effect]) -> State:
    """Reports chain and are legal, a report away from ACTIVE follows a StopActive (P14), a
    report to ACTIVE follows a StartActive, Finish is last, effects name the live session."""
    state = before
    stopped = started = False
    for i, effect in enumerate(effects):
        if isinstance(effect, ev.StopActive):
            stopped = True
        if isinstance(effect, ev.StartActive):
            started = True
        if isinstance(effect, ev.Report):
            assert effect.old is state, effects
            assert (effect.old, effect.new) in LEGAL, effect
            if effect.old is State.ACTIVE:
                assert stopped, f"left ACTIVE without stopping first: {effects}"
            if effect.new is State.ACTIVE:
                assert started and effect.epoch == mach.epoch is not None, effects
            state = effect.new
        if isinstance(effect, ev.Finish):
            assert i == len(effects) - 1
        session = getattr(effect, "session", None)
        if session is not None:
            assert session == mach.session, effect
    assert state is mach.state, (state, mach.phase)
    return state
