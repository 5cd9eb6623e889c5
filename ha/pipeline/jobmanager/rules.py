"""A term's decisions: pure, no I/O, no anyio, no clock (httpcore's connection pool, h11).

``Schedule`` holds what a term knows of its jobs: the queue, in submission order, and the one
running. Each of its methods takes facts the term has read and returns the effects to carry
out, in order (``term.py`` does that I/O and nothing else); the functions below it decide
what a run does at its turning points. Rules, each naming the mechanism it follows:

J1  Recovery (Flink's ``JobResultStore``): a dirty result's cleanup is finished, then the
    result is marked clean. A stored plan with a result is a finished job's leftovers: cleaned
    up. A stored plan without one is queued again, oldest submission first (submitted_at, then
    job id), whatever the registry says: batches are idempotent, so running it again is how
    its real outcome is learned. A plan that does not decode is reported and left as it is:
    never replaced or deleted.
J2  A submission already known (a stored plan or a result: taken before a failover, by us or a
    previous active) only has its request deleted. A malformed one (a plan that does not
    decode or names another job, an unknown pipeline, bad parameters, no batches, an output a
    queued or running job writes) is refused: a failed result that says why, then the request
    goes. Otherwise the plan is stored (fenced), the job marked pending, the request deleted;
    only then is it queued, so a job never runs before its plan is stored.
J3  A cancel request for the running job interrupts its Spark work only (a store write is
    never cut in half); the request stays until the job has its result (its cleanup deletes
    it). A queued job leaves the queue at once and is finished as cancelled at batch 0. For
    any other job (finished, unknown) the request is deleted.
J4  One job at a time: the queue's head, once none runs (Flink's per-job dispatcher order).
J5  A run's batch, once staged: cancelled -> the job is cancelled (the staged output is never
    committed); the lease no longer valid (deposed, or past ``Lease.stop_deadline()`` after a
    pause) -> nothing more is written, the cancellation is on its way; else it is committed.
J6  A streaming query that ended: cancelled -> cancelled; no error -> succeeded; Spark's JVM
    gone -> the job manager leaves the election (a standby with a live session takes over;
    the attempt stays open and counts as a death); else one failed attempt (``attempts``).
J7  A store write that failed while the lease is valid fails the term (the process gives up
    the lead); once the lease is gone it is only the echo of lost leadership: the term waits
    for the cancellation on its way instead of turning a normal stop into an error.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigurationError, CorruptData
from ...stores import JobOutcome
from ..api.plan import JobPlan
from ..api.registry import Pipeline, get_pipeline

__all__ = (
    "Cleanup",
    "DeleteRequest",
    "Effect",
    "Emit",
    "Enqueue",
    "Finish",
    "Interrupt",
    "MarkClean",
    "QueryEnd",
    "Record",
    "ReportCorrupt",
    "Schedule",
    "SetPending",
    "Staged",
    "StoredPlan",
    "StorePlan",
    "WriteFailure",
    "after_query",
    "after_stage",
    "after_write_failure",
    "job_detail",
)


# --- facts: what the term read -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredPlan:
    """A plan found in the execution plan store at recovery: decoded, or why not."""

    job_id: str
    has_result: bool
    plan: JobPlan | None = None
    error: str | None = None  # the CorruptData it raised, when plan is None


# --- effects: what the term does, in order --------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cleanup:
    """Remove what only a running job needs (plan, checkpoints, records, cancel request)."""

    job_id: str


@dataclass(frozen=True, slots=True)
class MarkClean:
    job_id: str


@dataclass(frozen=True, slots=True)
class StorePlan:
    job_id: str
    data: bytes


@dataclass(frozen=True, slots=True)
class SetPending:
    job_id: str


@dataclass(frozen=True, slots=True)
class DeleteRequest:
    """A client's inbox or cancel node (unfenced; deleting one twice is harmless)."""

    path: str


@dataclass(frozen=True, slots=True)
class Record:
    """Record the job's result (dirty), clean up, mark it clean."""

    job_id: str
    outcome: JobOutcome
    detail: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Finish:
    """The job is done: its running state, then its result (``Record``), then ``job_finished``."""

    plan: JobPlan
    outcome: JobOutcome
    detail: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Enqueue:
    plan: JobPlan


@dataclass(frozen=True, slots=True)
class Interrupt:
    """Stop the running job's Spark work (``JobRun.cancel``)."""

    job_id: str


@dataclass(frozen=True, slots=True)
class ReportCorrupt:
    job_id: str
    error: str


@dataclass(frozen=True, slots=True)
class Emit:
    name: str
    fields: dict[str, Any] = field(default_factory=dict)


Effect = (
    Cleanup
    | MarkClean
    | StorePlan
    | SetPending
    | DeleteRequest
    | Record
    | Finish
    | Enqueue
    | Interrupt
    | ReportCorrupt
    | Emit
)


def job_detail(plan: JobPlan, done: int, **extra: Any) -> dict[str, Any]:
    """A job result's detail: its pipeline, batches, progress and output, and ``extra``."""
    return {
        "pipeline": plan.pipeline,
        "batches": len(plan.batches),
        "batches_done": done,
        "output": plan.output,
        **extra,
    }


