"""The pure machine of election protocol 2, with no event loop: one test per rule, P1-P8 of
``machine.py`` (joining, the queue, graceful handover, crash, failures and retries); P9-P14 are
in test_machine_leading.py, the table and the Hypothesis model in test_machine_table.py."""

from __future__ import annotations

import random

import pytest

from ha.election import events as ev
from ha.election.machine import Machine, Phase, State
from ha.election.names import ticket_for
from ha.election.timing import Backoff
from tests.support.machine import (
    L_CRUMB,
    L_TICKET,
    LEADER,
    M_CRUMB,
    M_TICKET,
    ME,
    MIDDLE,
    MY_OLD_CRUMB,
    MY_OLD_TICKET,
    OLD_CRUMB,
    OLD_TICKET,
    OTHER,
    S1,
    S2,
    THIRD,
    TOKEN,
    active,
    crumb,
    first,
    joined,
    kinds,
    mine,
    node_of,
    queued,
    standby,
    won,
)

# --- joining (P2, P3) ---------------------------------------------------------------------------


def test_join_before_session_waits_for_it() -> None:
    mach = Machine(ME)
    assert mach.handle(ev.Joined()) == []
    assert mach.phase is Phase.CONNECTING
    assert mach.handle(ev.Connected(S1)) == [ev.Join(S1, ticket_for(ME, "1"))]


def test_a_reconnected_before_any_session_is_taken_as_the_session() -> None:
    mach = Machine(ME)
    mach.handle(ev.Joined())
    assert mach.handle(ev.Reconnected(S1)) == [ev.Join(S1, ticket_for(ME, "1"))]


def test_first_in_an_empty_queue_reads_the_breadcrumbs_then_acts_with_its_token() -> None:
    """P3, P4: the token is the node's, fixed at join; nothing is written at takeover."""
    mach = active()
    assert mach.token == mach.epoch == TOKEN and mach.node == mine(mach)
    assert mach.holder == ME


def test_a_join_whose_reply_was_lost_is_looked_for_by_its_ticket() -> None:
    """P2: contact lost while the join was in flight: list the queue for the same ticket."""
    mach = joined()
    ticket = mach.ticket
    assert mach.handle(ev.Disconnected(S1)) == []
    assert mach.phase is Phase.OFFLINE
    assert mach.handle(ev.Reconnected(S1)) == [ev.ListQueue(S1, ticket or "", None)]
    assert mach.phase is Phase.LISTING and mach.ticket == ticket
    # it had applied: carry on from where our node stands
    assert queued(mach, LEADER) == [ev.Watch(S1, LEADER, True)]


def test_a_lost_join_that_did_not_apply_joins_again_with_a_new_ticket() -> None:
    mach = joined()
    old = mach.ticket
    mach.handle(ev.Disconnected(S1))
    mach.handle(ev.Reconnected(S1))
    [join] = mach.handle(ev.NotQueued(S1))
    assert join == ev.Join(S1, ticket_for(ME, "2")) and join.ticket != old
    assert mach.phase is Phase.JOINING


def test_a_failed_join_leaves_by_ticket_and_backs_off() -> None:
    """The outcome of a failed join is unknown: its node, if any, is found by ticket."""
    mach = joined()
    ticket = mach.ticket or ""
    effects = mach.handle(ev.OperationFailed(S1, "join", "timed out", True))
    assert effects == [ev.Leave(S1, ticket, None, False), ev.WaitBackoff(1, mach.backoff_token)]
    assert mach.phase is Phase.BACKOFF and mach.ticket is None
    assert mach.handle(ev.Left(S1, ticket)) == []
    assert mach.handle(ev.BackoffElapsed(mach.backoff_token)) == [ev.Join(S1, ticket_for(ME, "2"))]


def test_a_leave_not_answered_is_sent_again_before_the_next_join() -> None:
    """Found by the cluster property test: a Leave that timed out (a frozen backend) left our
    old node first in the queue, in our own live session, and we queued behind it forever."""
    mach = joined()
    ticket = mach.ticket or ""
    mach.handle(ev.OperationFailed(S1, "join", "timed out", True))
    leave = ev.Leave(S1, ticket, None, False)
    assert mach.handle(ev.BackoffElapsed(mach.backoff_token)) == [
        leave,
        ev.Join(S1, ticket_for(ME, "2")),
    ]
    # the listing still shows it ahead of us: leave it again
    effects = mach.handle(
        ev.Queued(S1, ticket_for(ME, "2") + "_0000000009", 9, (f"{ticket}_0000000003",), ME)
    )
    assert effects[0] == leave
    mach.handle(ev.Left(S1, ticket))
    assert mach.unleft == {}


