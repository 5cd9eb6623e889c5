"""The pure machine once it leads or loses contact: one test per rule, P9-P14 of
``machine.py`` (losing authority, contact lost, reconnect, expiry, quitting)."""

from __future__ import annotations

import pytest

from ha.election import events as ev
from ha.election.machine import Machine, Phase, State
from ha.election.names import ticket_for
from tests.support.machine import (
    L_TICKET,
    LEADER,
    ME,
    S1,
    S2,
    TOKEN,
    active,
    joined,
    kinds,
    mine,
    node_of,
    queued,
    standby,
)

# --- losing authority (P9) ---------------------------------------------------------------------


def test_our_node_deleted_while_active_stops_first_and_keeps_the_breadcrumb() -> None:
    mach = active()
    ticket, node = mach.ticket or "", mine(mach)
    effects = mach.handle(ev.NodeDeleted(S1, node))
    assert effects == [
        ev.StopActive("our node was deleted"),
        ev.Leave(S1, ticket, node, True),
        ev.Report(State.ACTIVE, State.FENCED, None, "our node was deleted"),
        ev.WaitBackoff(1, mach.backoff_token),
    ]
    assert mach.phase is Phase.FENCED and mach.epoch is None
    assert mach.handle(ev.Left(S1, ticket)) == []
    effects = mach.handle(ev.BackoffElapsed(mach.backoff_token))
    assert effects[0] == ev.Join(S1, ticket_for(ME, "2"))
    assert effects[1] == ev.Report(State.FENCED, State.NEUTRAL, None, "backoff elapsed")


def test_a_refused_fenced_write_is_fenced() -> None:
    mach = active()
    assert mach.handle(ev.Superseded(S1, TOKEN - 1)) == []  # an older lease's report
    assert mach.handle(ev.ActiveFailed(S1, TOKEN - 1, "old")) == []
    effects = mach.handle(ev.Superseded(S1, TOKEN))
    assert kinds(effects) == ["StopActive", "Leave", "Report", "WaitBackoff"]
    assert mach.state is State.FENCED


def test_session_expiry_while_active_stops_work_before_reporting_fenced() -> None:
    mach = active()
    effects = mach.handle(ev.SessionExpired(S1))
    assert effects == [
        ev.StopActive("session expired"),
        ev.Report(State.ACTIVE, State.FENCED, None, "session expired"),
        ev.WaitBackoff(1, mach.backoff_token),
    ]  # no Leave yet: no session to send it in
    ticket = next(iter(mach.unleft))
    node = mach.unleft[ticket][0]
    # P12: the next session leaves the old ticket first (in case a request of the old session
    # ran in the new one), keeping the breadcrumb of a ticket that acted
    assert mach.handle(ev.Connected(S2)) == [ev.Leave(S2, ticket, node, True)]
    mach.handle(ev.Left(S2, ticket))
    assert mach.handle(ev.BackoffElapsed(mach.backoff_token))[0] == ev.Join(S2, ticket_for(ME, "2"))


def test_a_new_session_without_word_of_the_old_one_is_an_expiry() -> None:
    mach = active()
    effects = mach.handle(ev.Connected(S2))
    assert kinds(effects) == ["StopActive", "Report", "WaitBackoff", "Leave"]  # Leave: P12
    assert mach.session == S2 and mach.state is State.FENCED


def test_our_node_deleted_while_standby_leaves_and_backs_off() -> None:
    mach = standby()
    ticket, node = mach.ticket or "", mine(mach)
    effects = mach.handle(ev.NodeDeleted(S1, node))
    assert effects[0] == ev.Leave(S1, ticket, node, False)
    assert kinds(effects) == ["Leave", "Report", "NotifyNeutral", "WaitBackoff"]


# --- contact lost (P10, P11, P12) ---------------------------------------------------------------


def test_disconnect_stops_an_active_at_once_by_default() -> None:
    mach = active()
    effects = mach.handle(ev.Disconnected(S1))
    assert kinds(effects) == ["StopActive", "Report", "NotifyNeutral"]
    assert mach.phase is Phase.OFFLINE and mach.epoch is None
    assert mach.handle(ev.Reconnected(S1)) == [ev.ListQueue(S1, mach.ticket or "", TOKEN)]
    # still first: read the breadcrumbs and act again under the same token
    assert kinds(queued(mach, holder=ME)) == ["ReadCrumbs"]
    assert mach.handle(ev.CrumbsRead(S1, ()))[0] == ev.StartActive(S1, TOKEN, mine(mach))


