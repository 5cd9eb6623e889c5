"""The supervisor's eligibility rules, with no event loop and a clock that is a number: one test
per behaviour, an exhaustive check of every standing against every kind of fact, and a
Hypothesis stateful test in a world where epochs move and requests are made as ``ha failover``
makes them."""

from __future__ import annotations

import copy
import itertools
import logging
import math
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ha.admin import FailoverRequest
from ha.supervisor.eligibility import (
    RESTART_DELAY,
    UNKNOWN,
    Decision,
    Eligibility,
    Standing,
    Verdict,
)

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


def test_a_failing_health_check_leaves_at_once_and_a_pass_rejoins() -> None:
    rules = healthy()
    decision = rules.health_checked(T0, False, "exit status 1")
    assert decision.quit and decision.wake
    assert decision.say == (
        (logging.WARNING, "health check failed (exit status 1): leaving the election"),
    )
    assert rules.verdict(T0 + 100).standing is Standing.UNHEALTHY
    assert rules.verdict(T0).note == "unhealthy"
    assert rules.health_checked(T0, False, "exit status 1") == Decision()  # no news
    assert rules.health_checked(T0, True, "exit status 0").wake
    assert rules.verdict(T0).eligible


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
    rules = healthy()
    rules.command_ended(T0, "exited", ran=1.0)
    rules.health_checked(T0, False, "exit status 1")
    verdict = rules.verdict(T0)
    assert verdict.standing is Standing.UNHEALTHY and verdict.wake_at == T0 + 1.0
    rules.health_checked(T0 + 0.5, True, "exit status 0")
    assert rules.verdict(T0 + 0.5).standing is Standing.COOLING_DOWN


# --- graceful failover: the active cedes ------------------------------------------------------


def test_the_active_of_the_requests_epoch_cedes_and_cools_down() -> None:
    rules = healthy()
    req = request(4, to=None, active=ME, cooldown=10.0)
    decision = rules.failover_read(T0, req, 4, leading=4)
    assert decision.quit and decision.wake
    assert said(decision) == ["graceful failover to any standby asked by op: ceding"]
    verdict = rules.verdict(T0)
    assert verdict.standing is Standing.COOLING_DOWN and verdict.wake_at == T0 + 10.0
    assert verdict.note == "ceded the lead: rejoining in 10.0s"
    assert rules.failover_read(T0 + 1, req, 4, leading=None) == Decision()  # acted on once
    assert rules.verdict(T0 + 10.0).eligible


def test_a_cede_names_the_target() -> None:
    rules = healthy()
    decision = rules.failover_read(T0, request(4, to=TARGET, active=ME), 4, leading=4)
    assert said(decision) == ["graceful failover to 'target' asked by op: ceding"]


def test_the_active_of_another_epoch_does_not_cede() -> None:
    rules = healthy()
    req = request(4, to=None, active=ME)
    assert rules.failover_read(T0, req, 4, leading=5) == Decision()
    assert rules.verdict(T0).eligible


def test_a_request_whose_epoch_is_over_is_history() -> None:
    rules = healthy()
    req = request(4, to=TARGET)
    assert rules.failover_read(T0, req, 5) == Decision()
    assert req.id in rules.handled
    assert rules.failover_read(T0, req, 4) == Decision()  # even if read again at its epoch
    assert rules.verdict(T0).eligible


# --- graceful failover: the others step aside -------------------------------------------------


def test_a_request_to_another_member_makes_this_one_step_aside() -> None:
    rules = healthy()
    decision = rules.failover_read(T0, request(4, to=TARGET, cooldown=20.0), 4)
    assert decision.quit and decision.wake
    assert said(decision) == ["failover to 'target' pending: stepping aside"]
    verdict = rules.verdict(T0)
    assert verdict.standing is Standing.STEPPING_ASIDE and rules.stepping_aside
    assert verdict.note == "stepping aside for a failover to 'target'"
    assert verdict.wake_at == T0 + 20.0


@pytest.mark.parametrize("to", [ME, None], ids=["to-me", "to-any"])
def test_the_target_and_a_request_to_any_standby_keep_a_standby_in(to: bytes | None) -> None:
    rules = healthy()
    assert rules.failover_read(T0, request(4, to=to), 4) == Decision()
    assert rules.verdict(T0).eligible