def test_a_leave_is_sent_again_before_every_join_until_its_own_answer_comes() -> None:
    """Only Left of that ticket, in our session, ends the repeats: another ticket's answer or a
    dead session's says nothing about our node."""
    mach = joined()
    ticket = mach.ticket or ""
    leave = ev.Leave(S1, ticket, None, False)
    mach.handle(ev.OperationFailed(S1, "join", "timed out", True))
    assert mach.handle(ev.BackoffElapsed(mach.backoff_token))[0] == leave
    for answer in (ev.Left(S1, L_TICKET), ev.Left(S2, ticket), ev.Left(S1, mach.ticket or "")):
        assert mach.handle(answer) == []
        assert mach.unleft == {ticket: (None, False)}
    # the second join's reply lost, and it had not applied: join again, leaving first
    mach.handle(ev.Disconnected(S1))
    assert kinds(mach.handle(ev.Reconnected(S1))) == ["Leave", "ListQueue"]
    assert mach.handle(ev.NotQueued(S1)) == [leave, ev.Join(S1, ticket_for(ME, "3"))]
    # listed without the old node below ours: nothing to leave there
    assert queued(mach, LEADER) == [ev.Watch(S1, LEADER, True)]
    assert mach.handle(ev.Left(S1, ticket)) == [] and mach.unleft == {}
    mach.handle(ev.Disconnected(S1))
    assert kinds(mach.handle(ev.Reconnected(S1))) == ["ListQueue"]
    assert mach.handle(ev.NotQueued(S1)) == [ev.Join(S1, ticket_for(ME, "4"))]


def test_a_failed_join_not_found_by_its_leave_is_left_if_it_lands_before_the_next() -> None:
    """P2: the backend applied the join after the Leave looked for it (etcd commits a proposal
    held on its way to the leader once the link is back): the next join's listing shows the
    old node ahead of ours; it is left. Forgotten, it stood first in our own live session."""
    mach = joined()
    ticket = mach.ticket or ""
    mach.handle(ev.OperationFailed(S1, "join", "timed out", True))
    assert mach.handle(ev.Left(S1, ticket)) == [] and mach.unleft == {}  # not found
    assert mach.handle(ev.BackoffElapsed(mach.backoff_token)) == [ev.Join(S1, ticket_for(ME, "2"))]
    ghost = f"{ticket}_0000000002"
    effects = queued(mach, LEADER, ghost)
    assert effects == [ev.Leave(S1, ticket, ghost, False), ev.Watch(S1, ghost, False)]
    assert mach.handle(ev.Left(S1, ticket)) == [] and mach.unleft == {} and mach.landing == ()


def test_a_lost_join_listed_as_absent_is_left_if_it_lands_before_the_next() -> None:
    """P2: the same after a reconnect, whose listing did not find the join yet."""
    mach = joined()
    ticket = mach.ticket or ""
    mach.handle(ev.Disconnected(S1))
    mach.handle(ev.Reconnected(S1))
    assert mach.handle(ev.NotQueued(S1)) == [ev.Join(S1, ticket_for(ME, "2"))]
    ghost = f"{ticket}_0000000002"
    assert queued(mach, ghost, holder=ME) == [
        ev.Leave(S1, ticket, ghost, False),
        ev.Watch(S1, ghost, True),
    ]


def test_a_join_given_up_that_the_next_listing_does_not_show_is_forgotten() -> None:
    """One lands before the next join or never (it pins the queue's sequence): a listing of
    the next join without it settles it, and later listings send nothing for it."""
    mach = joined()
    ticket = mach.ticket or ""
    mach.handle(ev.OperationFailed(S1, "join", "timed out", True))
    mach.handle(ev.Left(S1, ticket))
    mach.handle(ev.BackoffElapsed(mach.backoff_token))
    assert queued(mach, LEADER) == [ev.Watch(S1, LEADER, True)]
    assert mach.landing == () and mach.unleft == {}