def test_hold_policy_keeps_leading_through_a_blip() -> None:
    mach = active(hold=True)
    assert mach.handle(ev.Disconnected(S1)) == []
    assert mach.phase is Phase.DETACHED and mach.state is State.ACTIVE
    assert mach.handle(ev.Reconnected(S1)) == [ev.ListQueue(S1, mach.ticket or "", TOKEN)]
    assert mach.phase is Phase.VERIFYING
    assert queued(mach, holder=ME) == []
    assert mach.phase is Phase.ACTIVE and mach.epoch == TOKEN


def test_hold_policy_stops_at_the_deadline() -> None:
    mach = active(hold=True)
    mach.handle(ev.Disconnected(S1))
    effects = mach.handle(ev.DeadlineExpired(S1))
    assert kinds(effects) == ["StopActive", "Report", "NotifyNeutral"]
    assert mach.phase is Phase.OFFLINE


def test_the_deadline_with_contact_stops_then_lists_the_queue() -> None:
    mach = active(hold=True)
    effects = mach.handle(ev.DeadlineExpired(S1))
    assert kinds(effects) == ["StopActive", "ListQueue", "Report", "NotifyNeutral"]
    assert mach.phase is Phase.LISTING


@pytest.mark.parametrize("answer", ["behind", "gone"])
def test_hold_policy_fenced_when_no_longer_first(answer: str) -> None:
    mach = active(hold=True)
    mach.handle(ev.Disconnected(S1))
    mach.handle(ev.Reconnected(S1))
    ticket, node = mach.ticket or "", mine(mach)
    if answer == "behind":
        effects = queued(mach, LEADER)
    else:
        effects = mach.handle(ev.NotQueued(S1))
    assert kinds(effects) == ["StopActive", "Leave", "Report", "WaitBackoff"]
    assert effects[1] == ev.Leave(S1, ticket, node, True)
    assert mach.state is State.FENCED


def test_after_a_reconnect_what_the_watches_said_is_forgotten() -> None:
    """P11: watch order holds within a connection only; a graceful exit seen before the
    blip is confirmed by reading the breadcrumbs."""
    mach = standby(strays=True)  # strays: a deleted breadcrumb is noted, not acted on
    mach.handle(ev.CrumbDeleted(S1, L_TICKET))  # graceful evidence, before the blip
    assert mach.crumb_gone
    assert kinds(mach.handle(ev.Disconnected(S1))) == ["Report", "NotifyNeutral"]
    assert mach.handle(ev.NodeDeleted(S1, LEADER)) == []  # offline: not acted on
    assert mach.handle(ev.Reconnected(S1)) == [ev.ListQueue(S1, mach.ticket or "", TOKEN)]
    assert (mach.crumb, mach.crumb_gone, mach.strays) == (None, False, True)
    # the listing still shows the leader; its deletion then comes before the watch answer
    assert queued(mach, LEADER) == [ev.Watch(S1, LEADER, True)]
    effects = mach.handle(ev.NodeDeleted(S1, LEADER))
    assert effects == [ev.ReadCrumbs(S1, mach.ticket or "", TOKEN)]


def test_a_leader_gone_during_the_blip_is_read_for() -> None:
    mach = standby(strays=True)
    mach.handle(ev.CrumbDeleted(S1, L_TICKET))
    mach.handle(ev.Disconnected(S1))
    mach.handle(ev.Reconnected(S1))
    assert kinds(queued(mach)) == ["ReadCrumbs"]


def test_session_expired_while_standby_waits_for_the_next_session() -> None:
    """P12: the node went with the session; the new session leaves its ticket again (a join
    in flight may have landed in it) and joins with a new ticket."""
    mach = standby()
    ticket, node = mach.ticket or "", mine(mach)
    effects = mach.handle(ev.SessionExpired(S1))
    assert kinds(effects) == ["Report", "NotifyNeutral"]
    assert mach.phase is Phase.CONNECTING and mach.ticket is None
    assert mach.handle(ev.Connected(S2)) == [
        ev.Leave(S2, ticket, node, False),  # never acted: its breadcrumb goes too
        ev.Join(S2, ticket_for(ME, "2")),
    ]


