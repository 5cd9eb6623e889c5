"""The pure machine, with no event loop: one row per behaviour of Hadoop's elector, an
exhaustiveness check over every phase and input, and a Hypothesis stateful test."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ha.election import events as ev
from ha.election import machine as m
from ha.election import nodes
from ha.election.diagram import diagram, document, situations
from ha.election.machine import LEGAL, Machine, Phase, State

ME = b"me:1"
OTHER = b"other:2"
S1, S2 = 11, 22


def kinds(effects: list[ev.Effect]) -> list[str]:
    return [type(e).__name__ for e in effects]


def joined(hold: bool = False, max_retries: int = 5) -> Machine:
    mach = Machine(ME, hold_on_disconnect=hold, max_retries=max_retries)
    mach.handle(ev.Connected(S1))
    assert mach.handle(ev.Joined()) == [ev.CreateLock(S1)]
    return mach


def active(hold: bool = False) -> Machine:
    mach = joined(hold)
    assert mach.handle(ev.LockCreated(S1, 0)) == [ev.ReadElection(S1)]
    effects = mach.handle(ev.ElectionRead(S1, None, None, 4, 7))
    assert effects == [ev.CommitActive(S1, 0, 5, 7, None)]
    effects = mach.handle(ev.Committed(S1, 5, 8, 0))
    assert kinds(effects) == ["StartActive", "Report"]
    assert effects[0] == ev.StartActive(S1, 5, 8)
    assert mach.state is State.ACTIVE
    return mach


def test_join_before_session_waits_for_it() -> None:
    mach = Machine(ME)
    assert kinds(mach.handle(ev.Joined())) == []
    assert mach.phase is Phase.CONNECTING
    assert mach.handle(ev.Connected(S1)) == [ev.CreateLock(S1)]


def test_win_with_no_previous_active_needs_no_fencing() -> None:
    mach = active()
    assert mach.epoch == 5


def test_lock_held_by_other_makes_standby() -> None:
    mach = joined()
    assert mach.handle(ev.LockExists(S1)) == [ev.ReadLock(S1)]
    effects = mach.handle(ev.LockOwned(S1, False, OTHER, 0))
    assert kinds(effects) == ["Report", "NotifyStandby"]
    assert effects[1] == ev.NotifyStandby(OTHER)
    assert mach.state is State.STANDBY


def test_retried_create_that_was_ours_is_recognised() -> None:
    mach = joined()
    mach.handle(ev.LockExists(S1))
    assert mach.handle(ev.LockOwned(S1, True, ME, 0)) == [ev.ReadElection(S1)]


def standby() -> Machine:
    mach = joined()
    mach.handle(ev.LockExists(S1))
    mach.handle(ev.LockOwned(S1, False, OTHER, 0))
    assert mach.state is State.STANDBY
    return mach


def test_standby_reads_the_election_when_lock_deleted() -> None:
    mach = standby()
    effects = mach.handle(ev.LockDeleted(S1))
    assert effects[0] == ev.ReadElection(S1)


def test_fast_takeover_claims_in_one_transaction_when_nothing_to_fence() -> None:
    mach = standby()
    mach.handle(ev.LockDeleted(S1))
    assert mach.handle(ev.ElectionRead(S1, None, None, 4, 7)) == [ev.ClaimActive(S1, 5, 7, None)]
    effects = mach.handle(ev.Claimed(S1, 5, 8, 0))
    assert kinds(effects) == ["StartActive", "Report"] and mach.epoch == 5
    assert mach.handle(ev.QuitRequested())[1] == ev.DeleteBreadcrumb(S1, 0, 0)


def test_fast_takeover_falls_back_when_fencing_is_needed() -> None:
    mach = standby()
    mach.handle(ev.LockDeleted(S1))
    crumb = nodes.encode_breadcrumb(nodes.Breadcrumb(OTHER, 4))
    assert mach.handle(ev.ElectionRead(S1, crumb, 2, 4, 7)) == [ev.CreateLock(S1)]


@pytest.mark.parametrize(("exists", "first"), [(True, ev.ReadLock(S1)), (False, ev.CreateLock(S1))])
def test_fast_takeover_conflicts(exists: bool, first: ev.Effect) -> None:
    mach = standby()
    mach.handle(ev.LockDeleted(S1))
    mach.handle(ev.ElectionRead(S1, None, None, 0, None))
    assert mach.handle(ev.ClaimConflict(S1, lock_exists=exists))[0] == first


def test_breadcrumb_of_another_is_fenced_before_commit() -> None:
    mach = joined()
    mach.handle(ev.LockCreated(S1, 0))
    crumb = nodes.encode_breadcrumb(nodes.Breadcrumb(OTHER, 4))
    effects = mach.handle(ev.ElectionRead(S1, crumb, 3, 4, 9))
    assert effects == [ev.FenceOldActive(S1, crumb)]
    assert mach.handle(ev.FenceSucceeded(S1)) == [ev.CommitActive(S1, 0, 5, 9, 3)]


def test_own_breadcrumb_is_not_fenced() -> None:
    mach = joined()
    mach.handle(ev.LockCreated(S1, 0))
    crumb = nodes.encode_breadcrumb(nodes.Breadcrumb(ME, 4))
    assert kinds(mach.handle(ev.ElectionRead(S1, crumb, 3, 4, 9))) == ["CommitActive"]


@pytest.mark.parametrize("raw", [b"\xff\x00garbage", b"{}", b'{"format":"ha.breadcrumb/1"}', b""])
def test_corrupt_breadcrumb_is_handed_to_fencing_as_is(raw: bytes) -> None:
    mach = joined()
    mach.handle(ev.LockCreated(S1, 0))
    assert mach.handle(ev.ElectionRead(S1, raw, 0, 0, 0)) == [ev.FenceOldActive(S1, raw)]


def test_failed_fencing_releases_and_backs_off() -> None:
    mach = joined()
    mach.handle(ev.LockCreated(S1, 0))
    mach.handle(ev.ElectionRead(S1, b"x", 0, 0, 0))
    effects = mach.handle(ev.FenceFailed(S1, "refused"))
    assert ev.ReleaseLock(S1) in effects and kinds(effects)[-1] == "WaitBackoff"
    assert mach.state is State.NEUTRAL
    token = mach.backoff_token
    assert mach.handle(ev.BackoffElapsed(token - 1)) == []  # a stale timer
    assert mach.handle(ev.BackoffElapsed(token)) == [ev.CreateLock(S1)]


def test_transient_failures_are_retried_then_fatal() -> None:
    mach = joined(max_retries=2)
    for _ in range(2):
        effects = mach.handle(ev.OperationFailed(S1, "create lock", "boom", True))
        assert kinds(effects)[-1] == "WaitBackoff"
        mach.handle(ev.BackoffElapsed(mach.backoff_token))
    effects = mach.handle(ev.OperationFailed(S1, "create lock", "boom", True))
    assert kinds(effects)[-2:] == ["NotifyFatal", "Finish"]
    assert mach.phase is Phase.FAILED
    assert mach.handle(ev.Joined()) == []


def test_progress_resets_the_failure_count() -> None:
    mach = joined(max_retries=1)
    mach.handle(ev.OperationFailed(S1, "create lock", "boom", True))
    mach.handle(ev.BackoffElapsed(mach.backoff_token))
    mach.handle(ev.LockExists(S1))
    mach.handle(ev.LockOwned(S1, False, OTHER, 0))  # progress
    mach.handle(ev.LockDeleted(S1))
    effects = mach.handle(ev.OperationFailed(S1, "create lock", "boom", True))
    assert kinds(effects)[-1] == "WaitBackoff"


def test_fatal_error_is_fatal_at_once() -> None:
    mach = joined()
    effects = mach.handle(ev.OperationFailed(S1, "create lock", "access denied", False))
    assert kinds(effects)[-2:] == ["NotifyFatal", "Finish"]


def test_session_expiry_while_active_stops_work_before_reporting_fenced() -> None:
    mach = active()
    effects = mach.handle(ev.SessionExpired(S1))
    assert kinds(effects)[:2] == ["StopActive", "Report"]
    assert effects[1] == ev.Report(State.ACTIVE, State.FENCED, None, "session expired")
    assert mach.state is State.FENCED
    mach.handle(ev.Connected(S2))
    assert mach.handle(ev.BackoffElapsed(mach.backoff_token))[0] == ev.CreateLock(S2)


def test_disconnect_stops_an_active_at_once_by_default() -> None:
    mach = active()
    effects = mach.handle(ev.Disconnected(S1))
    assert kinds(effects) == ["StopActive", "Report", "NotifyNeutral"]
    assert mach.handle(ev.Reconnected(S1)) == [ev.ReadLock(S1)]
    # the lock is still ours: take over again with a new epoch
    assert mach.handle(ev.LockOwned(S1, True, ME, 0)) == [ev.ReadElection(S1)]
    crumb = nodes.encode_breadcrumb(nodes.Breadcrumb(ME, 5))
    assert mach.handle(ev.ElectionRead(S1, crumb, 0, 5, 8)) == [ev.CommitActive(S1, 0, 6, 8, 0)]


def test_hold_policy_keeps_leading_through_a_blip() -> None:
    mach = active(hold=True)
    assert mach.handle(ev.Disconnected(S1)) == []
    assert mach.state is State.ACTIVE
    assert mach.handle(ev.Reconnected(S1)) == [ev.ReadLock(S1)]
    assert mach.handle(ev.LockOwned(S1, True, ME, 0)) == []
    assert mach.phase is Phase.ACTIVE and mach.epoch == 5


def test_hold_policy_stops_at_the_deadline() -> None:
    mach = active(hold=True)
    mach.handle(ev.Disconnected(S1))
    effects = mach.handle(ev.DeadlineExpired(S1))
    assert kinds(effects)[:2] == ["StopActive", "Report"]
    assert mach.state is State.NEUTRAL


def test_hold_policy_fenced_when_lock_changed_hands() -> None:
    mach = active(hold=True)
    mach.handle(ev.Disconnected(S1))
    mach.handle(ev.Reconnected(S1))
    effects = mach.handle(ev.LockOwned(S1, False, OTHER, 0))
    assert kinds(effects)[:2] == ["StopActive", "Report"]
    assert mach.state is State.FENCED


def test_stale_session_inputs_are_ignored() -> None:
    mach = active()
    mach.handle(ev.SessionExpired(S1))
    mach.handle(ev.Connected(S2))
    for event in (ev.LockDeleted(S1), ev.Committed(S1, 9, 9, 9), ev.LockCreated(S1, 0)):
        assert mach.handle(event) == []


@pytest.mark.parametrize("need_fence", [False, True])
def test_quit_from_active(need_fence: bool) -> None:
    mach = active()
    effects = mach.handle(ev.QuitRequested(need_fence))
    expected = ["StopActive"] + ([] if need_fence else ["DeleteBreadcrumb"])
    assert kinds(effects) == expected + ["ReleaseLock", "Report", "Finish"]
    if not need_fence:
        assert effects[1] == ev.DeleteBreadcrumb(S1, 0, 0)


def test_lock_deleted_or_epoch_superseded_while_active_is_fenced() -> None:
    for event in (ev.LockDeleted(S1), ev.EpochSuperseded(S1, 5)):
        mach = active()
        effects = mach.handle(event)
        assert kinds(effects)[0] == "StopActive", event
        assert ev.Report(State.ACTIVE, State.FENCED, None, effects[-2].cause) in effects
        assert mach.state is State.FENCED
    mach = active()
    assert mach.handle(ev.EpochSuperseded(S1, 4)) == []  # an older lease's report


def test_failed_become_active_releases() -> None:
    mach = active()
    effects = mach.handle(ev.ActiveFailed(S1, 5, "ValueError()"))
    assert kinds(effects) == ["StopActive", "ReleaseLock", "Report", "NotifyNeutral", "WaitBackoff"]


def test_commit_conflict() -> None:
    mach = joined()
    mach.handle(ev.LockCreated(S1, 0))
    mach.handle(ev.ElectionRead(S1, None, None, 0, None))
    assert mach.handle(ev.CommitConflict(S1, lock_lost=False)) == [ev.ReadElection(S1)]
    mach.handle(ev.ElectionRead(S1, None, None, 1, 0))
    assert kinds(mach.handle(ev.CommitConflict(S1, lock_lost=True)))[-1] == "WaitBackoff"


def test_breadcrumb_round_trip() -> None:
    crumb = nodes.Breadcrumb(b"\x00\xffid", 2**40, b"app")
    assert nodes.decode_breadcrumb(nodes.encode_breadcrumb(crumb)) == crumb


# --- exhaustiveness: every phase x every input ------------------------------------------------


def sample(cls: type, session: int) -> ev.Input:
    values: dict[str, object] = {}
    for f in dataclasses.fields(cls):
        values[f.name] = {
            "session": session,
            "ours": True,
            "need_fence": False,
            "lock_lost": False,
            "transient": True,
            "token": 1,
            "epoch": 1,
            "breadcrumb": None,
        }.get(f.name, b"" if f.type in ("bytes", "bytes | None") else 0)
        if f.type == "str":
            values[f.name] = "x"
    return cls(**values)  # type: ignore[no-any-return]


@pytest.mark.parametrize("phase", list(Phase))
@pytest.mark.parametrize("cls", ev.INPUT_TYPES, ids=lambda c: c.__name__)
def test_every_phase_handles_every_input(phase: Phase, cls: type) -> None:
    mach = Machine(ME)
    mach.handle(ev.Connected(S1))
    mach.phase = phase
    mach.reported = m.PUBLIC[phase]
    mach.epoch = 1 if phase in m.LEADING else None
    effects = mach.handle(sample(cls, S1))
    check_effects(mach, m.PUBLIC[phase], effects)


def check_effects(mach: Machine, before: State, effects: list[ev.Effect]) -> State:
    """Reports chain, are legal, and a report away from ACTIVE follows a StopActive."""
    state = before
    stopped = False
    for i, effect in enumerate(effects):
        if isinstance(effect, ev.StopActive):
            stopped = True
        if isinstance(effect, ev.Report):
            assert effect.old is state, effects
            assert (effect.old, effect.new) in LEGAL, effect
            if effect.old is State.ACTIVE:
                assert stopped, f"left ACTIVE without stopping first: {effects}"
            state = effect.new
        if isinstance(effect, ev.Finish):
            assert i == len(effects) - 1
        session = getattr(effect, "session", None)
        if session is not None:
            assert session == mach.session, effect
    assert state is mach.state, (state, mach.phase)
    return state


def snapshot(mach: Machine) -> dict[str, object]:
    return {name: getattr(mach, name) for name in Machine.__slots__}


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


# --- Hypothesis: random, duplicated, reordered and stale inputs --------------------------------

SESSIONS = st.sampled_from([S1, S2, 33])


@st.composite
def inputs(draw: st.DrawFn) -> ev.Input:
    cls = draw(st.sampled_from(ev.INPUT_TYPES))
    values: dict[str, object] = {}
    for f in dataclasses.fields(cls):
        if f.name == "session":
            values[f.name] = draw(SESSIONS)
        elif f.type in ("bool",):
            values[f.name] = draw(st.booleans())
        elif f.type == "bytes":
            values[f.name] = draw(st.sampled_from([ME, OTHER, b""]))
        elif f.type == "bytes | None":
            values[f.name] = draw(
                st.sampled_from(
                    [
                        None,
                        b"junk",
                        nodes.encode_breadcrumb(nodes.Breadcrumb(ME, 1)),
                        nodes.encode_breadcrumb(nodes.Breadcrumb(OTHER, 1)),
                    ]
                )
            )
        elif f.type == "str":
            values[f.name] = "x"
        elif f.type == "int | None":
            values[f.name] = draw(st.none() | st.integers(0, 5))
        else:
            values[f.name] = draw(st.integers(0, 5))
    return cls(**values)  # type: ignore[no-any-return]


class MachineModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.mach = Machine(ME, max_retries=3)
        self.state = State.NEUTRAL
        self.scope_open = False
        self.epochs: list[int] = []
        self.finished = False

    @rule(event=inputs())
    def feed(self, event: ev.Input) -> None:
        effects = self.mach.handle(event)
        if self.finished:
            assert effects == []
        self.state = check_effects(self.mach, self.state, effects)
        for effect in effects:
            if isinstance(effect, ev.StartActive):
                assert not self.scope_open, "two leadership scopes at once"
                assert effect.epoch == self.mach.epoch
                self.scope_open = True
                self.epochs.append(effect.epoch)
            elif isinstance(effect, ev.StopActive):
                self.scope_open = False
            elif isinstance(effect, ev.Finish):
                self.finished = True
        if self.scope_open:
            assert self.mach.phase in m.LEADING

    @rule()
    def join(self) -> None:
        self.feed(ev.Joined())

    @rule()
    def fire_current_backoff(self) -> None:
        self.feed(ev.BackoffElapsed(self.mach.backoff_token))

    @invariant()
    def public_state_matches_phase(self) -> None:
        assert self.mach.state is m.PUBLIC[self.mach.phase]
        if self.mach.phase in m.LEADING:
            assert self.mach.epoch is not None


MachineModel.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMachineModel = MachineModel.TestCase


def test_the_state_diagram_document_is_current() -> None:
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "states.md").read_text()
    hint = "regenerate docs/states.md with python -m ha.election.diagram > docs/states.md"
    assert diagram() in doc, hint
    assert doc == document(), hint


def test_lock_deleted_while_its_owner_is_read_is_not_lost() -> None:
    mach = joined()
    mach.handle(ev.LockExists(S1))  # ReadLock in flight
    assert mach.handle(ev.LockDeleted(S1))[0] == ev.CreateLock(S1)
    assert mach.handle(ev.LockOwned(S1, False, OTHER, 0)) == []  # the older answer


def test_become_active_failing_every_term_backs_off_longer_then_is_fatal() -> None:
    mach = joined(max_retries=3)
    attempts = []
    for epoch in range(1, 5):
        mach.handle(ev.LockCreated(S1, 0))
        mach.handle(ev.ElectionRead(S1, None, None, epoch - 1, epoch - 1))
        mach.handle(ev.Committed(S1, epoch, epoch, 0))  # winning again is no progress for this
        effects = mach.handle(ev.ActiveFailed(S1, epoch, "spark will not start"))
        if kinds(effects)[-1] == "Finish":
            break
        attempts.append(effects[-1].attempt)  # type: ignore[union-attr]
        mach.handle(ev.BackoffElapsed(mach.backoff_token))
    assert attempts == [1, 2, 3] and mach.phase is Phase.FAILED


def test_refused_fences_back_off_longer_each_time_then_are_fatal() -> None:
    """Re-creating the lock after a refused fence is no progress: the backoff grows (a real
    STONITH command is not hammered) and max_retries ends it, as Hadoop gives up."""
    crumb = nodes.encode_breadcrumb(nodes.Breadcrumb(OTHER, 4))
    mach = joined(max_retries=3)
    attempts = []
    for _ in range(3):
        mach.handle(ev.LockCreated(S1, 0))
        assert kinds(mach.handle(ev.ElectionRead(S1, crumb, 0, 4, 4))) == ["FenceOldActive"]
        effects = mach.handle(ev.FenceFailed(S1, "refused"))
        [backoff] = [e for e in effects if isinstance(e, ev.WaitBackoff)]
        attempts.append(backoff.attempt)
        assert mach.handle(ev.BackoffElapsed(mach.backoff_token)) == [ev.CreateLock(S1)]
    assert attempts == [1, 2, 3]
    mach.handle(ev.LockCreated(S1, 0))
    mach.handle(ev.ElectionRead(S1, crumb, 0, 4, 4))
    assert kinds(mach.handle(ev.FenceFailed(S1, "refused")))[-2:] == ["NotifyFatal", "Finish"]


def test_a_fence_that_works_resets_the_refusals() -> None:
    crumb = nodes.encode_breadcrumb(nodes.Breadcrumb(OTHER, 4))
    mach = joined(max_retries=2)
    for _ in range(2):
        mach.handle(ev.LockCreated(S1, 0))
        mach.handle(ev.ElectionRead(S1, crumb, 0, 4, 4))
        mach.handle(ev.FenceFailed(S1, "refused"))
        mach.handle(ev.BackoffElapsed(mach.backoff_token))
    mach.handle(ev.LockCreated(S1, 0))
    mach.handle(ev.ElectionRead(S1, crumb, 0, 4, 4))
    assert kinds(mach.handle(ev.FenceSucceeded(S1))) == ["CommitActive"]
    mach.handle(ev.Committed(S1, 5, 5, 1))
    assert mach.fence_failures == 0


def test_a_lost_epoch_counter_never_sends_the_epoch_back() -> None:
    """The counter deleted from outside (epoch_version None) while the breadcrumb says 7."""
    crumb = nodes.encode_breadcrumb(nodes.Breadcrumb(OTHER, 7))
    mach = joined()
    mach.handle(ev.LockCreated(S1, 0))
    mach.handle(ev.ElectionRead(S1, crumb, 3, 0, None))
    [commit] = mach.handle(ev.FenceSucceeded(S1))
    assert isinstance(commit, ev.CommitActive) and commit.epoch == 8


def test_refused_fences_of_another_breadcrumb_count_afresh() -> None:
    """Separate incidents (a new breadcrumb to fence) do not add up to a fatal error."""
    mach = joined(max_retries=2)
    for epoch in (4, 4, 5, 5, 6, 6):
        crumb = nodes.encode_breadcrumb(nodes.Breadcrumb(OTHER, epoch))
        mach.handle(ev.LockCreated(S1, 0))
        mach.handle(ev.ElectionRead(S1, crumb, 0, epoch, 4))
        effects = mach.handle(ev.FenceFailed(S1, "refused"))
        assert kinds(effects)[-1] == "WaitBackoff"
        mach.handle(ev.BackoffElapsed(mach.backoff_token))
