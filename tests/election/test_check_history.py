"""``ha.testing.check_history`` on histories written by hand: each safety property passes on a
good history and fails on one that breaks it. Epochs are tokens with gaps (queue nodes'
creation orders), and a leader back within its session keeps its epoch."""

from __future__ import annotations

import pytest

from ha.testing import Event, SafetyViolation, check_history


class Story:
    """Events at t = 1, 2, 3... in the order written."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, identity: str, kind: str, epoch: int | None = None, **detail: object) -> Story:
        self.events.append(Event(float(len(self.events) + 1), identity, kind, epoch, detail))
        return self

    def to(
        self, identity: str, old: str, new: str, epoch: int | None = None, cause: str = "x"
    ) -> Story:
        return self.add(identity, "transition", epoch, old=old, new=new, cause=cause)

    def lead(self, identity: str, epoch: int, was: str = "standby") -> Story:
        return self.to(identity, was, "active", epoch).add(identity, "start", epoch)

    def stop(self, identity: str, epoch: int, new: str = "neutral", cause: str = "x") -> Story:
        return self.add(identity, "stop", epoch).to(identity, "active", new, None, cause)

    def fence(self, identity: str, old: str, epoch: int | None) -> Story:
        return self.add(identity, "fence", epoch, old=old)


def copy(story: Story) -> Story:
    """The same events, to go on in another way."""
    other = Story()
    other.events = list(story.events)
    return other


def standbys(*names: str) -> Story:
    story = Story()
    for name in names:
        story.to(name, "neutral", "standby")
    return story


def violation(story: Story, match: str) -> None:
    with pytest.raises(SafetyViolation, match=match):
        check_history(story.events)


# --- property 2: the previous leader is fenced, or quit gracefully ----------------------------


def test_a_graceful_handover_needs_no_fence_and_epochs_may_have_gaps() -> None:
    story = standbys("a", "b").lead("a", 5).stop("a", 5, cause="quit").lead("b", 12)
    check_history(story.events)


@pytest.mark.parametrize("cause", ["disconnected", "local deadline passed"])
def test_a_quit_after_a_term_stopped_on_a_lost_contact_is_graceful(cause: str) -> None:
    """Its quit resigns its node and breadcrumb (machine.py, P13): nobody need fence it."""
    story = standbys("a", "b").lead("a", 5).stop("a", 5, cause=cause)
    violation(copy(story).lead("b", 12), "b started epoch 12 without fencing a")
    check_history(story.add("a", "quit").lead("b", 12).events)


@pytest.mark.parametrize("cause", ["disconnected", "local deadline passed"])
def test_a_quit_recorded_before_the_lost_contact_is_seen_is_graceful(cause: str) -> None:
    """The test records its quit at once; the machine may see the lost contact first, stop
    the term for it, then take the quit and resign once contact is back (P13). Found by
    test_cluster_property: crash 1, crash 1, disconnect 0, quit 0."""
    story = standbys("a", "b").lead("a", 5).add("a", "quit").stop("a", 5, cause=cause)
    check_history(story.lead("b", 12).events)


def test_a_quit_recorded_while_active_excuses_no_lost_session() -> None:
    story = standbys("a", "b").lead("a", 5).add("a", "quit")
    lost = story.stop("a", 5, new="fenced", cause="session expired")
    violation(lost.lead("b", 12), "without fencing a")


def test_a_quit_after_a_lost_term_or_after_the_takeover_is_no_excuse() -> None:
    lost = standbys("a", "b").lead("a", 5).stop("a", 5, new="fenced", cause="session expired")
    violation(lost.add("a", "quit").lead("b", 12), "without fencing a")
    late = standbys("a", "b").lead("a", 5).stop("a", 5, cause="disconnected").lead("b", 12)
    violation(late.add("a", "quit"), "without fencing a")


def test_a_crashed_leader_is_fenced_with_its_epoch() -> None:
    story = standbys("a", "b").lead("a", 5).add("a", "expire").fence("b", "a", 5).lead("b", 12)
    check_history(story.events)


def test_a_takeover_without_fencing_the_previous_leader_is_a_violation() -> None:
    story = standbys("a", "b").lead("a", 5).stop("a", 5).lead("b", 12)
    violation(story, "b started epoch 12 without fencing a \\(epoch 5\\)")


def test_a_fence_of_another_epoch_or_another_identity_does_not_count() -> None:
    base = standbys("a", "b", "c").lead("a", 5).stop("a", 5)
    for epoch, old in ((4, "a"), (5, "c"), (None, "a")):
        violation(copy(base).fence("b", old, epoch).lead("b", 12), "without fencing a")
    check_history(copy(base).fence("b", "a", 5).lead("b", 12).events)


def test_the_previous_leader_is_the_owner_of_the_greatest_epoch_below() -> None:
    # a, then b (fenced a), then a again in a new session: a must fence b, not itself
    story = standbys("a", "b").lead("a", 5).stop("a", 5, cause="lost")
    story.fence("b", "a", 5).lead("b", 9).stop("b", 9)
    story.to("a", "neutral", "standby")
    violation(copy(story).fence("a", "a", 5).lead("a", 14), "without fencing b \\(epoch 9\\)")
    check_history(story.fence("a", "b", 9).lead("a", 14).events)


def test_the_own_breadcrumb_needs_no_fence() -> None:
    story = standbys("a").lead("a", 5).stop("a", 5).to("a", "neutral", "standby").lead("a", 8)
    check_history(story.events)


# --- property 1: one identity per epoch, increasing across identities -------------------------


def test_the_same_leader_back_within_its_session_keeps_its_epoch() -> None:
    story = standbys("a", "b").lead("a", 5).stop("a", 5).lead("a", 5, was="neutral")
    check_history(story.events)


def test_an_epoch_made_active_by_two_identities_is_a_violation() -> None:
    story = standbys("a", "b").lead("a", 5).stop("a", 5, cause="quit").lead("b", 5)
    violation(story, "epoch 5 made active twice: a and b")


@pytest.mark.parametrize("back", ["a", "c"])
def test_an_epoch_below_a_newer_leaders_never_comes_back(back: str) -> None:
    story = standbys("a", "b", "c").lead("a", 5).stop("a", 5, cause="quit")
    story.lead("b", 9).stop("b", 9, cause="quit")
    if back == "a":
        violation(story.lead("a", 5, was="neutral"), "does not increase")
    else:
        violation(story.lead("c", 7), "does not increase")


def test_work_with_an_epoch_never_won_is_a_violation() -> None:
    story = standbys("a").add("a", "start", 5)
    violation(story, "a started work with epoch 5 it never won")
    other = standbys("a", "b").lead("a", 5).add("b", "start", 5)
    violation(other, "b started work with epoch 5 it never won")


# --- property 3: the old scope stopped before a new one started -------------------------------


def test_a_new_scope_while_the_old_one_runs_is_a_violation() -> None:
    story = standbys("a", "b").lead("a", 5).fence("b", "a", 5).lead("b", 9)
    violation(story, "b started epoch 9 while a still ran epoch 5")


def test_a_forced_expiry_excuses_a_scope_that_could_not_stop() -> None:
    story = standbys("a", "b").lead("a", 5).add("a", "expire").fence("b", "a", 5).lead("b", 9)
    check_history(story.events)


def test_a_crash_ends_the_work_of_the_crashed_process() -> None:
    # a test crashes a driver, then cancels the work: the others may act in between
    story = standbys("a", "b").lead("a", 5).add("a", "crash").fence("b", "a", 5).lead("b", 9)
    check_history(story.events)
    # a crash of another process, or one before the scope began, excuses nothing
    other = standbys("a", "b", "c").lead("a", 5).add("c", "crash").fence("b", "a", 5)
    violation(other.lead("b", 9), "b started epoch 9 while a still ran epoch 5")
    early = standbys("a", "b").add("a", "crash").lead("a", 5).fence("b", "a", 5)
    violation(early.lead("b", 9), "b started epoch 9 while a still ran epoch 5")


def test_each_scope_of_a_returning_leader_must_have_stopped() -> None:
    # a led with epoch 5, stopped, came back with it: the second scope never stopped
    story = standbys("a", "b").lead("a", 5).stop("a", 5).lead("a", 5, was="neutral")
    story.fence("b", "a", 5).lead("b", 9)
    violation(story, "b started epoch 9 while a still ran epoch 5")
    stopped = standbys("a", "b").lead("a", 5).stop("a", 5).lead("a", 5, was="neutral")
    check_history(stopped.stop("a", 5).fence("b", "a", 5).lead("b", 9).events)


# --- property 6: only the table's transitions -------------------------------------------------


def test_an_illegal_transition_is_a_violation() -> None:
    violation(Story().to("a", "neutral", "fenced"), "illegal transition")


def test_a_transition_from_a_state_it_was_not_in_is_a_violation() -> None:
    violation(Story().to("a", "standby", "neutral"), "transition from State.STANDBY but was")


@pytest.mark.anyio
async def test_a_scenario_that_breaks_a_property_fails_with_its_history() -> None:
    """A scenario's violation carries the events that led to it (a rerun seldom shows them)."""
    from tests.support.harness import cluster

    with pytest.raises(SafetyViolation, match=r"(?s)never won.*last 1:\n.*\"kind\": \"start\""):
        async with cluster() as c:
            c.history.add("x", "start", 7)