def test_a_join_in_flight_across_an_expiry_is_left_in_the_next_session() -> None:
    """P12: the Join of session 1 ran in session 2 (the node's name never came back)."""
    mach = joined()
    ticket = mach.ticket or ""
    mach.handle(ev.SessionExpired(S1))
    assert mach.unleft == {ticket: (None, False)}
    effects = mach.handle(ev.Connected(S2))
    assert effects == [ev.Leave(S2, ticket, None, False), ev.Join(S2, ticket_for(ME, "2"))]
    assert mach.handle(ev.Queued(S1, node_of(ticket, 3), 3, (), ME)) == []  # stale (P1)
    mach.handle(ev.Left(S2, ticket))
    assert mach.unleft == {}


def test_a_node_given_up_out_of_contact_is_left_once_contact_is_back() -> None:
    mach = active(hold=True)
    ticket, node = mach.ticket or "", mine(mach)
    mach.handle(ev.Disconnected(S1))
    effects = mach.handle(ev.ActiveFailed(S1, TOKEN, "boom"))
    assert kinds(effects) == ["StopActive", "Report", "NotifyNeutral", "WaitBackoff"]
    assert mach.unleft == {ticket: (node, True)}
    assert mach.handle(ev.BackoffElapsed(mach.backoff_token)) == []  # no contact: wait for it
    assert mach.phase is Phase.OFFLINE
    effects = mach.handle(ev.Reconnected(S1))
    # (machine.py sends the Leave twice here: once for the contact, once before the join)
    leave = ev.Leave(S1, ticket, node, True)
    assert effects[0] == leave and effects[-1] == ev.Join(S1, ticket_for(ME, "2"))
    assert set(effects[:-1]) == {leave}
    assert mach.unleft == {ticket: (node, True)}  # until its answer comes
    assert mach.handle(ev.Left(S1, ticket)) == [] and mach.unleft == {}


def test_a_node_given_up_out_of_contact_goes_with_an_expired_session() -> None:
    mach = active(hold=True)
    mach.handle(ev.Disconnected(S1))
    ticket, node = mach.ticket or "", mine(mach)
    mach.handle(ev.Superseded(S1, TOKEN))
    assert mach.unleft == {ticket: (node, True)}
    mach.handle(ev.SessionExpired(S1))
    assert mach.unleft == {ticket: (node, True)}  # it may have run in the next session
    # FENCED: the backoff decides when to join; the leave goes with the first contact
    assert mach.handle(ev.Connected(S2)) == [ev.Leave(S2, ticket, node, True)]


def test_stale_session_inputs_are_ignored() -> None:
    """P1: a late answer or watch of a dead session never moves us."""
    mach = active()
    mach.handle(ev.SessionExpired(S1))
    mach.handle(ev.Connected(S2))
    mach.handle(ev.BackoffElapsed(mach.backoff_token))
    node = node_of(mach.ticket or "", 3)
    for event in (
        ev.Queued(S1, node, 1, (), ME),
        ev.NotQueued(S1),
        ev.NodeDeleted(S1, node),
        ev.CrumbsRead(S1, ()),
        ev.OperationFailed(S1, "join", "boom", False),
        ev.Disconnected(S1),
        ev.SessionExpired(S1),
    ):
        assert mach.handle(event) == [], event
    assert mach.phase is Phase.JOINING


# --- quitting (P13, P14) -------------------------------------------------------------------------


def quit_order(effects: list[ev.Effect], leave: ev.Effect, report: ev.Report) -> None:
    """P13/P14: the work stops first; then the report and the leave (in either order: the
    report is after the stop, and our node goes only once the work has stopped); Finish last."""
    assert effects[0] == ev.StopActive("quit") and effects[-1] == ev.Finish()
    assert sorted(map(repr, effects[1:-1])) == sorted(map(repr, [leave, report]))


def test_quit_from_active_stops_then_resigns() -> None:
    mach = active()
    ticket, node = mach.ticket or "", mine(mach)
    effects = mach.handle(ev.QuitRequested())
    report = ev.Report(State.ACTIVE, State.NEUTRAL, None, "quit")
    quit_order(effects, ev.Resign(S1, ticket, node), report)
    assert mach.phase is Phase.DONE and mach.handle(ev.Joined()) == []