def test_a_quit_looks_once_more_for_a_join_given_up_unseen() -> None:
    """P2: no next join will settle it, so the quit owes it a Leave by ticket (then the
    release after the quit keeps looking): ``ha run`` rejoins on the same session."""
    mach = joined()
    ticket = mach.ticket or ""
    mach.handle(ev.OperationFailed(S1, "join", "timed out", True))
    mach.handle(ev.Left(S1, ticket))  # not found: it may still land
    effects = mach.handle(ev.QuitRequested())
    assert ev.Leave(S1, ticket, None, False) in effects
    assert mach.landing == () and mach.unleft[ticket] == (None, False)


def test_a_quit_before_the_next_joins_answer_leaves_the_one_given_up_too() -> None:
    """P2: the next join applied, the one given up landed just before it, and the quit comes
    before the join's answer: both are looked for by ticket."""
    mach = joined()
    ticket = mach.ticket or ""
    mach.handle(ev.OperationFailed(S1, "join", "timed out", True))
    mach.handle(ev.Left(S1, ticket))
    assert mach.handle(ev.BackoffElapsed(mach.backoff_token))[-1] == ev.Join(
        S1, ticket_for(ME, "2")
    )
    effects = mach.handle(ev.QuitRequested())
    leaves = [e for e in effects if isinstance(e, ev.Leave)]
    assert {e.ticket for e in leaves} == {ticket, ticket_for(ME, "2")}


def test_a_fatal_error_looks_once_more_for_every_join_given_up_unseen() -> None:
    mach = joined(max_retries=1)
    ticket = mach.ticket or ""
    mach.handle(ev.OperationFailed(S1, "join", "timed out", True))
    mach.handle(ev.Left(S1, ticket))
    mach.handle(ev.BackoffElapsed(mach.backoff_token))
    effects = mach.handle(ev.OperationFailed(S1, "join", "timed out", True))
    assert kinds(effects) == ["Leave", "Leave", "NotifyFatal", "Finish"]
    assert {e.ticket for e in effects if isinstance(e, ev.Leave)} == {ticket, ticket_for(ME, "2")}


def test_settling_leaves_only_the_joins_given_up_unseen() -> None:
    """P2: a node of our identity under another ticket (another process or elector of the
    same identity, or ours with a breadcrumb that still needs fencing) is not ours to leave
    here, and a node given up that keeps its breadcrumb keeps it."""
    mach = joined()
    ticket = mach.ticket or ""
    mach.handle(ev.OperationFailed(S1, "join", "timed out", True))
    mach.handle(ev.Left(S1, ticket))
    mach.unleft[MY_OLD_TICKET] = (node_of(MY_OLD_TICKET, 0), True)  # a lost leader's, owed
    mach.handle(ev.BackoffElapsed(mach.backoff_token))
    same_identity = node_of(ticket_for(ME, "x"), 1)
    effects = queued(mach, same_identity, node_of(ticket, 2))
    leaves = {e.ticket: e for e in effects if isinstance(e, ev.Leave)}
    assert leaves == {
        ticket: ev.Leave(S1, ticket, node_of(ticket, 2), False),
        MY_OLD_TICKET: ev.Leave(S1, MY_OLD_TICKET, node_of(MY_OLD_TICKET, 0), True),
    }
    assert mach.unleft[MY_OLD_TICKET] == (node_of(MY_OLD_TICKET, 0), True)


def test_two_nodes_given_up_in_a_row_are_both_left_again() -> None:
    """Two joins failing in a row on an unreachable backend: the first node is not forgotten."""
    mach = joined()
    first_ticket = mach.ticket or ""
    mach.handle(ev.OperationFailed(S1, "join", "timed out", True))  # its Leave is lost
    mach.handle(ev.BackoffElapsed(mach.backoff_token))  # sent again: lost again
    mach.handle(ev.OperationFailed(S1, "join", "timed out", True))
    effects = mach.handle(ev.BackoffElapsed(mach.backoff_token))
    assert ev.Leave(S1, first_ticket, None, False) in effects
    assert effects[-1] == ev.Join(S1, ticket_for(ME, "3"))