def test_the_step_aside_ends_once_the_target_holds_the_lock_past_the_epoch() -> None:
    rules = healthy()
    req = request(4)
    rules.failover_read(T0, req, 4)
    assert rules.failover_read(T0 + 1, req, 4, holder=None) == Decision()  # still pending
    # a newer epoch held by no one or someone else: a non-target won and gave way
    assert rules.failover_read(T0 + 2, req, 5, holder=None) == Decision()
    assert rules.failover_read(T0 + 3, req, 6, holder=OTHER) == Decision()
    assert not rules.verdict(T0 + 3).eligible
    decision = rules.failover_read(T0 + 4, req, 6, holder=TARGET)
    assert decision == Decision(
        wake=True, say=((logging.INFO, "the failover is done (epoch 6): rejoining"),)
    )
    assert rules.verdict(T0 + 4).eligible and not rules.stepping_aside
    assert rules.failover_read(T0 + 5, req, 6, holder=TARGET) == Decision()


def test_a_newer_epoch_ends_the_step_aside_when_the_holder_was_not_read() -> None:
    rules = healthy()
    req = request(2)
    rules.failover_read(T0, req, 2)
    rules.failover_read(T0, req, 2, holder=UNKNOWN)
    assert not rules.verdict(T0).eligible
    assert rules.failover_read(T0, req, 3, holder=UNKNOWN).wake
    assert rules.verdict(T0).eligible


def test_the_step_aside_ends_with_its_cooling_period_on_our_clock() -> None:
    rules = healthy()
    req = request(4, cooldown=5.0)
    rules.failover_read(T0, req, 4)
    assert not rules.verdict(T0 + 4.99).eligible
    assert rules.verdict(T0 + 5.0).eligible
    assert rules.failover_read(T0 + 6, req, 4) == Decision()  # the target never came: done


def test_a_newer_request_replaces_the_step_aside() -> None:
    rules = healthy()
    rules.failover_read(T0, request(4, to=TARGET, cooldown=30.0), 4)
    newer = request(4, to=OTHER, cooldown=2.0)
    assert said(rules.failover_read(T0 + 1, newer, 4)) == [
        "failover to 'other' pending: stepping aside"
    ]
    assert rules.verdict(T0 + 1).note == "stepping aside for a failover to 'other'"
    assert rules.verdict(T0 + 3.0).eligible


# --- winning the lock while a request is pending ----------------------------------------------


def test_a_winner_gives_way_to_a_pending_failover_target() -> None:
    rules = healthy()
    req = request(1)
    decision = rules.lock_won(T0, req, 2)
    assert decision.quit
    assert said(decision) == ["won while a failover to 'target' is pending: ceding"]
    assert rules.verdict(T0).note == "stepping aside for a failover to 'target'"
    assert rules.failover_read(T0, req, 2) == Decision()  # still epoch 2: not yet
    assert rules.failover_read(T0, req, 3).wake  # the target took over
    assert rules.verdict(T0).eligible


@pytest.mark.parametrize(
    "req",
    [None, request(1, to=ME), request(1, to=None), request(0), request(2)],
    ids=["none", "to-me", "to-any", "older", "newer"],
)
def test_a_winner_keeps_the_lock_otherwise(req: FailoverRequest | None) -> None:
    rules = healthy()
    assert rules.lock_won(T0, req, 2) == Decision()
    assert rules.verdict(T0).eligible


def test_a_winner_keeps_the_lock_for_a_request_already_acted_on() -> None:
    rules = healthy()
    req = request(1, cooldown=1.0)
    rules.failover_read(T0, req, 1)  # stepped aside, until its cooling period ended
    assert rules.verdict(T0 + 1.0).eligible
    assert rules.lock_won(T0 + 1.0, req, 2) == Decision()


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

    return {
        "eligible": make(),
        "waiting": lambda: Eligibility(ME, health_check=True),
        "unhealthy": make(lambda r: r.health_checked(T0, False, "")),
        "cooling": make(lambda r: r.command_ended(T0, "exited", 1.0)),
        "aside": make(lambda r: r.failover_read(T0, request(4, cooldown=2.0), 4)),
        "cooling+aside": make(
            lambda r: r.failover_read(T0, request(4, cooldown=5.0), 4),
            lambda r: r.command_ended(T0, "exited", 1.0),
        ),
        "unhealthy+aside": make(
            lambda r: r.failover_read(T0, request(4, cooldown=2.0), 4),
            lambda r: r.health_checked(T0, False, ""),
        ),
    }