def test_quit_with_a_fence_keeps_the_breadcrumb() -> None:
    mach = active()
    ticket, node = mach.ticket or "", mine(mach)
    effects = mach.handle(ev.QuitRequested(need_fence=True))
    report = ev.Report(State.ACTIVE, State.NEUTRAL, None, "quit (fence requested)")
    quit_order(effects, ev.Leave(S1, ticket, node, True), report)


@pytest.mark.parametrize("need_fence", [False, True])
def test_quit_while_standby_leaves_node_and_breadcrumb(need_fence: bool) -> None:
    mach = standby()
    ticket, node = mach.ticket or "", mine(mach)
    effects = mach.handle(ev.QuitRequested(need_fence))
    assert ev.Leave(S1, ticket, node, False) in effects
    assert (
        sorted(kinds(effects)) == ["Finish", "Leave", "Report"] and kinds(effects)[-1] == "Finish"
    )


def test_quit_while_joining_leaves_by_ticket() -> None:
    mach = joined()
    ticket = mach.ticket or ""
    assert kinds(mach.handle(ev.QuitRequested())) == ["Leave", "Finish"]
    assert mach.handle(ev.Queued(S1, node_of(ticket, 3), TOKEN, (), ME)) == []  # too late


def after(*events: ev.Input, hold: bool = False) -> Machine:
    mach = active(hold=hold)
    for event in events:
        mach.handle(event)
    return mach


# where a ticket that acted may stand when the quit comes (its node still ours), and its phase
ACTED = {
    "active": (Phase.ACTIVE, lambda: after()),
    "detached": (Phase.DETACHED, lambda: after(ev.Disconnected(S1), hold=True)),
    # the term stopped on the lost contact
    "offline": (Phase.OFFLINE, lambda: after(ev.Disconnected(S1))),
    # back in contact, not first again yet
    "listing": (Phase.LISTING, lambda: after(ev.Disconnected(S1), ev.Reconnected(S1))),
    "verifying": (
        Phase.VERIFYING,
        lambda: after(ev.Disconnected(S1), ev.Reconnected(S1), hold=True),
    ),
    # the local deadline stopped the term
    "deadline": (Phase.LISTING, lambda: after(ev.DeadlineExpired(S1))),
}


@pytest.mark.parametrize(
    ("where", "need_fence", "sent"),
    [
        ("active", False, "resign"),
        ("active", True, "keep"),
        ("detached", False, "resign"),  # sent by the runner once contact is back
        ("detached", True, None),  # nothing to send out of contact: the runner leaves it
        ("offline", False, "resign"),
        ("offline", True, None),
        ("listing", False, "resign"),
        ("listing", True, "keep"),
        ("verifying", False, "resign"),
        ("deadline", False, "resign"),
    ],
)
def test_a_clean_quit_resigns_a_ticket_that_acted_wherever_it_stands(
    where: str, need_fence: bool, sent: str | None
) -> None:
    """P13 (issue 26, item 9): the breadcrumb of a term stopped on a lost contact goes with
    its node in one transaction, as from ACTIVE: nobody is fenced for a clean quit. With a
    fence asked for, it stays."""
    phase, situation = ACTED[where]
    mach = situation()
    assert mach.phase is phase and mach.acted
    ticket, node = mach.ticket or "", mine(mach)
    effects = mach.handle(ev.QuitRequested(need_fence))
    expected = {
        "resign": [ev.Resign(S1, ticket, node)],
        "keep": [ev.Leave(S1, ticket, node, True)],
        None: [],
    }[sent]
    assert [e for e in effects if isinstance(e, ev.Resign | ev.Leave)] == expected
    if "StopActive" in kinds(effects):  # the work stops before anything of ours goes
        assert kinds(effects)[0] == "StopActive"
    assert effects[-1] == ev.Finish() and mach.phase is Phase.DONE
    # a resign is the runner's to send (again); a leave is owed until answered
    assert mach.unleft == ({} if sent == "resign" else {ticket: (node, True)})


def test_quit_before_joining_just_finishes() -> None:
    assert Machine(ME).handle(ev.QuitRequested()) == [ev.Finish()]