# --- the queue (P4, P5) ------------------------------------------------------------------------


def test_behind_the_leader_watch_it_and_its_breadcrumb() -> None:
    mach = standby()
    assert mach.below == (LEADER,) and mach.crumb == L_CRUMB and not mach.crumb_gone
    assert mach.holder == OTHER


def test_behind_others_watch_only_the_node_just_below_ours() -> None:
    """P4: no herd: the node just below ours, not the leader's (first=False)."""
    mach = joined()
    assert queued(mach, LEADER, MIDDLE) == [ev.Watch(S1, MIDDLE, False)]
    effects = mach.handle(ev.Watching(S1, MIDDLE, None, True))
    assert kinds(effects) == ["Report", "NotifyStandby"]
    # what is said of a node that is not the leader's is no evidence about the leader
    assert mach.crumb is None and not mach.crumb_gone and mach.strays


def test_a_watch_answer_for_another_node_is_ignored() -> None:
    mach = joined()
    queued(mach, LEADER, MIDDLE)
    assert mach.handle(ev.Watching(S1, LEADER, None, False)) == []
    assert mach.phase is Phase.WATCHING
    assert mach.handle(ev.PredecessorGone(S1, LEADER)) == []
    assert mach.handle(ev.NodeDeleted(S1, LEADER)) == []


def moved_up(mach: Machine) -> None:
    """Behind LEADER and MIDDLE, MIDDLE is deleted: list the queue again (P5)."""
    assert queued(mach, LEADER, MIDDLE) == [ev.Watch(S1, MIDDLE, False)]
    mach.handle(ev.Watching(S1, MIDDLE, None, True))
    assert mach.handle(ev.NodeDeleted(S1, MIDDLE)) == [ev.ListQueue(S1, mach.ticket or "", TOKEN)]
    assert mach.phase is Phase.REQUEUING and mach.state is State.STANDBY  # nobody told


def test_predecessor_deleted_with_others_below_lists_again_and_drops_its_breadcrumb() -> None:
    """P5: a lower node still lives, so the deleted one never led: unfenced, it is dropped."""
    mach = joined()
    moved_up(mach)
    assert queued(mach, LEADER) == [ev.DropCrumb(S1, M_TICKET), ev.Watch(S1, LEADER, True)]
    assert mach.handle(ev.Watching(S1, LEADER, L_CRUMB, False)) == []  # still STANDBY
    assert mach.phase is Phase.STANDBY and mach.crumb == L_CRUMB


def test_a_predecessor_that_may_have_led_keeps_its_breadcrumb() -> None:
    """P5: no lower node lives now: the leader may have gone first, so the deleted node may
    have led; its breadcrumb is left for the read (and fence) of P7."""
    mach = joined()
    moved_up(mach)
    effects = queued(mach)
    assert not any(isinstance(e, ev.DropCrumb) for e in effects)
    assert effects[0] == ev.ReadCrumbs(S1, mach.ticket or "", TOKEN)
    assert mach.phase is Phase.READING


def test_predecessor_gone_when_the_watch_is_set_is_like_its_deletion() -> None:
    mach = joined()
    queued(mach, LEADER, MIDDLE)
    effects = mach.handle(ev.PredecessorGone(S1, MIDDLE))
    assert effects[0] == ev.ListQueue(S1, mach.ticket or "", TOKEN)
    assert mach.phase is Phase.REQUEUING and mach.departed == MIDDLE


# --- graceful handover (P6) ----------------------------------------------------------------------


def test_graceful_handover_acts_with_no_request() -> None:
    """P6: the leader's breadcrumb went (its node with it), no strays: StartActive first, no
    backend effect before it, nothing to clear, and no wait for the node's own event."""
    mach = standby()
    expected = won(mach, "the leader resigned")
    assert mach.handle(ev.CrumbDeleted(S1, L_TICKET)) == expected
    assert mach.epoch == TOKEN and mach.phase is Phase.ACTIVE
    assert mach.handle(ev.NodeDeleted(S1, LEADER)) == []  # the node's event, later: nothing
    assert mach.phase is Phase.ACTIVE