Fact = Callable[[Eligibility, float], Decision]


def read(to: bytes | None, active: bytes, epoch: int, holder: object, leading: int | None) -> Fact:
    def fact(rules: Eligibility, now: float) -> Decision:
        req = request(4, to, active, 3.0)
        return rules.failover_read(now, req, epoch, holder, leading)  # type: ignore[arg-type]

    return fact


def won(to: bytes | None, active: bytes, epoch: int) -> Fact:
    def fact(rules: Eligibility, now: float) -> Decision:
        return rules.lock_won(now, request(epoch - 1, to, active, 3.0), epoch)

    return fact


def facts() -> dict[str, Fact]:
    found: dict[str, Fact] = {
        "health-pass": lambda r, now: r.health_checked(now, True, "exit status 0"),
        "health-fail": lambda r, now: r.health_checked(now, False, "exit status 1"),
        "exited-quickly": lambda r, now: r.command_ended(now, "exited", 1.0),
        "exited-late": lambda r, now: r.command_ended(now, "exited", 100.0),
        "read nothing, epoch 5": lambda r, now: r.failover_read(now, None, 5),
    }
    for to, active in itertools.product((None, ME, TARGET), (ME, OTHER)):
        name = f"to={to!r},active={active!r}"
        for epoch in (3, 4, 5):
            found[f"won {name} epoch={epoch}"] = won(to, active, epoch)
            for holder, leading in itertools.product((UNKNOWN, None, TARGET, ME), (None, 4)):
                key = f"read {name} epoch={epoch} holder={holder!r} leading={leading}"
                found[key] = read(to, active, epoch, holder, leading)
    return found


def check_decision(before: Eligibility, fact: Fact) -> None:
    for now in (T0, T0 + 1.5, T0 + 10.0):  # inside and after the periods
        rules = copy.deepcopy(before)
        was = rules.verdict(now).eligible
        decision = fact(rules, now)
        verdict = rules.verdict(now)
        if was and not verdict.eligible:  # never stay in the election while out
            assert decision.quit
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
    if verdict.standing in (Standing.COOLING_DOWN, Standing.STEPPING_ASIDE):
        assert verdict.wake_at < math.inf  # the clock alone brings it back
    if verdict.wake_at < math.inf:
        probe = copy.deepcopy(rules)
        assert probe.verdict((now + verdict.wake_at) / 2).standing is verdict.standing
        later = probe.verdict(verdict.wake_at)
        assert later.standing is not verdict.standing or later.wake_at > verdict.wake_at
    if verdict.eligible:
        assert rules.healthy and now >= rules.cool_until and not rules.stepping_aside


def test_every_standing_against_every_fact() -> None:
    cases = 0
    for build in standings().values():
        for fact in facts().values():
            check_decision(build(), fact)
            cases += 1
    assert cases == 7 * (4 + 6 * (3 * 4 * 2 + 3) + 1)


# --- a stateful world -------------------------------------------------------------------------


