"""The supervisor's eligibility rules, with no event loop and a clock that is a number: one test
per behaviour, an exhaustive check of every standing against every kind of fact, and a
Hypothesis stateful test in a world where a FIFO queue moves and requests are made as
``ha failover`` makes them."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import logging
import math
from collections.abc import Callable, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ha.admin import FailoverRequest
from ha.membership.rules import RESTART_DELAY, Decision, Eligibility, Standing, Verdict

ME, OTHER, TARGET = b"me", b"other", b"target"
T0 = 1000.0  # anyio's clock is arbitrary; the rules only compare its readings

_ids = itertools.count()


def request(
    epoch: int, to: bytes | None = TARGET, active: bytes = OTHER, cooldown: float = 30.0
) -> FailoverRequest:
    return FailoverRequest(f"r{next(_ids)}", active, epoch, to, cooldown, by="op")


def healthy() -> Eligibility:
    return Eligibility(ME, health_check=False)


def said(decision: Decision) -> list[str]:
    return [line for _, line in decision.say]


def honour(
    rules: Eligibility,
    now: float,
    req: FailoverRequest,
    epoch: int | None,
    queue: Sequence[bytes],
    leading: int | None = None,
    *,
    paused: bool = False,
    taken: bool = True,
) -> Decision:
    """A reading as ``follow_failover`` acts on it: the request taken (``taken``: the mark
    landed) when the rules ask for that, and the rules told the outcome."""
    decision = rules.failover_read(now, req, epoch, queue, leading, paused=paused)
    assert decision.take == (decision == Decision(take=True))  # nothing else done before it
    return rules.taken(now, req, taken) if decision.take else decision


# --- health -----------------------------------------------------------------------------------


def test_without_a_health_check_a_member_is_eligible_at_once() -> None:
    assert healthy().verdict(T0) == Verdict(Standing.ELIGIBLE)


def test_with_a_health_check_a_member_waits_for_the_first_pass() -> None:
    rules = Eligibility(ME, health_check=True)
    verdict = rules.verdict(T0)
    assert verdict.standing is Standing.WAITING_FOR_HEALTH
    assert verdict.note == "waiting for the first health check" and verdict.wake_at == math.inf
    decision = rules.health_checked(T0, True, "exit status 0")
    assert decision == Decision(wake=True, say=((logging.INFO, "health check passes: joining"),))
    assert rules.verdict(T0).eligible


def test_failing_health_checks_leave_at_the_threshold_and_a_pass_rejoins() -> None:
    rules = healthy()  # the threshold is 3, as Kubernetes probes' failureThreshold
    for count in (1, 2):
        decision = rules.health_checked(T0, False, "exit status 1")
        line = f"health check failed (exit status 1): {count} of 3, staying in"
        assert decision == Decision(renote=True, say=((logging.WARNING, line),))
        assert rules.verdict(T0) == Verdict(Standing.ELIGIBLE, f"health check failed {count} of 3")
    decision = rules.health_checked(T0, False, "exit status 1")
    assert decision.quit and decision.wake
    assert decision.say == (
        (
            logging.WARNING,
            "health check failed (exit status 1, 3 times in a row): leaving the election",
        ),
    )
    assert rules.verdict(T0 + 100).standing is Standing.UNHEALTHY
    assert rules.verdict(T0).note == "unhealthy"
    assert rules.health_checked(T0, False, "exit status 1") == Decision()  # no news
    assert rules.health_checked(T0, True, "exit status 0").wake  # one pass is enough
    assert rules.verdict(T0) == Verdict(Standing.ELIGIBLE)


def test_a_pass_under_the_threshold_clears_the_count() -> None:
    rules = healthy()
    rules.health_checked(T0, False, "no answer in 5s")
    rules.health_checked(T0, False, "no answer in 5s")
    decision = rules.health_checked(T0, True, "exit status 0")
    line = "health check passes again, after 2 of 3 failed"
    assert decision == Decision(renote=True, say=((logging.INFO, line),))
    assert rules.verdict(T0) == Verdict(Standing.ELIGIBLE)  # the note is gone
    assert rules.health_checked(T0, True, "exit status 0") == Decision()
    assert not rules.health_checked(T0, False, "exit status 1").quit  # counting from 1 again
    assert not rules.health_checked(T0, False, "exit status 1").quit
    assert rules.health_checked(T0, False, "exit status 1").quit


def test_a_threshold_of_one_leaves_on_the_first_failure() -> None:
    rules = Eligibility(ME, health_check=False, health_failures=1)
    decision = rules.health_checked(T0, False, "exit status 1")
    assert decision.quit and decision.wake
    assert said(decision) == ["health check failed (exit status 1): leaving the election"]
    assert rules.verdict(T0).standing is Standing.UNHEALTHY


@settings(max_examples=300, deadline=None)
@given(threshold=st.integers(1, 5), checks=st.lists(st.booleans(), max_size=40))
def test_a_member_leaves_exactly_after_threshold_failures_in_a_row(
    threshold: int, checks: list[bool]
) -> None:
    """Against a model of the rule: in after a pass; out once ``threshold`` checks in a row
    have failed, or on any failure before the first pass; the note counts the failures."""
    rules = Eligibility(ME, health_check=True, health_failures=threshold)
    healthy: bool | None = None  # the model's: None before the first answer
    in_a_row = 0
    for ok in checks:
        before = rules.verdict(T0)
        decision = rules.health_checked(T0, ok, "exit status 1")
        in_a_row = 0 if ok else in_a_row + 1
        was, healthy = healthy, ok or (healthy is True and in_a_row < threshold)
        verdict = rules.verdict(T0)
        assert verdict.eligible == healthy
        assert decision.quit == (was is not False and not healthy)  # out: said once
        assert decision.wake == (was != healthy)
        if healthy:
            expected = f"health check failed {in_a_row} of {threshold}" if in_a_row else ""
            assert verdict.note == expected
            assert decision.renote == (was is True and verdict.note != before.note)
        assert rules.failures <= threshold  # nothing grows while a check keeps failing


def test_a_first_failing_check_leaves_without_ever_joining() -> None:
    rules = Eligibility(ME, health_check=True)
    assert rules.health_checked(T0, False, "no answer in 5s").quit
    assert rules.verdict(T0).standing is Standing.UNHEALTHY


# --- cooldown after COMMAND ended -------------------------------------------------------------


def test_command_ending_leaves_for_a_delay_that_doubles_up_to_a_cap() -> None:
    rules = healthy()
    now, delays = T0, []
    for _ in range(7):
        decision = rules.command_ended(now, "server exited (exit status 3)", ran=1.0)
        assert decision.quit and decision.wake
        verdict = rules.verdict(now)
        assert verdict.standing is Standing.COOLING_DOWN
        delays.append(verdict.wake_at - now)
        assert said(decision) == [f"leaving the election for {delays[-1]:.0f}s"]
        assert decision.say[0][0] == logging.WARNING
        now = verdict.wake_at
        assert rules.verdict(now).eligible
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, RESTART_DELAY[1], RESTART_DELAY[1]]


def test_a_long_run_starts_the_delay_again() -> None:
    rules = healthy()
    for _ in range(4):
        rules.command_ended(T0, "exited", ran=1.0)
    rules.command_ended(T0 + 100, "exited", ran=61.0)
    assert rules.verdict(T0 + 100).wake_at == T0 + 100 + RESTART_DELAY[0]


def test_the_cooldown_note_counts_down() -> None:
    rules = healthy()
    rules.command_ended(T0, "cannot start server", ran=0.0)
    verdict = rules.verdict(T0 + 0.25)
    assert verdict.note == "cannot start server: rejoining in 0.8s"
    assert verdict.cause == "cannot start server"  # the same while the reason is


def test_unhealthy_shows_before_a_cooldown_and_the_cooldown_still_counts() -> None:
    rules = Eligibility(ME, health_check=False, health_failures=1)
    rules.command_ended(T0, "exited", ran=1.0)
    rules.health_checked(T0, False, "exit status 1")
    verdict = rules.verdict(T0)
    assert verdict.standing is Standing.UNHEALTHY and verdict.wake_at == T0 + 1.0
    rules.health_checked(T0 + 0.5, True, "exit status 0")
    assert rules.verdict(T0 + 0.5).standing is Standing.COOLING_DOWN


# --- graceful failover: the active cedes ------------------------------------------------------


def test_the_active_of_the_requests_epoch_cedes_and_stands_by_at_once() -> None:
    """#30: the old active joins again behind the new one at once (Patroni's switchover),
    not after the cooling period: a pair keeps its standby through a failover."""
    rules = healthy()
    req = request(4, to=None, active=ME, cooldown=10.0)
    assert rules.failover_read(T0, req, 4, (ME, OTHER), leading=4) == Decision(take=True)
    decision = rules.taken(T0, req, True)
    assert decision.quit and decision.wake
    assert said(decision) == [
        "graceful failover to any standby asked by op: ceding, then standing by"
    ]
    assert rules.verdict(T0).eligible  # it joins again at once, at the back of the queue
    assert rules.failover_read(T0 + 1, req, 4, (OTHER, ME), leading=None) == Decision()  # once


def test_a_lone_active_forced_to_cede_stays_out_for_the_cooling_period() -> None:
    rules = healthy()
    req = request(4, to=None, active=ME, cooldown=10.0)
    assert rules.failover_read(T0, req, 4, (ME,), leading=4) == Decision(take=True)
    decision = rules.taken(T0, req, True)
    assert decision.quit and said(decision) == [
        "graceful failover to any standby asked by op: ceding (forced: nobody to hand over to)"
    ]
    verdict = rules.verdict(T0)
    assert verdict.standing is Standing.COOLING_DOWN and verdict.wake_at == T0 + 10.0
    assert verdict.note == "ceded the lead: rejoining in 10.0s"
    assert rules.verdict(T0 + 10.0).eligible


def test_a_cede_names_the_target_when_it_is_next() -> None:
    rules = healthy()
    decision = honour(rules, T0, request(4, active=ME), 4, (ME, TARGET, OTHER), leading=4)
    assert decision.quit
    assert said(decision) == ["graceful failover to 'target' asked by op: ceding, then standing by"]


def test_the_active_of_another_epoch_does_not_cede() -> None:
    rules = healthy()
    req = request(4, to=None, active=ME)
    assert rules.failover_read(T0, req, 4, (ME, OTHER), leading=5) == Decision()
    assert rules.verdict(T0).eligible


def test_a_request_whose_epoch_is_over_is_history() -> None:
    rules = healthy()
    req = request(4, to=TARGET)
    assert rules.failover_read(T0, req, 9, (OTHER, ME, TARGET)) == Decision()
    assert req.id in rules.handled and not rules.pending
    # even if read again at its epoch: a member ahead of the target stays where it is
    assert rules.failover_read(T0, req, 4, (OTHER, ME, TARGET)) == Decision()
    assert rules.verdict(T0).eligible


# --- the active waits until the target is next ------------------------------------------------


def test_the_active_waits_until_the_target_is_next_then_cedes() -> None:
    rules = healthy()
    req = request(4, to=TARGET, active=ME, cooldown=20.0)
    decision = rules.failover_read(T0, req, 4, (ME, OTHER, TARGET), leading=4)
    assert decision == Decision(
        say=(
            (
                logging.INFO,
                "failover to 'target' asked: waiting until it is next ('other' ahead of it)",
            ),
        )
    )
    assert rules.pending and rules.verdict(T0).eligible  # still active, reading soon again
    # said once; the queue moves: 'other' joined again behind the target
    assert rules.failover_read(T0 + 1, req, 4, (ME, OTHER, TARGET), leading=4) == Decision()
    decision = honour(rules, T0 + 2, req, 4, (ME, TARGET, OTHER), leading=4)
    assert decision.quit and said(decision) == [
        "graceful failover to 'target' asked by op: ceding, then standing by"
    ]
    assert rules.verdict(T0 + 2).eligible  # behind the target at once
    assert not rules.pending
    assert rules.failover_read(T0 + 3, req, 4, (TARGET, OTHER)) == Decision()


def test_the_active_drops_a_request_whose_target_never_gets_next() -> None:
    rules = healthy()
    req = request(4, to=TARGET, active=ME, cooldown=5.0)
    assert not rules.failover_read(T0, req, 4, (ME, OTHER), leading=4).quit
    assert said(rules.failover_read(T0, req, 4, (ME, OTHER), leading=4)) == []
    assert rules.failover_read(T0 + 4.99, req, 4, (ME, OTHER), leading=4) == Decision()
    decision = rules.failover_read(T0 + 5.0, req, 4, (ME, OTHER), leading=4)
    assert decision == Decision(
        say=(
            (
                logging.WARNING,
                "failover to 'target' dropped: not next in the queue after 5s"
                " (it is not in the queue); staying active",
            ),
        )
    )
    assert req.id in rules.handled and not rules.pending and rules.verdict(T0 + 5).eligible
    # too late: the target next now changes nothing
    assert rules.failover_read(T0 + 6, req, 4, (ME, TARGET), leading=4) == Decision()


def test_a_newer_request_replaces_the_one_the_active_waits_for() -> None:
    rules = healthy()
    rules.failover_read(T0, request(4, to=TARGET, active=ME), 4, (ME, OTHER, TARGET), leading=4)
    newer = request(4, to=OTHER, active=ME, cooldown=2.0)
    decision = honour(rules, T0 + 1, newer, 4, (ME, OTHER, TARGET), leading=4)
    assert decision.quit and said(decision) == [
        "graceful failover to 'other' asked by op: ceding, then standing by"
    ]


# --- the active takes the request before it cedes ----------------------------------------------


def test_a_request_that_changed_before_it_was_taken_is_read_again() -> None:
    rules = healthy()
    req = request(4, to=None, active=ME)
    assert rules.failover_read(T0, req, 4, (ME, OTHER), leading=4) == Decision(take=True)
    # cleared by `ha pause`, or replaced: nothing is done, and the request is read again soon
    assert rules.taken(T0, req, False) == Decision()
    assert rules.pending and req.id not in rules.handled and rules.verdict(T0).eligible
    assert rules.failover_read(T0 + 0.2, None, 4, (ME, OTHER), leading=4) == Decision()
    assert not rules.pending and rules.verdict(T0 + 0.2).eligible


@pytest.mark.parametrize("queue", [(ME, TARGET), (ME, OTHER, TARGET), (ME,)], ids=str)
def test_a_request_read_taken_already_cedes_without_taking_it_again(
    queue: tuple[bytes, ...],
) -> None:
    # our mark landed but its answer was lost: the next reading shows it ours, and we cede
    # even if the target is no longer next (`ha pause` refuses while the mark says we cede)
    rules = healthy()
    req = dataclasses.replace(request(4, to=TARGET, active=ME), ceding=True)
    decision = rules.failover_read(T0, req, 4, queue, leading=4)
    assert decision.quit and not decision.take
    then = " (forced: nobody to hand over to)" if queue == (ME,) else ", then standing by"
    assert said(decision) == ["graceful failover to 'target' asked by op: ceding" + then]


# --- paused: no failover ----------------------------------------------------------------------


@pytest.mark.parametrize("queue", [(ME, TARGET, OTHER), (ME, OTHER, TARGET)], ids=str)
def test_paused_the_active_drops_a_pending_request_and_stays(queue: tuple[bytes, ...]) -> None:
    rules = healthy()
    req = request(4, to=TARGET, active=ME)
    decision = rules.failover_read(T0, req, 4, queue, leading=4, paused=True)
    assert decision == Decision(
        say=(
            (
                logging.WARNING,
                "failover to 'target' dropped: the election is paused; staying active",
            ),
        )
    )
    assert req.id in rules.handled and not rules.pending and rules.verdict(T0).eligible
    # over for good: after the resume the same request asks nothing
    assert rules.failover_read(T0 + 1, req, 4, (ME, TARGET, OTHER), leading=4) == Decision()


def test_paused_a_standby_ahead_of_the_target_stays_where_it_is() -> None:
    rules = healthy()
    req = request(4, to=TARGET)
    assert rules.failover_read(T0, req, 4, (OTHER, ME, TARGET), paused=True) == Decision()
    assert req.id in rules.handled and not rules.pending
    assert rules.failover_read(T0 + 1, req, 4, (OTHER, ME, TARGET)) == Decision()


def test_paused_a_request_taken_already_is_dropped_too() -> None:
    # taken (its answer lost) before a pause written in a race with it: COMMAND still runs
    rules = healthy()
    req = dataclasses.replace(request(4, to=None, active=ME), ceding=True)
    decision = rules.failover_read(T0, req, 4, (ME, OTHER), leading=4, paused=True)
    assert not decision.quit and not decision.take and rules.verdict(T0).eligible


# --- the others: ahead of the target, join again behind it; behind it, stay -------------------


def test_a_standby_ahead_of_the_target_joins_again_behind_it() -> None:
    rules = healthy()
    req = request(4, to=TARGET, cooldown=20.0)
    decision = rules.failover_read(T0, req, 4, (OTHER, ME, TARGET))
    assert decision == Decision(
        quit=True, say=((logging.INFO, "failover to 'target' pending: joining again behind it"),)
    )
    # no cooling period: it takes part again at once, at the back of the queue
    assert rules.verdict(T0) == Verdict(Standing.ELIGIBLE)
    assert req.id in rules.handled and not rules.pending
    # once: a reading from before the move changes nothing
    assert rules.failover_read(T0, req, 4, (OTHER, ME, TARGET)) == Decision()
    assert rules.failover_read(T0, req, 4, (OTHER, TARGET, ME)) == Decision()


def test_a_standby_behind_the_target_stays_and_looks_for_the_cooling_period() -> None:
    rules = healthy()
    req = request(4, to=TARGET, cooldown=3.0)
    assert rules.failover_read(T0, req, 4, (OTHER, TARGET, ME)) == Decision()
    assert rules.verdict(T0).eligible and rules.pending
    # the target left and came back behind us within the period: now we are ahead of it
    assert rules.failover_read(T0 + 1, req, 4, (OTHER, ME, TARGET)).quit
    later = healthy()
    later.failover_read(T0, req, 4, (OTHER, TARGET, ME))
    assert later.failover_read(T0 + 3.0, req, 4, (OTHER, TARGET, ME)) == Decision()
    assert not later.pending and req.id in later.handled  # nothing asked of us: stop looking
    assert later.failover_read(T0 + 4, req, 4, (OTHER, ME, TARGET)) == Decision()


@pytest.mark.parametrize("to", [ME, None], ids=["to-me", "to-any"])
def test_the_target_and_a_request_to_any_standby_keep_a_standby_in(to: bytes | None) -> None:
    rules = healthy()
    assert rules.failover_read(T0, request(4, to=to), 4, (OTHER, ME, TARGET)) == Decision()
    assert rules.verdict(T0).eligible


@pytest.mark.parametrize("queue", [(), (OTHER, TARGET)], ids=["empty", "without-me"])
def test_a_member_out_of_the_queue_does_nothing(queue: tuple[bytes, ...]) -> None:
    rules = healthy()
    epoch = 4 if queue else None
    assert rules.failover_read(T0, request(4), epoch, queue) == Decision()
    assert rules.verdict(T0).eligible


# --- every standing against every kind of fact ------------------------------------------------


def standings() -> dict[str, Callable[[], Eligibility]]:
    def make(*steps: Callable[[Eligibility], object]) -> Callable[[], Eligibility]:
        def build() -> Eligibility:
            rules = Eligibility(ME, health_check=True)
            rules.health_checked(T0, True, "")
            for step in steps:
                step(rules)
            return rules

        return build

    def wait(rules: Eligibility) -> object:
        req = request(4, TARGET, ME, cooldown=2.0)
        return rules.failover_read(T0, req, 4, (ME, OTHER, TARGET), leading=4)

    def behind(rules: Eligibility) -> object:
        return rules.failover_read(T0, request(4, cooldown=2.0), 4, (OTHER, TARGET, ME))

    return {
        "eligible": make(),
        "waiting": lambda: Eligibility(ME, health_check=True),
        "unhealthy": make(*[lambda r: r.health_checked(T0, False, "")] * 3),
        "failed 2 of 3": make(*[lambda r: r.health_checked(T0, False, "")] * 2),
        "cooling": make(lambda r: r.command_ended(T0, "exited", 1.0)),
        "active waiting for the target": make(wait),
        "behind the target": make(behind),
        "cooling+unhealthy": make(
            lambda r: r.command_ended(T0, "exited", 1.0),
            *[lambda r: r.health_checked(T0, False, "")] * 3,
        ),
    }


Fact = Callable[[Eligibility, float], Decision]

QUEUES: tuple[tuple[bytes, ...], ...] = (
    (),
    (ME,),
    (ME, TARGET, OTHER),
    (ME, OTHER, TARGET),
    (OTHER, ME, TARGET),
    (OTHER, TARGET, ME),
    (TARGET, ME),
)


def read(
    to: bytes | None,
    active: bytes,
    epoch: int,
    queue: Sequence[bytes],
    leading: int | None,
    paused: bool,
    taken: bool,
) -> Fact:
    def fact(rules: Eligibility, now: float) -> Decision:
        req = request(4, to, active, 3.0)
        decision = honour(rules, now, req, epoch, queue, leading, paused=paused, taken=taken)
        assert not (paused and decision.quit), "a failover while paused"
        return decision

    return fact


def facts() -> dict[str, Fact]:
    found: dict[str, Fact] = {
        "health-pass": lambda r, now: r.health_checked(now, True, "exit status 0"),
        "health-fail": lambda r, now: r.health_checked(now, False, "exit status 1"),
        "exited-quickly": lambda r, now: r.command_ended(now, "exited", 1.0),
        "exited-late": lambda r, now: r.command_ended(now, "exited", 100.0),
        "read nothing, epoch 5": lambda r, now: r.failover_read(now, None, 5, (OTHER, ME)),
    }
    for to, active in itertools.product((None, ME, TARGET), (ME, OTHER)):
        for epoch, queue, leading in itertools.product((3, 4, 5), QUEUES, (None, 4)):
            for paused, taken in itertools.product((False, True), (True, False)):
                key = (
                    f"read to={to!r},active={active!r} epoch={epoch} {queue} leading={leading}"
                    f" paused={paused} taken={taken}"
                )
                found[key] = read(to, active, epoch, queue, leading, paused, taken)
    return found


def check_decision(before: Eligibility, fact: Fact) -> None:
    for now in (T0, T0 + 1.5, T0 + 10.0):  # inside and after the periods
        rules = copy.deepcopy(before)
        old = rules.verdict(now)
        was = old.eligible
        decision = fact(rules, now)
        verdict = rules.verdict(now)
        if was and not verdict.eligible:  # never stay in the election while out
            assert decision.quit
        if was and verdict.eligible and verdict.note != old.note:  # ha status shows it
            assert decision.renote
        if not was and verdict.eligible:  # the waiting loop learns at once
            assert decision.wake
        if decision.quit:  # a member never leaves without saying why
            assert decision.say
        assert all(level in (logging.INFO, logging.WARNING) for level, _ in decision.say)
        check_verdict(rules, now)


def check_verdict(rules: Eligibility, now: float) -> None:
    """The verdict's wake time is in the future and nothing changes by the clock before it."""
    verdict = rules.verdict(now)
    assert verdict.wake_at > now
    if verdict.standing is Standing.COOLING_DOWN:
        assert verdict.wake_at < math.inf  # the clock alone brings it back
    if verdict.wake_at < math.inf:
        probe = copy.deepcopy(rules)
        assert probe.verdict((now + verdict.wake_at) / 2).standing is verdict.standing
        later = probe.verdict(verdict.wake_at)
        assert later.standing is not verdict.standing or later.wake_at > verdict.wake_at
    if verdict.eligible:
        assert rules.healthy and now >= rules.cool_until