@pytest.mark.parametrize("read", [L_CRUMB, None], ids=["read-before", "read-after"])
def test_a_crumb_deletion_seen_before_the_watch_answer_still_counts(read: bytes | None) -> None:
    """The watch answer may have read the breadcrumb before its deletion was delivered."""
    mach = joined()
    queued(mach, LEADER)
    assert mach.handle(ev.CrumbDeleted(S1, L_TICKET)) == []
    mach.handle(ev.Watching(S1, LEADER, read, False))
    assert mach.crumb_gone
    assert kinds(mach.handle(ev.NodeDeleted(S1, LEADER))) == ["StartActive", "Report", "Announce"]


def test_a_leader_with_no_breadcrumb_when_watched_needs_no_fence() -> None:
    mach = standby(None)
    assert kinds(mach.handle(ev.NodeDeleted(S1, LEADER))) == ["StartActive", "Report", "Announce"]


def test_stray_breadcrumbs_make_the_successor_read_them() -> None:
    """P6/P7: leaders that crashed in a row left breadcrumbs: read them all even after a
    graceful exit of the last one."""
    mach = standby(strays=True)
    mach.handle(ev.CrumbDeleted(S1, L_TICKET))
    effects = mach.handle(ev.NodeDeleted(S1, LEADER))
    # P15: still STANDBY to the contender while it takes over (Hadoop: no enterNeutralMode)
    assert effects == [ev.ReadCrumbs(S1, mach.ticket or "", TOKEN)]
    assert mach.phase is Phase.READING and mach.state is State.STANDBY
    crumbs = ((OLD_TICKET, OLD_CRUMB),)
    assert mach.handle(ev.CrumbsRead(S1, crumbs)) == [ev.FenceOldActive(S1, OLD_CRUMB)]


def test_the_leader_gone_before_its_watch_answer_reads_the_breadcrumbs() -> None:
    """Nothing known of strays yet: no shortcut, whatever was seen of the breadcrumb."""
    mach = joined()
    queued(mach, LEADER)
    mach.handle(ev.CrumbDeleted(S1, L_TICKET))
    assert kinds(mach.handle(ev.NodeDeleted(S1, LEADER))) == ["ReadCrumbs"]
    assert mach.handle(ev.Watching(S1, LEADER, None, False)) == []  # too late


def test_the_deletion_of_another_breadcrumb_is_no_evidence() -> None:
    mach = standby()
    for ticket in (M_TICKET, OLD_TICKET, mach.ticket or ""):
        assert mach.handle(ev.CrumbDeleted(S1, ticket)) == []
    assert not mach.crumb_gone
    assert kinds(mach.handle(ev.NodeDeleted(S1, LEADER)))[0] == "FenceOldActive"


# --- crash (P7) --------------------------------------------------------------------------------


def test_crash_fences_the_breadcrumb_read_while_watching_then_acts_then_clears() -> None:
    mach = standby()
    effects = mach.handle(ev.NodeDeleted(S1, LEADER))
    assert effects == [ev.FenceOldActive(S1, L_CRUMB)]  # P15: no report, no neutral
    assert mach.phase is Phase.FENCING and mach.state is State.STANDBY
    expected = won(mach, "won the election", L_TICKET)
    assert mach.handle(ev.FenceSucceeded(S1)) == expected


def test_several_breadcrumbs_are_fenced_oldest_first() -> None:
    mach = first(joined())
    crumbs = ((OLD_TICKET, OLD_CRUMB), (L_TICKET, L_CRUMB), (M_TICKET, M_CRUMB))
    assert mach.handle(ev.CrumbsRead(S1, crumbs)) == [ev.FenceOldActive(S1, OLD_CRUMB)]
    assert mach.handle(ev.FenceSucceeded(S1)) == [ev.FenceOldActive(S1, L_CRUMB)]
    assert mach.handle(ev.FenceSucceeded(S1)) == [ev.FenceOldActive(S1, M_CRUMB)]
    expected = won(mach, "won the election", OLD_TICKET, L_TICKET, M_TICKET)
    assert mach.handle(ev.FenceSucceeded(S1)) == expected