class World(RuleBasedStateMachine):
    """One supervisor's rules in a world of epochs and requests made as ``ha failover`` makes
    them (naming the active and the epoch of the moment; only the latest one is read). The
    model knows the spec's triggers, not the rules' state: it checks that the rules never let
    the member in while unhealthy, inside a cooldown or a step-aside it was owed."""

    def __init__(self) -> None:
        super().__init__()
        self.member = Eligibility(ME, health_check=True)
        self.now = T0
        self.epoch = 1
        self.holder: bytes | None = OTHER
        self.request: FailoverRequest | None = None
        self.read_ids: set[str] = set()  # requests the rules have seen
        self.healthy: bool | None = None
        self.cool_until = -math.inf
        self.aside: tuple[int, float, bytes] | None = None  # epoch, until, target

    def decide(self, fact: Callable[[Eligibility], Decision]) -> Decision:
        was = copy.deepcopy(self.member).verdict(self.now).eligible
        decision = fact(self.member)
        now_in = copy.deepcopy(self.member).verdict(self.now).eligible
        if was and not now_in:
            assert decision.quit
        if not was and now_in:
            assert decision.wake
        return decision

    def leave(self) -> None:
        if self.holder == ME:
            self.holder = None  # we quit: the lock goes

    @property
    def eligible(self) -> bool:
        return copy.deepcopy(self.member).verdict(self.now).eligible

    # the world

    @rule(dt=st.floats(0.0, 40.0))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        if self.aside is not None and self.now >= self.aside[1]:
            self.aside = None

    @rule(holder=st.sampled_from([OTHER, TARGET, None]))
    def someone_else_wins(self, holder: bytes | None) -> None:
        if self.holder == ME:
            return
        self.epoch += 1
        self.holder = holder

    @rule(to=st.sampled_from([None, ME, TARGET, OTHER]), cooldown=st.floats(0.5, 60.0))
    def operator_asks_for_a_failover(self, to: bytes | None, cooldown: float) -> None:
        if self.holder is not None and self.holder != to:
            self.request = request(self.epoch, to, self.holder, cooldown)

    # what the supervisor reads and is told

    @rule(ok=st.booleans())
    def health_checked(self, ok: bool) -> None:
        decision = self.decide(lambda r: r.health_checked(self.now, ok, "exit status"))
        if not ok:
            assert decision.quit or self.healthy is False  # leaves on the first failure
            self.leave()
        self.healthy = ok

    @precondition(lambda self: self.holder == ME)
    @rule(ran=st.floats(0.0, 100.0))
    def command_ended(self, ran: float) -> None:
        decision = self.decide(lambda r: r.command_ended(self.now, "exited", ran))
        assert decision.quit
        self.cool_until = max(self.cool_until, self.now + RESTART_DELAY[0])
        self.leave()

    @rule()
    def failover_read(self) -> None:
        req, epoch = self.request, self.epoch
        holder = self.holder if self.member.stepping_aside else None
        leading = epoch if self.holder == ME else None
        first = req is not None and req.id not in self.read_ids
        decision = self.decide(lambda r: r.failover_read(self.now, req, epoch, holder, leading))
        if self.aside is not None and epoch > self.aside[0] and holder == self.aside[2]:
            self.aside = None  # the target took over
        if req is None or not first or req.epoch != epoch:
            pass
        elif req.active == ME and leading == req.epoch:  # asked of us: cede and cool down
            assert decision.quit
            self.cool_until = max(self.cool_until, self.now + req.cooldown)
            self.leave()
        elif req.to not in (None, ME):  # to someone else: step aside
            assert decision.quit
            assert req.to is not None
            self.aside = (req.epoch, self.now + req.cooldown, req.to)
            self.leave()
        if req is not None:
            self.read_ids.add(req.id)

    @precondition(lambda self: self.holder is None)
    @rule()
    def lock_won(self) -> None:
        if not self.eligible:
            return  # out of the election: it cannot win
        req = self.request
        self.epoch += 1
        self.holder = ME
        first = req is not None and req.id not in self.read_ids
        decision = self.decide(lambda r: r.lock_won(self.now, req, self.epoch))
        if first and req is not None and req.epoch == self.epoch - 1 and req.to not in (None, ME):
            assert decision.quit and req.to is not None  # give way before starting COMMAND
            self.aside = (self.epoch, self.now + req.cooldown, req.to)
            self.leave()
        else:
            assert not decision.quit
        if req is not None:
            self.read_ids.add(req.id)

    @invariant()
    def out_when_owed(self) -> None:
        if self.eligible:
            assert self.healthy is True, "in the election while unhealthy or unchecked"
            assert self.now >= self.cool_until, "in the election inside a cooldown"
            assert self.aside is None, "in the election while a step-aside is owed"

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