def test_every_standing_against_every_fact() -> None:
    cases = 0
    for build in standings().values():
        for fact in facts().values():
            check_decision(build(), fact)
            cases += 1
    assert cases == 8 * (5 + 3 * 2 * 3 * len(QUEUES) * 2 * 2 * 2)


# --- a stateful world -------------------------------------------------------------------------


class World(RuleBasedStateMachine):
    """One supervisor's rules in a world with a FIFO queue, whose leader's token is the epoch,
    and requests made as ``ha failover`` makes them (naming the leader and its epoch; only the
    latest one is read). The model knows the spec, not the rules' state: it checks that the
    rules never let the member in while unhealthy or inside a cooldown it was owed, that it
    leaves exactly when the spec says (the active once the one asked for is next, a member
    ahead of the target at once), and that it acts on each request once."""

    def __init__(self) -> None:
        super().__init__()
        self.member = Eligibility(ME, health_check=True)
        self.now = T0
        self.tokens = itertools.count(10)
        self.queue: list[tuple[bytes, int]] = [(OTHER, next(self.tokens))]
        self.request: FailoverRequest | None = None
        self.done: set[str] = set()  # requests over for us: acted on, history, or looked past
        self.opened: dict[str, float] = {}  # request id -> end of its period (first reading)
        self.healthy: bool | None = None
        self.threshold = 3
        self.failed = 0  # health checks failed in a row
        self.cool_until = -math.inf
        self.paused = False

    @initialize(threshold=st.integers(1, 4))
    def health_threshold(self, threshold: int) -> None:
        self.threshold = threshold
        self.member = Eligibility(ME, health_check=True, health_failures=threshold)

    @property
    def order(self) -> tuple[bytes, ...]:
        return tuple(identity for identity, _ in self.queue)

    @property
    def epoch(self) -> int | None:
        return self.queue[0][1] if self.queue else None

    @property
    def eligible(self) -> bool:
        return copy.deepcopy(self.member).verdict(self.now).eligible

    def decide(self, fact: Callable[[Eligibility], Decision]) -> Decision:
        was = self.eligible
        decision = fact(self.member)
        now_in = self.eligible
        if was and not now_in:
            assert decision.quit
        if not was and now_in:
            assert decision.wake
        return decision

    def leave(self) -> None:
        self.queue = [(i, t) for i, t in self.queue if i != ME]

    # the world

    @rule(dt=st.floats(0.0, 40.0))
    def time_passes(self, dt: float) -> None:
        self.now += dt

    @rule(who=st.sampled_from([OTHER, TARGET]))
    def someone_joins(self, who: bytes) -> None:
        if who not in self.order:
            self.queue.append((who, next(self.tokens)))

    @rule(who=st.sampled_from([OTHER, TARGET]))
    def someone_leaves(self, who: bytes) -> None:
        self.queue = [(i, t) for i, t in self.queue if i != who]

    @rule()
    def we_take_part_again(self) -> None:
        # the supervisor's loop: out of the queue and eligible, it joins at the back
        if ME not in self.order and self.eligible:
            self.queue.append((ME, next(self.tokens)))

    @rule(to=st.sampled_from([None, ME, TARGET, OTHER]), cooldown=st.floats(0.5, 60.0))
    def operator_asks_for_a_failover(self, to: bytes | None, cooldown: float) -> None:
        if self.queue and self.queue[0][0] != to:
            self.request = request(self.queue[0][1], to, self.queue[0][0], cooldown)

    @rule()
    def operator_pauses(self) -> None:
        # `ha pause` clears a pending request; one asked for later came in a race with it
        if self.request is not None and self.request.epoch == self.epoch:
            self.request = None
        self.paused = True

    @rule()
    def operator_resumes(self) -> None:
        self.paused = False

    # what the supervisor reads and is told

    @rule(ok=st.booleans())
    def health_checked(self, ok: bool) -> None:
        decision = self.decide(lambda r: r.health_checked(self.now, ok, "exit status"))
        self.failed = 0 if ok else self.failed + 1
        if ok:
            self.healthy = True
        elif self.healthy is not True or self.failed >= self.threshold:
            # leaves on the failure that reaches the threshold (on any before the first pass)
            assert decision.quit or self.healthy is False
            self.healthy = False
            self.leave()
        else:
            assert not decision.quit  # under the threshold: stays where it is

    @precondition(lambda self: self.queue and self.queue[0][0] == ME)
    @rule(ran=st.floats(0.0, 100.0))
    def command_ended(self, ran: float) -> None:
        decision = self.decide(lambda r: r.command_ended(self.now, "exited", ran))
        assert decision.quit
        self.cool_until = max(self.cool_until, self.now + RESTART_DELAY[0])
        self.leave()

    @rule(taken=st.booleans())
    def failover_read(self, taken: bool) -> None:
        """``taken``: whether the mark lands, if the rules ask to take the request (it does
        not when the request changed since it was read, or its answer is lost)."""
        req, epoch, order, paused = self.request, self.epoch, self.order, self.paused
        leading = epoch if order[:1] == (ME,) else None

        def read(rules: Eligibility) -> Decision:
            decision = rules.failover_read(self.now, req, epoch, order, leading, paused=paused)
            if not decision.take:
                return decision
            assert req is not None and not decision.quit
            return rules.taken(self.now, req, taken)

        decision = self.decide(read)
        expected = self.spec(req, epoch, order, leading, paused, taken)
        assert decision.quit == (expected is not None), (expected, decision)
        if expected == "cede":
            assert req is not None
            if all(who == ME for who in order):  # alone: forced, it stays out
                self.cool_until = max(self.cool_until, self.now + req.cooldown)
                assert not self.eligible
            else:  # a standby behind the new active at once (#30)
                assert self.eligible == (self.healthy is True and self.now >= self.cool_until)
        elif expected == "requeue":
            assert self.eligible == (self.healthy is True and self.now >= self.cool_until)
        if decision.quit:
            self.leave()

    def spec(
        self,
        req: FailoverRequest | None,
        epoch: int | None,
        order: tuple[bytes, ...],
        leading: int | None,
        paused: bool,
        taken: bool,
    ) -> str | None:
        """What the spec asks of us on this reading: cede, requeue, or nothing (None)."""
        if req is None or req.id in self.done:
            return None
        if req.epoch != epoch:
            self.done.add(req.id)  # history
            return None
        until = self.opened.setdefault(req.id, self.now + req.cooldown)
        to = req.to
        if paused:
            self.done.add(req.id)  # no failover while paused: dropped by everyone
            return None
        if leading == req.epoch and req.active == ME:
            if to is None or order[1:2] == (to,):
                if not taken:
                    return None  # not ours to honour (yet): read again
                self.done.add(req.id)
                return "cede"  # the next in the queue is the one asked for
        elif to not in (None, ME) and ME in order and to in order:
            if 0 < order.index(ME) < order.index(to):
                self.done.add(req.id)
                return "requeue"
        if self.now >= until:
            self.done.add(req.id)  # dropped, or nothing asked of us in its period
        return None

    @invariant()
    def out_when_owed(self) -> None:
        if self.eligible:
            assert self.healthy is True, "in the election while unhealthy or unchecked"
            assert self.now >= self.cool_until, "in the election inside a cooldown"

    @invariant()
    def verdict_is_consistent(self) -> None:
        check_verdict(copy.deepcopy(self.member), self.now)


World.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestWorld = World.TestCase
