"""The term's decisions (``jobmanager/rules.py``, J1-J7) as tables, with no event loop: facts in,
effects out, and the schedule after; then a Hypothesis state machine over duplicated, stale
and reordered requests that checks what a term must never do (two jobs at once, a job run
before its plan is stored, two jobs writing one output, a cancelled job that runs)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ha.errors import ConfigurationError
from ha.pipeline.api.plan import JobPlan
from ha.pipeline.api.registry import Param, Pipeline
from ha.pipeline.jobmanager import rules as r
from ha.pipeline.jobmanager.rules import (
    Cleanup,
    DeleteRequest,
    Emit,
    Enqueue,
    Finish,
    Interrupt,
    QueryEnd,
    Record,
    ReportCorrupt,
    Schedule,
    SetPending,
    Staged,
    StoredPlan,
    StorePlan,
    WriteFailure,
)
from ha.stores import JobOutcome

SUMS = Pipeline(
    "sums", compute=lambda *a: None, list_batches=lambda p: [0], params={"n": Param(int, 1)}
)


def lookup(name: str) -> Pipeline:
    if name != "sums":
        raise ConfigurationError(f"no pipeline {name!r}")
    return SUMS


def plan(job_id: str, output: str | None = None, *, at: float = 0.0, **over: Any) -> JobPlan:
    fields: dict[str, Any] = {
        "job_id": job_id,
        "pipeline": "sums",
        "params": {"n": 2},
        "batches": (0, 1),
        "output": output or f"/out/{job_id}",
        "submitted_at": at,
    }
    return JobPlan(**{**fields, **over})


def inbox(job_id: str) -> str:
    return f"/ha/c1/pipeline/inbox/{job_id}"


def cancel(job_id: str) -> str:
    return f"/ha/c1/pipeline/cancel/{job_id}"


def schedule(queued: tuple[str, ...] = (), running: str | None = None) -> Schedule:
    s = Schedule(lookup)
    s.queue = [plan(j) for j in queued]
    s.running = None if running is None else plan(running)
    return s


def ids(s: Schedule) -> tuple[tuple[str, ...], str | None]:
    return tuple(p.job_id for p in s.queue), None if s.running is None else s.running.job_id


# --- J1: recovery -----------------------------------------------------------------------------------


def test_recovery_cleans_finished_reports_unreadable_and_queues_the_rest_oldest_first() -> None:
    s = schedule()
    found = [
        StoredPlan("late", has_result=False, plan=plan("late", at=20.0)),
        StoredPlan("done", has_result=True),
        StoredPlan("bad", has_result=False, error="not JSON"),
        StoredPlan("b", has_result=False, plan=plan("b", at=10.0)),
        StoredPlan("a", has_result=False, plan=plan("a", at=10.0)),
    ]
    assert s.recovered(found) == [
        Cleanup("done"),
        ReportCorrupt("bad", "not JSON"),
        Emit("recovered", {"jobs": ["a", "b", "late"]}),
    ]
    assert ids(s) == (("a", "b", "late"), None)


def test_recovery_of_nothing_says_so() -> None:
    s = schedule()
    assert s.recovered([]) == [Emit("recovered", {"jobs": []})]
    assert s.start_next() is None


# --- J2: submissions ------------------------------------------------------------------------------

SUBMISSIONS: list[tuple[str, Schedule, str, bytes, bool, str | None]] = [
    # name, schedule, job id, data, known, refusal (None: accepted)
    ("known", schedule(), "j", plan("j").to_bytes(), True, "known"),
    ("accepted", schedule(), "j", plan("j").to_bytes(), False, None),
    ("accepted beside others", schedule(("q",), "r"), "j", plan("j").to_bytes(), False, None),
    ("not a plan", schedule(), "j", b"{nope", False, "corrupt data at /ha/c1/pipeline/inbox/j"),
    ("another job's plan", schedule(), "j", plan("k").to_bytes(), False, "holds the plan of job 'k'"),
    ("unknown pipeline", schedule(), "j", plan("j", pipeline="nope").to_bytes(), False, "no pipeline"),
    ("bad parameter", schedule(), "j", plan("j", params={"n": "x"}).to_bytes(), False, "must be int"),
    ("no batches", schedule(), "j", plan("j", batches=()).to_bytes(), False, "has no batches"),
    ("output of a queued job", schedule(("q",)), "j", plan("j", "/out/q").to_bytes(), False, "in use by job q"),
    ("output of the running job", schedule((), "r"), "j", plan("j", "/out/r").to_bytes(), False, "in use by job r"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("s", "job_id", "data", "known", "refusal"),
    [row[1:] for row in SUBMISSIONS],
    ids=[row[0] for row in SUBMISSIONS],
)
def test_a_submission(
    s: Schedule, job_id: str, data: bytes, known: bool, refusal: str | None
) -> None:
    before = ids(s)
    effects = s.submitted(job_id, inbox(job_id), data, known=known)
    assert ids(s) == before  # queued only once its plan is stored (Enqueue, done by the term)
    if refusal == "known":
        assert effects == [DeleteRequest(inbox(job_id))]
    elif refusal is None:
        assert effects == [
            StorePlan(job_id, data),
            SetPending(job_id),
            DeleteRequest(inbox(job_id)),
            Enqueue(JobPlan.from_bytes(data)),
            Emit("accepted", {"job": job_id, "batches": 2}),
        ]
    else:
        record, delete, told = effects
        assert isinstance(record, Record) and record.job_id == job_id
        assert record.outcome is JobOutcome.FAILED and record.detail["refused"] is True
        assert refusal in record.detail["error"]
        assert delete == DeleteRequest(inbox(job_id))
        assert told == Emit("refused", {"job": job_id, "error": record.detail["error"]})


# --- J3: cancel requests --------------------------------------------------------------------------

CANCELS: list[tuple[str, tuple[str, ...], str | None, str, str]] = [
    # name, queued, running, job, expected: interrupt | finish | delete
    ("the running job", ("q",), "r", "r", "interrupt"),
    ("a queued job", ("q", "q2"), "r", "q2", "finish"),
    ("a queued job, none running", ("q",), None, "q", "finish"),
    ("an unknown or finished job", ("q",), "r", "gone", "delete"),
    ("nothing at all", (), None, "gone", "delete"),
]


@pytest.mark.parametrize(
    ("queued", "running", "job", "expected"), [c[1:] for c in CANCELS], ids=[c[0] for c in CANCELS]
)
def test_a_cancel_request(
    queued: tuple[str, ...], running: str | None, job: str, expected: str
) -> None:
    s = schedule(queued, running)
    effects = s.cancel_requested(job, cancel(job))
    if expected == "interrupt":  # the request stays until the job has its result
        assert effects == [Interrupt(job)] and ids(s) == (queued, running)
    elif expected == "finish":
        detail = r.job_detail(plan(job), 0)
        assert effects == [
            Finish(plan(job), JobOutcome.CANCELLED, detail),
            DeleteRequest(cancel(job)),
        ]
        assert detail["batches_done"] == 0
        assert ids(s) == (tuple(q for q in queued if q != job), running)
    else:
        assert effects == [DeleteRequest(cancel(job))] and ids(s) == (queued, running)


# --- J4: which job next ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("queued", "running", "starts"),
    [((), None, None), (("a", "b"), None, "a"), (("a", "b"), "r", None), ((), "r", None)],
)
def test_the_next_job(queued: tuple[str, ...], running: str | None, starts: str | None) -> None:
    s = schedule(queued, running)
    started = s.start_next()
    assert (None if started is None else started.job_id) == starts
    if starts is not None:
        assert ids(s) == (queued[1:], starts)
        s.ended()
        assert ids(s) == (queued[1:], None)


# --- J5-J7: a run's turning points, every combination ---------------------------------------------


@pytest.mark.parametrize(
    ("cancelled", "lease_valid"), list(itertools.product([False, True], repeat=2))
)
def test_after_stage(cancelled: bool, lease_valid: bool) -> None:
    expected = Staged.CANCEL if cancelled else Staged.COMMIT if lease_valid else Staged.DEPOSED
    assert r.after_stage(cancelled=cancelled, lease_valid=lease_valid) is expected


@pytest.mark.parametrize(
    ("cancelled", "failed", "alive"), list(itertools.product([False, True], repeat=3))
)
def test_after_query(cancelled: bool, failed: bool, alive: bool) -> None:
    end = r.after_query(cancelled=cancelled, failed=failed, session_alive=alive)
    if cancelled:
        assert end is QueryEnd.CANCELLED  # even if the query also failed: the user asked
    elif not failed:
        assert end is QueryEnd.SUCCEEDED
    else:
        assert end is (QueryEnd.FAILED if alive else QueryEnd.SPARK_LOST)


@pytest.mark.parametrize("lease_valid", [False, True])
def test_after_write_failure(lease_valid: bool) -> None:
    expected = WriteFailure.FAIL_TERM if lease_valid else WriteFailure.AWAIT_CANCEL
    assert r.after_write_failure(lease_valid=lease_valid) is expected


def test_every_effect_kind_appears_in_a_table_above() -> None:
    made: set[type] = set()
    s = schedule(("q",), "r")
    made.update(map(type, s.recovered([StoredPlan("d", True), StoredPlan("x", False, error="e")])))
    made.update(map(type, s.submitted("j", inbox("j"), plan("j").to_bytes(), known=False)))
    made.update(map(type, s.submitted("k", inbox("k"), b"", known=False)))
    made.update(map(type, s.cancel_requested("r", cancel("r"))))
    made.update(map(type, s.cancel_requested("q", cancel("q"))))
    assert made | {r.MarkClean} == set(r.Effect.__args__)  # type: ignore[attr-defined]


# --- the schedule under random requests ----------------------------------------------------------


class ScheduleModel(RuleBasedStateMachine):
    """The schedule with a model of the stores it drives: effects are applied in order as the
    term would (a stored plan, results, requests), requests come duplicated, stale and in any
    order, and jobs start and end whenever."""

    JOBS = ("a", "b", "c", "d")
    OUTPUTS = ("/out/1", "/out/2", "/out/3")

    def __init__(self) -> None:
        super().__init__()
        self.s = Schedule(lookup)
        self.plans: dict[str, bytes] = {}  # the execution plan store
        self.results: dict[str, JobOutcome] = {}
        self.ever_run: list[str] = []
        self.cancelled_queued: set[str] = set()
        self.interrupted: list[str] = []

    def apply(self, effects: list[r.Effect]) -> None:
        for effect in effects:
            match effect:
                case StorePlan(job_id, data):
                    self.plans[job_id] = data
                case Enqueue(p):
                    assert p.job_id in self.plans, "queued before its plan was stored"
                    self.s.enqueue(p)
                case Record(job_id, outcome, _):
                    assert job_id not in self.results, "a second result"
                    self.results[job_id] = outcome
                    self.plans.pop(job_id, None)
                case Finish(p, outcome, _):
                    self.apply([Record(p.job_id, outcome, {})])
                    if outcome is JobOutcome.CANCELLED:
                        self.cancelled_queued.add(p.job_id)
                case Interrupt(job_id):
                    assert self.s.running is not None and self.s.running.job_id == job_id
                    self.interrupted.append(job_id)

    def known(self, job_id: str) -> bool:
        return job_id in self.plans or job_id in self.results

    @rule(job=st.sampled_from(JOBS), output=st.sampled_from(OUTPUTS), named=st.sampled_from(JOBS))
    def submit(self, job: str, output: str, named: str) -> None:
        data = plan(named, output).to_bytes()  # named != job: a plan filed under another id
        self.apply(self.s.submitted(job, inbox(job), data, known=self.known(job)))

    @rule(job=st.sampled_from(JOBS))
    def request_cancel(self, job: str) -> None:
        self.apply(self.s.cancel_requested(job, cancel(job)))

    @rule()
    def start(self) -> None:
        started = self.s.start_next()
        if started is not None:
            assert started.job_id not in self.cancelled_queued, "a cancelled job started"
            self.ever_run.append(started.job_id)

    @rule(outcome=st.sampled_from([JobOutcome.SUCCEEDED, JobOutcome.FAILED]))
    def end(self, outcome: JobOutcome) -> None:
        running = self.s.running
        if running is not None:
            self.s.ended()
            done = JobOutcome.CANCELLED if running.job_id in self.interrupted else outcome
            self.apply([Finish(running, done, r.job_detail(running, 0))])

    @invariant()
    def one_job_at_a_time_each_once_each_output_once(self) -> None:
        live = [*self.s.queue, *([self.s.running] if self.s.running else [])]
        assert len({p.job_id for p in live}) == len(live)
        assert len({p.output for p in live}) == len(live)
        assert all(p.job_id in self.plans and p.job_id not in self.results for p in live)

    @invariant()
    def a_job_runs_once(self) -> None:
        assert len(set(self.ever_run)) == len(self.ever_run)


ScheduleModel.TestCase.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)  # fmt: skip
TestScheduleModel = ScheduleModel.TestCase