def test_a_breadcrumb_of_our_own_identity_is_cleared_not_fenced() -> None:
    mach = first(joined())
    crumbs = ((MY_OLD_TICKET, MY_OLD_CRUMB), (L_TICKET, L_CRUMB))
    assert mach.handle(ev.CrumbsRead(S1, crumbs)) == [ev.FenceOldActive(S1, L_CRUMB)]
    expected = won(mach, "won the election", MY_OLD_TICKET, L_TICKET)
    assert mach.handle(ev.FenceSucceeded(S1)) == expected

    mach = first(joined())
    expected = won(mach, "won the election", MY_OLD_TICKET)
    assert mach.handle(ev.CrumbsRead(S1, ((MY_OLD_TICKET, MY_OLD_CRUMB),))) == expected


def test_a_crashed_leader_of_our_own_identity_is_not_fenced() -> None:
    mach = standby(MY_OLD_CRUMB)
    expected = won(mach, "won the election", L_TICKET)
    assert mach.handle(ev.NodeDeleted(S1, LEADER)) == expected


@pytest.mark.parametrize("raw", [b"\xff\x00garbage", b"{}", b'{"format":"ha.breadcrumb/1"}', b""])
def test_a_corrupt_breadcrumb_is_handed_to_fencing_as_is(raw: bytes) -> None:
    mach = first(joined())
    assert mach.handle(ev.CrumbsRead(S1, (("x_1", raw),))) == [ev.FenceOldActive(S1, raw)]


def test_a_refused_fence_leaves_the_queue_and_backs_off() -> None:
    """P8: we never acted, so our breadcrumb goes with our node."""
    mach = standby()
    mach.handle(ev.NodeDeleted(S1, LEADER))
    ticket, node = mach.ticket or "", mine(mach)
    effects = mach.handle(ev.FenceFailed(S1, "refused"))
    # the standby told nothing while fencing (P15) is told now: it left the queue
    assert effects == [
        ev.Leave(S1, ticket, node, False),
        ev.Report(State.STANDBY, State.NEUTRAL, None, "fencing failed: refused"),
        ev.NotifyNeutral(),
        ev.WaitBackoff(1, mach.backoff_token, fencing=True),
    ]
    assert mach.phase is Phase.BACKOFF and mach.state is State.NEUTRAL and mach.ticket is None
    assert mach.handle(ev.Left(S1, ticket)) == [] and mach.unleft == {}
    token = mach.backoff_token
    assert mach.handle(ev.BackoffElapsed(token - 1)) == []  # an older timer
    assert mach.handle(ev.BackoffElapsed(token)) == [ev.Join(S1, ticket_for(ME, "2"))]


# --- failures and retries (P8) -------------------------------------------------------------------


def test_transient_failures_are_retried_then_fatal() -> None:
    mach = joined(max_retries=2)
    for attempt in (1, 2):
        effects = mach.handle(ev.OperationFailed(S1, "join", "boom", True))
        assert effects[-1] == ev.WaitBackoff(attempt, mach.backoff_token)
        assert isinstance(effects[0], ev.Leave)
        mach.handle(ev.Left(S1, effects[0].ticket))
        mach.handle(ev.BackoffElapsed(mach.backoff_token))
    effects = mach.handle(ev.OperationFailed(S1, "join", "boom", True))
    # the last join's Leave, and the two before it looked for once more (P2: not found, they
    # may still land)
    assert kinds(effects) == ["Leave", "Leave", "Leave", "NotifyFatal", "Finish"]
    assert effects[-1] == ev.Finish("join failed: boom")
    assert mach.phase is Phase.FAILED
    assert mach.handle(ev.Joined()) == [] and mach.handle(ev.Connected(S2)) == []


def test_progress_resets_the_failure_count() -> None:
    mach = joined(max_retries=1)
    mach.handle(ev.OperationFailed(S1, "join", "boom", True))
    mach.handle(ev.BackoffElapsed(mach.backoff_token))
    queued(mach, LEADER)  # progress
    effects = mach.handle(ev.OperationFailed(S1, "watch", "boom", True))
    assert kinds(effects)[-1] == "WaitBackoff"


def test_a_fatal_error_is_fatal_at_once() -> None:
    mach = joined()
    effects = mach.handle(ev.OperationFailed(S1, "join", "access denied", False))
    assert kinds(effects) == ["Leave", "NotifyFatal", "Finish"]


def test_a_failed_check_while_leading_proves_nothing() -> None:
    mach = active()
    assert mach.handle(ev.OperationFailed(S1, "clear", "timed out", True)) == []
    assert mach.phase is Phase.ACTIVE


