"""The pure machine of election protocol 2, with no event loop: one test per rule (P1-P14 of
``machine.py``), an exhaustiveness check over every phase and input, and a Hypothesis stateful
test of the safety properties over random, duplicated, reordered and stale inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from ha.election import events as ev
from ha.election import machine as m
from ha.election.diagram import diagram, document, situations
from ha.election.machine import LEGAL, WAITING, Machine, Phase, State
from ha.election.nodes import (
    Breadcrumb,
    decode_breadcrumb,
    encode_breadcrumb,
    parse_entry,
    ticket_for,
)

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
    """What taking over returns (call it before the input): act first, then clear what was
    fenced, then tell (P14)."""
    start: list[ev.Effect] = [ev.StartActive(S1, TOKEN, mine(mach))]
    if clear:
        start.append(ev.ClearCrumbs(S1, mine(mach), clear))
    return [*start, ev.Report(mach.reported, State.ACTIVE, TOKEN, cause)]


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
    assert mach.handle(ev.BackoffElapsed(mach.backoff_token)) == [ev.Join(S1, ticket_for(ME, "2"))]


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
    """P6: the breadcrumb went before the node, no strays: StartActive first, no backend
    effect before it, nothing to clear."""
    mach = standby()
    assert mach.handle(ev.CrumbDeleted(S1, L_TICKET)) == []
    assert mach.state is State.STANDBY
    expected = won(mach, "the leader resigned")
    assert mach.handle(ev.NodeDeleted(S1, LEADER)) == expected
    assert mach.epoch == TOKEN and mach.phase is Phase.ACTIVE


@pytest.mark.parametrize("read", [L_CRUMB, None], ids=["read-before", "read-after"])
def test_a_crumb_deletion_seen_before_the_watch_answer_still_counts(read: bytes | None) -> None:
    """The watch answer may have read the breadcrumb before its deletion was delivered."""
    mach = joined()
    queued(mach, LEADER)
    assert mach.handle(ev.CrumbDeleted(S1, L_TICKET)) == []
    mach.handle(ev.Watching(S1, LEADER, read, False))
    assert mach.crumb_gone
    assert kinds(mach.handle(ev.NodeDeleted(S1, LEADER))) == ["StartActive", "Report"]


def test_a_leader_with_no_breadcrumb_when_watched_needs_no_fence() -> None:
    mach = standby(None)
    assert kinds(mach.handle(ev.NodeDeleted(S1, LEADER))) == ["StartActive", "Report"]


def test_stray_breadcrumbs_make_the_successor_read_them() -> None:
    """P6/P7: leaders that crashed in a row left breadcrumbs: read them all even after a
    graceful exit of the last one."""
    mach = standby(strays=True)
    mach.handle(ev.CrumbDeleted(S1, L_TICKET))
    effects = mach.handle(ev.NodeDeleted(S1, LEADER))
    assert effects == [
        ev.ReadCrumbs(S1, mach.ticket or "", TOKEN),
        ev.Report(State.STANDBY, State.NEUTRAL, None, "the leader left"),
        ev.NotifyNeutral(),
    ]
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
    assert effects == [
        ev.FenceOldActive(S1, L_CRUMB),
        ev.Report(State.STANDBY, State.NEUTRAL, None, "fencing old active"),
        ev.NotifyNeutral(),
    ]
    assert mach.phase is Phase.FENCING
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
    assert effects == [ev.Leave(S1, ticket, node, False), ev.WaitBackoff(1, mach.backoff_token)]
    assert mach.phase is Phase.BACKOFF and mach.state is State.NEUTRAL and mach.ticket is None
    token = mach.backoff_token
    assert mach.handle(ev.BackoffElapsed(token - 1)) == []  # an older timer
    assert mach.handle(ev.BackoffElapsed(token)) == [ev.Join(S1, ticket_for(ME, "2"))]


# --- failures and retries (P8) -------------------------------------------------------------------


def test_transient_failures_are_retried_then_fatal() -> None:
    mach = joined(max_retries=2)
    for attempt in (1, 2):
        effects = mach.handle(ev.OperationFailed(S1, "join", "boom", True))
        assert effects[-1] == ev.WaitBackoff(attempt, mach.backoff_token)
        mach.handle(ev.BackoffElapsed(mach.backoff_token))
    effects = mach.handle(ev.OperationFailed(S1, "join", "boom", True))
    assert kinds(effects) == ["Leave", "NotifyFatal", "Finish"]
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
        assert kinds(mach.handle(ev.BackoffElapsed(mach.backoff_token))) == ["Join"]
    assert attempts == [1, 2, 3] and mach.phase is Phase.FAILED


def refused(mach: Machine, raw: bytes) -> list[ev.Effect]:
    first(mach)
    assert mach.handle(ev.CrumbsRead(S1, (("x_1", raw),))) == [ev.FenceOldActive(S1, raw)]
    return mach.handle(ev.FenceFailed(S1, "refused"))


def test_refused_fences_back_off_longer_each_time_then_are_fatal() -> None:
    """Joining again after a refused fence is no progress: the backoff grows (a real STONITH
    command is not hammered) and max_retries ends it, as Hadoop gives up."""
    mach = joined(max_retries=3)
    attempts: list[int] = []
    for _ in range(3):
        [leave, backoff] = refused(mach, OLD_CRUMB)
        assert isinstance(leave, ev.Leave) and isinstance(backoff, ev.WaitBackoff)
        attempts.append(backoff.attempt)
        mach.handle(ev.BackoffElapsed(mach.backoff_token))
    assert attempts == [1, 2, 3]
    assert kinds(refused(mach, OLD_CRUMB)) == ["Leave", "NotifyFatal", "Finish"]


def test_a_fence_that_works_resets_the_refusals() -> None:
    mach = joined(max_retries=2)
    for _ in range(2):
        refused(mach, OLD_CRUMB)
        mach.handle(ev.BackoffElapsed(mach.backoff_token))
    first(mach)
    mach.handle(ev.CrumbsRead(S1, ((OLD_TICKET, OLD_CRUMB),)))
    assert kinds(mach.handle(ev.FenceSucceeded(S1)))[0] == "StartActive"
    assert mach.fence_failures == 0


def test_refused_fences_of_another_breadcrumb_count_afresh() -> None:
    """Separate incidents (a new breadcrumb to fence) do not add up to a fatal error."""
    mach = joined(max_retries=2)
    for epoch in (4, 4, 5, 5, 6, 6):
        assert kinds(refused(mach, crumb(OTHER, epoch)))[-1] == "WaitBackoff"
        mach.handle(ev.BackoffElapsed(mach.backoff_token))


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
    ]  # no Leave: the node went with the session
    mach.handle(ev.Connected(S2))
    assert mach.handle(ev.BackoffElapsed(mach.backoff_token))[0] == ev.Join(S2, ticket_for(ME, "2"))


def test_a_new_session_without_word_of_the_old_one_is_an_expiry() -> None:
    mach = active()
    effects = mach.handle(ev.Connected(S2))
    assert kinds(effects) == ["StopActive", "Report", "WaitBackoff"]
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
    mach = standby()
    mach.handle(ev.CrumbDeleted(S1, L_TICKET))  # graceful evidence, before the blip
    assert kinds(mach.handle(ev.Disconnected(S1))) == ["Report", "NotifyNeutral"]
    assert mach.handle(ev.NodeDeleted(S1, LEADER)) == []  # offline: not acted on
    assert mach.handle(ev.Reconnected(S1)) == [ev.ListQueue(S1, mach.ticket or "", TOKEN)]
    assert (mach.crumb, mach.crumb_gone, mach.strays) == (None, False, True)
    # the listing still shows the leader; its deletion then comes before the watch answer
    assert queued(mach, LEADER) == [ev.Watch(S1, LEADER, True)]
    effects = mach.handle(ev.NodeDeleted(S1, LEADER))
    assert effects == [ev.ReadCrumbs(S1, mach.ticket or "", TOKEN)]


def test_a_leader_gone_during_the_blip_is_read_for() -> None:
    mach = standby()
    mach.handle(ev.CrumbDeleted(S1, L_TICKET))
    mach.handle(ev.Disconnected(S1))
    mach.handle(ev.Reconnected(S1))
    assert kinds(queued(mach)) == ["ReadCrumbs"]


def test_session_expired_while_standby_waits_for_the_next_session() -> None:
    """P12: the node went with the session: no Leave, a new ticket in the new session."""
    mach = standby()
    effects = mach.handle(ev.SessionExpired(S1))
    assert kinds(effects) == ["Report", "NotifyNeutral"]
    assert mach.phase is Phase.CONNECTING and mach.ticket is None
    assert mach.handle(ev.Connected(S2)) == [ev.Join(S2, ticket_for(ME, "2"))]


def test_a_node_given_up_out_of_contact_is_left_once_contact_is_back() -> None:
    mach = active(hold=True)
    ticket, node = mach.ticket or "", mine(mach)
    mach.handle(ev.Disconnected(S1))
    effects = mach.handle(ev.ActiveFailed(S1, TOKEN, "boom"))
    assert kinds(effects) == ["StopActive", "Report", "NotifyNeutral", "WaitBackoff"]
    assert mach.unleft == (ticket, node, True)
    assert mach.handle(ev.BackoffElapsed(mach.backoff_token)) == []  # no contact: wait for it
    assert mach.phase is Phase.OFFLINE
    effects = mach.handle(ev.Reconnected(S1))
    assert effects == [ev.Leave(S1, ticket, node, True), ev.Join(S1, ticket_for(ME, "2"))]
    assert mach.unleft is None


def test_a_node_given_up_out_of_contact_goes_with_an_expired_session() -> None:
    mach = active(hold=True)
    mach.handle(ev.Disconnected(S1))
    mach.handle(ev.Superseded(S1, TOKEN))
    assert mach.unleft is not None
    mach.handle(ev.SessionExpired(S1))
    assert mach.unleft is None
    assert mach.handle(ev.Connected(S2)) == []  # FENCED: the backoff decides


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


def test_quit_from_active_stops_then_resigns() -> None:
    mach = active()
    ticket, node = mach.ticket or "", mine(mach)
    assert mach.handle(ev.QuitRequested()) == [
        ev.StopActive("quit"),
        ev.Resign(S1, ticket, node),
        ev.Report(State.ACTIVE, State.NEUTRAL, None, "quit"),
        ev.Finish(),
    ]
    assert mach.phase is Phase.DONE and mach.handle(ev.Joined()) == []


def test_quit_with_a_fence_keeps_the_breadcrumb() -> None:
    mach = active()
    ticket, node = mach.ticket or "", mine(mach)
    effects = mach.handle(ev.QuitRequested(need_fence=True))
    assert effects == [
        ev.StopActive("quit"),
        ev.Leave(S1, ticket, node, True),
        ev.Report(State.ACTIVE, State.NEUTRAL, None, "quit (fence requested)"),
        ev.Finish(),
    ]


@pytest.mark.parametrize("need_fence", [False, True])
def test_quit_while_standby_leaves_node_and_breadcrumb(need_fence: bool) -> None:
    mach = standby()
    ticket, node = mach.ticket or "", mine(mach)
    effects = mach.handle(ev.QuitRequested(need_fence))
    assert effects[0] == ev.Leave(S1, ticket, node, False)
    assert kinds(effects) == ["Leave", "Report", "Finish"]


def test_quit_while_joining_leaves_by_ticket() -> None:
    mach = joined()
    ticket = mach.ticket or ""
    assert kinds(mach.handle(ev.QuitRequested())) == ["Leave", "Finish"]
    assert mach.handle(ev.Queued(S1, node_of(ticket, 3), TOKEN, (), ME)) == []  # too late


def test_quit_out_of_contact_leaves_the_node_to_the_runner() -> None:
    mach = active(hold=True)
    ticket, node = mach.ticket or "", mine(mach)
    mach.handle(ev.Disconnected(S1))
    assert kinds(mach.handle(ev.QuitRequested())) == ["StopActive", "Report", "Finish"]
    assert mach.unleft == (ticket, node, True)  # work ran, contact lost: keep the breadcrumb


def test_quit_before_joining_just_finishes() -> None:
    assert Machine(ME).handle(ev.QuitRequested()) == [ev.Finish()]


# --- exhaustiveness: every phase x every input --------------------------------------------------


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


@pytest.mark.parametrize("phase", list(Phase), ids=lambda p: p.value)
@pytest.mark.parametrize("cls", ev.INPUT_TYPES, ids=lambda c: c.__name__)
def test_every_phase_handles_every_input(phase: Phase, cls: type[ev.Input]) -> None:
    for mach, event in situations(phase, cls):
        check_effects(mach, mach.state, mach.handle(event))


def snapshot(mach: Machine) -> dict[str, object]:
    return {name: getattr(mach, name) for name in Machine.__slots__ if name != "nonce"}


@pytest.mark.parametrize("cls", ev.INPUT_TYPES, ids=lambda c: c.__name__)
def test_an_input_outside_the_table_changes_nothing(cls: type[ev.Input]) -> None:
    """HANDLED is the whole policy on stale and irrelevant input: outside it, in every
    situation, an input neither returns effects nor moves anything in the machine."""
    for phase in Phase:
        if phase in m.HANDLED[cls]:
            continue
        for mach, event in situations(phase, cls):
            before = snapshot(mach)
            assert mach.handle(event) == [], (phase, event)
            assert snapshot(mach) == before, (phase, event)


@pytest.mark.parametrize("cls", ev.INPUT_TYPES, ids=lambda c: c.__name__)
def test_every_phase_in_the_table_can_act_on_its_input(cls: type[ev.Input]) -> None:
    """The table is no wider than the handlers: each phase it lists acts in some situation."""
    assert m.HANDLED[cls], cls
    assert not m.HANDLED[cls] & {Phase.DONE, Phase.FAILED}
    for phase in m.HANDLED[cls]:
        for mach, event in situations(phase, cls):
            before = snapshot(mach)
            if mach.handle(event) or snapshot(mach) != before:
                break
        else:
            pytest.fail(f"{cls.__name__} never acts in {phase}")


def test_the_table_covers_every_input() -> None:
    assert set(m.HANDLED) == set(ev.INPUT_TYPES)


def test_the_state_diagram_document_is_current() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "states.md").read_text()
    hint = "regenerate docs/states.md with python -m ha.election.diagram > docs/states.md"
    assert diagram() in doc, hint
    assert doc == document(), hint


# --- Hypothesis: random, duplicated, reordered and stale inputs ---------------------------------

TICKET_OF = {LEADER: L_TICKET, MIDDLE: M_TICKET}
CRUMB_OF = {L_TICKET: L_CRUMB, M_TICKET: M_CRUMB}
# what ReadCrumbs may answer, oldest first (a subsequence is drawn)
LEFT = (
    (OLD_TICKET, OLD_CRUMB),
    (MY_OLD_TICKET, MY_OLD_CRUMB),
    ("junk_j", b"\xffjunk"),
    (L_TICKET, L_CRUMB),
    (M_TICKET, M_CRUMB),
)
BELOW = ((), (LEADER,), (MIDDLE,), (LEADER, MIDDLE))
# input kinds to draw from: a quit ends the run, so it comes more rarely
KINDS = [c for c in ev.INPUT_TYPES if c is not ev.QuitRequested] * 4 + [ev.QuitRequested]


def seq(node: str) -> int:
    entry = parse_entry(node)
    assert entry is not None
    return entry.seq


def must_fence(raw: bytes) -> bool:
    """P7: every breadcrumb is fenced but one naming our own identity."""
    found = decode_breadcrumb(raw)
    return found is None or found.identity != ME


class MachineModel(RuleBasedStateMachine):
    """Feeds the machine inputs that are mostly plausible (its own session, its own node,
    breadcrumbs that match their tickets) and checks, after every input:

    - the public reports chain and make only LEGAL changes; StopActive comes before any
      report away from ACTIVE (P14); the scope is open exactly in the leading phases, and
      never twice: no two StartActive without a StopActive between;
    - fencing before acting (P6, P7), stated on the run's own inputs and effects: take the
      last ReadCrumbs or Watch(first=True) effect since the last Join, ListQueue or loss of
      contact (there must be one). After a ReadCrumbs, the machine acted on a CrumbsRead
      answer, and every breadcrumb in it that does not name our identity was handed to
      FenceOldActive and a FenceSucceeded came back, before the StartActive. After a
      Watch(first=True) of node L, the machine acted on a Watching(L) answer saying no
      strays, and either L's breadcrumb was seen gone (that answer's crumb None, or a
      CrumbDeleted of L's ticket acted on) or the breadcrumb read was ours or was fenced;
    - FenceOldActive is only ever handed a breadcrumb the machine was told of, never ours;
    - ClearCrumbs only follows a StartActive; Resign and Leave(keep_crumb=False) only while
      no scope is open (a breadcrumb goes only once the work has stopped);
    - DropCrumb (P5) only for a node below which a live node was just listed.
    """

    def __init__(self) -> None:
        super().__init__()
        self.mach = Machine(ME, max_retries=3)
        self.state = State.NEUTRAL
        self.scope_open = False
        self.finished = False
        self.forget()

    def forget(self) -> None:
        self.path: tuple[str, str] | None = None  # ("read", "") or ("watch", node)
        self.crumbs_read: tuple[tuple[str, bytes], ...] | None = None
        self.strays: bool | None = None
        self.watched: bytes | None = None
        self.gone = False
        self.fenced: set[bytes] = set()
        self.fencing: bytes | None = None

    @initialize(hold=st.booleans())
    def policy(self, hold: bool) -> None:
        self.mach.hold_on_disconnect = hold

    # --- inputs --------------------------------------------------------------------------

    def draw_input(self, data: st.DataObject) -> ev.Input:
        mach = self.mach
        cls = data.draw(st.sampled_from(KINDS))
        sid = data.draw(st.sampled_from([mach.session or S1] * 4 + [S1, S2]))
        own = node_of(mach.ticket or MY_OLD_TICKET, 3)
        node = data.draw(st.sampled_from([LEADER, MIDDLE, own]))
        if cls is ev.Joined:
            return ev.Joined()
        if cls is ev.QuitRequested:
            return ev.QuitRequested(data.draw(st.booleans()))
        if cls in (ev.Connected, ev.Disconnected, ev.Reconnected, ev.SessionExpired):
            return cls(sid)
        if cls in (ev.NotQueued, ev.FenceSucceeded, ev.DeadlineExpired):
            return cls(sid)
        if cls is ev.Queued:
            below = data.draw(st.sampled_from(BELOW))
            return ev.Queued(sid, own, TOKEN, below, data.draw(st.sampled_from([OTHER, ME])))
        if cls is ev.Watching:
            node = data.draw(st.sampled_from([LEADER, MIDDLE]))
            raw = data.draw(st.sampled_from([CRUMB_OF[TICKET_OF[node]], None]))
            return ev.Watching(sid, node, raw, data.draw(st.booleans()))
        if cls is ev.PredecessorGone:
            return ev.PredecessorGone(sid, data.draw(st.sampled_from([LEADER, MIDDLE])))
        if cls is ev.NodeDeleted:
            return ev.NodeDeleted(sid, node)
        if cls is ev.CrumbDeleted:
            tickets = [L_TICKET, M_TICKET, mach.ticket or MY_OLD_TICKET]
            return ev.CrumbDeleted(sid, data.draw(st.sampled_from(tickets)))
        if cls is ev.CrumbsRead:
            mask = data.draw(st.lists(st.booleans(), min_size=len(LEFT), max_size=len(LEFT)))
            return ev.CrumbsRead(sid, tuple(c for c, keep in zip(LEFT, mask, strict=True) if keep))
        if cls is ev.FenceFailed:
            return ev.FenceFailed(sid, "refused")
        if cls in (ev.ActiveFailed, ev.Superseded):
            epoch = data.draw(st.sampled_from([mach.epoch or TOKEN, TOKEN - 1]))
            return (
                ev.ActiveFailed(sid, epoch, "boom")
                if cls is ev.ActiveFailed
                else ev.Superseded(sid, epoch)
            )
        if cls is ev.BackoffElapsed:
            return ev.BackoffElapsed(mach.backoff_token - data.draw(st.sampled_from([0, 1])))
        assert cls is ev.OperationFailed
        transient = data.draw(st.sampled_from([True] * 9 + [False]))
        return ev.OperationFailed(sid, "op", "boom", transient)

    @rule(data=st.data())
    def feed_random(self, data: st.DataObject) -> None:
        self.feed(self.draw_input(data))

    # What the runner or the backend would say next in the machine's phase, as two rules (so
    # drawn twice as often): this reaches the deep states (standby, fencing, active) far more
    # often than chance.
    @rule(data=st.data())
    def respond(self, data: st.DataObject) -> None:
        self.feed(data.draw(st.sampled_from(self.likely(data))))

    @rule(data=st.data())
    def respond_too(self, data: st.DataObject) -> None:
        self.feed(data.draw(st.sampled_from(self.likely(data))))

    def likely(self, data: st.DataObject) -> list[ev.Input]:
        mach, sid = self.mach, self.mach.session or S1
        own = node_of(mach.ticket or MY_OLD_TICKET, 3)
        if mach.phase in WAITING and mach.below:
            # the watch's answer, or what the watches then see: a breadcrumb, a node go
            node = mach.below[-1]
            raw = data.draw(st.sampled_from([CRUMB_OF[TICKET_OF[node]], None]))
            other = [t for t in (L_TICKET, M_TICKET, own) if t != TICKET_OF[node]]
            return [
                ev.Watching(sid, node, raw, data.draw(st.booleans())),
                ev.CrumbDeleted(sid, TICKET_OF[node]),
                ev.CrumbDeleted(sid, data.draw(st.sampled_from(other))),
                ev.NodeDeleted(sid, node),
            ]
        if mach.phase in (Phase.JOINING, Phase.LISTING, Phase.REQUEUING, Phase.VERIFYING):
            below = data.draw(st.sampled_from(BELOW))
            return [ev.Queued(sid, own, TOKEN, below, OTHER if below else ME), ev.NotQueued(sid)]
        if mach.phase is Phase.READING:
            mask = data.draw(st.lists(st.booleans(), min_size=len(LEFT), max_size=len(LEFT)))
            return [ev.CrumbsRead(sid, tuple(c for c, k in zip(LEFT, mask, strict=True) if k))]
        if mach.phase is Phase.FENCING:
            fences: list[ev.Input] = [ev.FenceSucceeded(sid)] * 3
            return [*fences, ev.FenceFailed(sid, "refused")]
        if mach.phase in m.LEADING:
            epoch = mach.epoch or TOKEN
            return [
                ev.QuitRequested(False),
                ev.QuitRequested(True),
                ev.Disconnected(sid),
                ev.Reconnected(sid),
                ev.DeadlineExpired(sid),
                ev.NodeDeleted(sid, own),
                ev.Superseded(sid, epoch),
                ev.ActiveFailed(sid, epoch, "boom"),
                ev.SessionExpired(sid),
            ]
        if mach.phase in (Phase.BACKOFF, Phase.FENCED):
            return [ev.BackoffElapsed(mach.backoff_token)]
        if mach.phase is Phase.OFFLINE:
            return [ev.Reconnected(sid)]
        if mach.phase is Phase.CONNECTING:
            return [ev.Connected(S1), ev.Connected(S2)]
        return [ev.Joined()]

    # --- the checks ------------------------------------------------------------------------

    def feed(self, event: ev.Input) -> None:
        mach = self.mach
        session = getattr(event, "session", None)
        acted = mach.phase in m.HANDLED[type(event)] and session == mach.session
        was_connected, old_session = mach.connected, mach.session
        effects = mach.handle(event)
        if self.finished:
            assert effects == []
            return
        self.state = check_effects(mach, self.state, effects)
        self.learn(event, acted, was_connected, old_session)
        for i, effect in enumerate(effects):
            self.check(event, effect, effects[i - 1] if i else None)
        assert self.scope_open == (mach.phase in m.LEADING), (mach.phase, effects)

    def learn(
        self, event: ev.Input, acted: bool, was_connected: bool, old_session: int | None
    ) -> None:
        """Record what the machine was told, as far as it acted on it (the table says so)."""
        if isinstance(event, ev.Connected) and old_session not in (None, event.session):
            self.forget()  # a new session: the old one's knowledge is void
        if not acted:
            return
        if isinstance(event, ev.Disconnected | ev.SessionExpired) or (
            isinstance(event, ev.Reconnected) and not was_connected
        ):
            self.forget()  # P11: what the watches said before is not to be trusted
        elif isinstance(event, ev.CrumbsRead) and self.path == ("read", ""):
            if self.crumbs_read is None:
                self.crumbs_read = event.crumbs
        elif isinstance(event, ev.Watching) and self.path == ("watch", event.node):
            self.strays, self.watched = event.strays, event.crumb
            self.gone = self.gone or event.crumb is None
        elif isinstance(event, ev.CrumbDeleted) and self.path is not None:
            if self.path[0] == "watch" and TICKET_OF[self.path[1]] == event.ticket:
                self.gone = True
        elif isinstance(event, ev.FenceSucceeded) and self.fencing is not None:
            self.fenced.add(self.fencing)
            self.fencing = None
        elif isinstance(event, ev.FenceFailed):
            self.fencing = None

    def check(self, event: ev.Input, effect: ev.Effect, previous: ev.Effect | None) -> None:
        match effect:
            case ev.Join() | ev.ListQueue():
                self.forget()
            case ev.Watch(node=node, first=first):
                self.forget()
                self.path = ("watch", node) if first else None
            case ev.ReadCrumbs():
                self.forget()
                self.path = ("read", "")
            case ev.FenceOldActive(breadcrumb=raw):
                told = [r for _, r in self.crumbs_read or ()] + [self.watched or b""]
                assert raw in told and must_fence(raw), (raw, told)
                self.fencing = raw
            case ev.StartActive():
                assert not self.scope_open, "two leadership scopes at once"
                self.check_fenced()
                self.scope_open = True
            case ev.ClearCrumbs():
                assert isinstance(previous, ev.StartActive), previous
            case ev.StopActive():
                self.scope_open = False
            case ev.Resign() | ev.Leave(keep_crumb=False):
                assert not self.scope_open, f"breadcrumb deleted while the work runs: {effect}"
            case ev.DropCrumb(ticket=ticket):
                assert isinstance(event, ev.Queued), event
                [gone] = [seq(n) for n, t in TICKET_OF.items() if t == ticket]
                assert any(seq(n) < gone for n in event.below), (ticket, event.below)
            case ev.Finish():
                self.finished = True

    def check_fenced(self) -> None:
        """No StartActive without proof that nobody else may still act (P6, P7)."""
        assert self.path is not None, "StartActive with nothing read or watched"
        if self.path[0] == "read":
            assert self.crumbs_read is not None, "StartActive before the breadcrumbs were read"
            for ticket, raw in self.crumbs_read:
                assert not must_fence(raw) or raw in self.fenced, ("not fenced", ticket)
            return
        assert self.strays is False, "StartActive on a watch that did not rule out strays"
        if not self.gone:
            assert self.watched is not None
            assert not must_fence(self.watched) or self.watched in self.fenced, "not fenced"

    @invariant()
    def public_state_matches_phase(self) -> None:
        assert self.mach.state is m.PUBLIC[self.mach.phase] is self.state
        if self.mach.phase in m.LEADING:
            assert self.mach.epoch == self.mach.token is not None


MachineModel.TestCase.settings = settings(
    max_examples=400,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMachineModel = MachineModel.TestCase