# --- the schedule --------------------------------------------------------------------------------


class Schedule:
    """The term's jobs: ``queue`` (to run, in order) and ``running`` (at most one)."""

    __slots__ = ("lookup", "queue", "running")

    def __init__(self, lookup: Callable[[str], Pipeline] = get_pipeline) -> None:
        self.lookup = lookup  # the registry: a pipeline by name, ConfigurationError if unknown
        self.queue: list[JobPlan] = []
        self.running: JobPlan | None = None

    def recovered(self, found: Sequence[StoredPlan]) -> list[Effect]:
        """J1: the plans in the store when the term began (their dirty results done first)."""
        effects: list[Effect] = []
        for stored in found:
            if stored.has_result:
                effects.append(Cleanup(stored.job_id))  # a finished job's leftovers
            elif stored.plan is None:
                effects.append(ReportCorrupt(stored.job_id, stored.error or "unreadable"))
            else:
                self.queue.append(stored.plan)
        self.queue.sort(key=lambda p: (p.submitted_at, p.job_id))
        effects.append(Emit("recovered", {"jobs": [p.job_id for p in self.queue]}))
        return effects

    def submitted(self, job_id: str, path: str, data: bytes, *, known: bool) -> list[Effect]:
        """J2: the submission at ``path`` holds ``data``; ``known``: the job has a stored plan
        or a result already."""
        if known:
            return [DeleteRequest(path)]
        try:
            plan = self._check(job_id, path, data)
        except (CorruptData, ConfigurationError) as exc:
            refused = {"error": str(exc), "refused": True}
            return [
                Record(job_id, JobOutcome.FAILED, refused),
                DeleteRequest(path),
                Emit("refused", {"job": job_id, "error": str(exc)}),
            ]
        return [
            StorePlan(job_id, data),
            SetPending(job_id),
            DeleteRequest(path),
            Enqueue(plan),
            Emit("accepted", {"job": job_id, "batches": len(plan.batches)}),
        ]

    def _check(self, job_id: str, path: str, data: bytes) -> JobPlan:
        plan = JobPlan.from_bytes(data, path)
        if plan.job_id != job_id:
            raise CorruptData(path, f"holds the plan of job {plan.job_id!r}")
        self.lookup(plan.pipeline).check_params(plan.params)  # registered in this process too?
        if not plan.batches:
            raise ConfigurationError(f"job {job_id} has no batches")
        busy = [p for p in [*self.queue, self.running] if p is not None and p.output == plan.output]
        if busy:
            raise ConfigurationError(f"output {plan.output} is in use by job {busy[0].job_id}")
        return plan

    def enqueue(self, plan: JobPlan) -> None:
        """J2's last step, once its plan is stored."""
        self.queue.append(plan)

    def cancel_requested(self, job_id: str, path: str) -> list[Effect]:
        """J3: a cancel request for ``job_id`` at ``path``."""
        if self.running is not None and self.running.job_id == job_id:
            return [Interrupt(job_id)]
        queued = [p for p in self.queue if p.job_id == job_id]
        if not queued:
            return [DeleteRequest(path)]
        self.queue.remove(queued[0])
        detail = job_detail(queued[0], 0)
        return [Finish(queued[0], JobOutcome.CANCELLED, detail), DeleteRequest(path)]

    def start_next(self) -> JobPlan | None:
        """J4: the job to run now (it is running from here on), or None."""
        if self.running is not None or not self.queue:
            return None
        self.running = self.queue.pop(0)
        return self.running

    def ended(self) -> None:
        """The running job's run returned or raised."""
        self.running = None


# --- a run's turning points ---------------------------------------------------------------------


class Staged(enum.Enum):
    """J5: what becomes of a staged batch."""

    COMMIT = "commit"
    CANCEL = "cancel"
    DEPOSED = "deposed"  # write nothing more: the term's cancellation is on its way


def after_stage(*, cancelled: bool, lease_valid: bool) -> Staged:
    if cancelled:
        return Staged.CANCEL
    if not lease_valid:
        return Staged.DEPOSED
    return Staged.COMMIT


class QueryEnd(enum.Enum):
    """J6: what a streaming query's end means for its job."""

    CANCELLED = "cancelled"
    SUCCEEDED = "succeeded"
    SPARK_LOST = "spark_lost"  # leave the election
    FAILED = "failed"  # one failed attempt: the query starts again, or the job fails


def after_query(*, cancelled: bool, failed: bool, session_alive: bool) -> QueryEnd:
    if cancelled:
        return QueryEnd.CANCELLED
    if not failed:
        return QueryEnd.SUCCEEDED
    if not session_alive:
        return QueryEnd.SPARK_LOST
    return QueryEnd.FAILED


class WriteFailure(enum.Enum):
    """J7: what a failed store write means for the term."""

    FAIL_TERM = "fail_term"
    AWAIT_CANCEL = "await_cancel"


def after_write_failure(*, lease_valid: bool) -> WriteFailure:
    return WriteFailure.FAIL_TERM if lease_valid else WriteFailure.AWAIT_CANCEL