def test_become_active_failing_every_term_backs_off_longer_then_is_fatal() -> None:
    """Winning again is no progress for become_active: its count survives new terms."""
    mach = joined(max_retries=3)
    attempts: list[int] = []
    for _ in range(4):
        first(mach)
        crumbs = () if not attempts else ((MY_OLD_TICKET, MY_OLD_CRUMB),)
        assert kinds(mach.handle(ev.CrumbsRead(S1, crumbs)))[0] == "StartActive"
        ticket, node = mach.ticket or "", mine(mach)
        effects = mach.handle(ev.ActiveFailed(S1, TOKEN, "spark will not start"))
        if kinds(effects)[-1] == "Finish":
            assert kinds(effects) == ["StopActive", "Leave", "Report", "NotifyFatal", "Finish"]
            break
        # the work ran: our breadcrumb stays for whoever leads next
        assert kinds(effects)[0] == "StopActive" and effects[1] == ev.Leave(S1, ticket, node, True)
        backoff = effects[-1]
        assert isinstance(backoff, ev.WaitBackoff)
        attempts.append(backoff.attempt)
        assert mach.handle(ev.Left(S1, ticket)) == []
        assert kinds(mach.handle(ev.BackoffElapsed(mach.backoff_token))) == ["Join"]
    assert attempts == [1, 2, 3] and mach.phase is Phase.FAILED


def refused(mach: Machine, *raws: bytes) -> list[ev.Effect]:
    """First in the queue, the breadcrumbs ``raws`` read; each but the last is fenced, the
    last one's fence is refused."""
    first(mach)
    crumbs = tuple((f"x_{i}", raw) for i, raw in enumerate(raws))
    effects = mach.handle(ev.CrumbsRead(S1, crumbs))
    for raw in raws[:-1]:
        if effects == [ev.FenceOldActive(S1, raw)]:  # not when fenced on an earlier try
            effects = mach.handle(ev.FenceSucceeded(S1))
    assert effects == [ev.FenceOldActive(S1, raws[-1])]
    return mach.handle(ev.FenceFailed(S1, "refused"))


def backoffs(mach: Machine, tries: int, *raws: bytes) -> list[int]:
    """``tries`` takeovers whose last fence is refused: the fence backoff's attempt of each."""
    attempts: list[int] = []
    for _ in range(tries):
        [leave, backoff] = refused(mach, *raws)
        assert isinstance(leave, ev.Leave) and isinstance(backoff, ev.WaitBackoff)
        assert backoff.fencing
        attempts.append(backoff.attempt)
        mach.handle(ev.Left(S1, leave.ticket))
        assert kinds(mach.handle(ev.BackoffElapsed(mach.backoff_token))) == ["Join"]
    return attempts


@pytest.mark.parametrize("lasted", [59.9, 60.0, 3600.0])
def test_a_term_whose_work_lasted_starts_the_count_again(lasted: float) -> None:
    """Failures of terms whose work ran ``lasting_term`` (60 s) are no crash loop: each is the
    first in a row, for ever; shorter ones still add up to a fatal error."""
    mach = joined(max_retries=2)
    attempts: list[int] = []
    for term in range(6):
        first(mach)
        crumbs = () if not term else ((MY_OLD_TICKET, MY_OLD_CRUMB),)
        assert kinds(mach.handle(ev.CrumbsRead(S1, crumbs)))[0] == "StartActive"
        ticket = mach.ticket or ""
        effects = mach.handle(ev.ActiveFailed(S1, TOKEN, "the stream failed", ran=lasted))
        if kinds(effects)[-1] == "Finish":
            break
        backoff = effects[-1]
        assert isinstance(backoff, ev.WaitBackoff)
        attempts.append(backoff.attempt)
        assert mach.handle(ev.Left(S1, ticket)) == []
        assert kinds(mach.handle(ev.BackoffElapsed(mach.backoff_token))) == ["Join"]
    if lasted >= 60.0:
        assert attempts == [1] * 6 and mach.phase is not Phase.FAILED
    else:
        assert attempts == [1, 2] and mach.phase is Phase.FAILED


def test_refused_fences_back_off_longer_each_time_and_are_never_fatal() -> None:
    """P8: joining again after a refused fence is no progress: the fence backoff grows (a
    real STONITH command is not hammered), and past max_retries it goes on (a fencing device
    down for minutes must not leave the service without an active for good)."""
    mach = joined(max_retries=3)
    assert backoffs(mach, 12, OLD_CRUMB) == list(range(1, 13))
    assert mach.phase is Phase.JOINING and mach.fence_failures == 12


def test_a_fence_that_works_resets_the_refusals() -> None:
    mach = joined(max_retries=2)
    backoffs(mach, 4, OLD_CRUMB)
    first(mach)
    mach.handle(ev.CrumbsRead(S1, ((OLD_TICKET, OLD_CRUMB),)))
    assert kinds(mach.handle(ev.FenceSucceeded(S1)))[0] == "StartActive"
    assert mach.fence_failures == 0 and mach.fence_target is None


def test_refused_fences_of_another_breadcrumb_count_afresh() -> None:
    """Separate incidents (a new breadcrumb to fence) each count from 1."""
    mach = joined(max_retries=2)
    attempts = [backoffs(mach, 1, crumb(OTHER, epoch))[0] for epoch in (4, 4, 5, 5, 6, 6)]
    assert attempts == [1, 2, 1, 2, 1, 2]


def test_a_breadcrumb_fenced_on_an_earlier_try_is_not_fenced_again() -> None:
    """P8: at most one fence call per backoff. A takeover held up by a refused fence does not
    fence the older breadcrumbs again on each try (their tickets never lead again, P3), and
    their fences that work do not reset the count of the one refused."""
    mach = joined(max_retries=2)
    older = crumb(THIRD, 3)
    first(mach)
    assert mach.handle(ev.CrumbsRead(S1, (("t_1", older), ("o_2", OLD_CRUMB)))) == [
        ev.FenceOldActive(S1, older)
    ]
    assert mach.handle(ev.FenceSucceeded(S1)) == [ev.FenceOldActive(S1, OLD_CRUMB)]
    [leave, _] = mach.handle(ev.FenceFailed(S1, "refused"))
    assert isinstance(leave, ev.Leave) and mach.handle(ev.Left(S1, leave.ticket)) == []
    mach.handle(ev.BackoffElapsed(mach.backoff_token))
    # the next tries fence only the one refused: one call each, its count going on
    assert backoffs(mach, 3, older, OLD_CRUMB) == [2, 3, 4]
    first(mach)
    crumbs = (("t_1", older), ("o_2", OLD_CRUMB))
    assert mach.handle(ev.CrumbsRead(S1, crumbs)) == [ev.FenceOldActive(S1, OLD_CRUMB)]
    assert kinds(mach.handle(ev.FenceSucceeded(S1)))[0] == "StartActive"
    assert mach.fenced == set()  # a takeover done: nothing carried over to the next


def test_only_breadcrumbs_still_read_are_remembered_as_fenced() -> None:
    """What the machine remembers of earlier fences stays bounded by the breadcrumbs left: a
    breadcrumb gone (another leader cleared it) is forgotten, and fenced again should it be
    read again."""
    mach = joined()
    older = crumb(THIRD, 3)
    backoffs(mach, 1, older, OLD_CRUMB)
    assert mach.fenced == {older}
    backoffs(mach, 1, OLD_CRUMB)
    assert mach.fenced == set()
    assert backoffs(mach, 1, older, OLD_CRUMB) == [3]  # fenced again, then refused again


@pytest.mark.parametrize(
    "backoff", [Backoff(0.5, 30.0), Backoff(0.05, 2.0, 10.0), Backoff(1, 1, 1)]
)
def test_the_backoff_of_any_attempt_stays_within_its_cap(backoff: Backoff) -> None:
    """Refused fences count for ever (P8): the runner's delay for the ten-thousandth refusal
    (three days of a device down, at 30 s) is the cap's, not a float overflow."""
    rng = random.Random(1)
    for attempt in (1, 2, 7, 1100, 10_000, 10**9):
        delay = backoff.delay(attempt, rng)
        assert backoff.initial * (1 - backoff.jitter) <= delay <= backoff.maximum
    assert backoff.delay(10**9, random.Random(1)) == backoff.delay(10**4, random.Random(1))
