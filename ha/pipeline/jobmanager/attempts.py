"""A job's attempts across failovers: failures it raised and job managers that died running it.

An attempt to run a job can end badly in two ways, and each is counted against the plan's
``max_attempts`` on its own (the one that reaches it fails the job for good):

- its pipeline raises: the active counts a *failure* in ``pipeline/failures/<job_id>``
  (``layout.failure_record``) and tries again;
- its job manager dies running it (``os._exit``, a segfault, the OOM killer, SIGKILL, Spark's
  JVM gone) and records nothing. For this the active *opens* the attempt before it runs the job,
  a fenced write of ``pipeline/attempts/<job_id>``::

      {"deaths": d, "open": {"epoch": e, "from_batch": b}}

  An attempt that ends while its term can still write leaves no open record: the job finished
  (succeeded, failed or cancelled: its cleanup deletes the record), or the term ended in good
  order (quit, handover: ``close()`` writes ``"open": null``, shielded). An attempt that
  raised was counted as a failure, and the record stays open for the retry that follows in the
  same term: it counts as a death only if that retry dies, never twice. A new active that finds the record open learns that the
  previous job manager died in that attempt (or was cut off and deposed without a goodbye):
  one *death*. Deaths in a row at the same place add up; an attempt that committed a batch
  before it died (the job's progress is past its ``from_batch``) starts the count again at 1,
  so that job managers killed from outside while the job moves on (failover tests, benchmarks)
  do not use up its attempts: YARN's attempt-failures validity interval, measured in progress
  instead of time. Once deaths reach ``max_attempts`` the new active fails the job with the
  reason (``the job manager died running it N times``) and does not run it again.

The record is written under the active's lease (``stores.Writer``), so a deposed job manager's
late attempt record never lands. Flink's restart strategies and YARN's max app attempts bound
the same thing.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from ...drivers.base import Driver
from ...errors import CorruptData, DriverError, Fenced, NoNode
from ...stores import Writer
from ..api.plan import JobPlan
from ..client import failure_count
from ..layout import JobLayout, failure_record

__all__ = ("Attempt", "AttemptRecord", "read_attempts")

log = logging.getLogger("ha.pipeline.attempts")

Emit = Callable[..., None]  # JobManager.emit: (name, **fields)


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """``deaths`` so far; ``open``: the attempt that has not ended (its epoch, from_batch)."""

    deaths: int = 0
    open: dict[str, Any] | None = None

    def to_bytes(self) -> bytes:
        return json.dumps({"deaths": self.deaths, "open": self.open}, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, path: str, data: bytes) -> AttemptRecord:
        try:
            doc = json.loads(data)
            deaths, opened = doc["deaths"], doc["open"]
        except (ValueError, TypeError, KeyError) as exc:
            raise CorruptData(path, f"not an attempt record: {exc}") from exc
        if not isinstance(deaths, int) or isinstance(deaths, bool) or deaths < 0:
            raise CorruptData(path, f"bad death count {deaths!r}")
        if opened is not None and not (
            isinstance(opened, dict) and isinstance(opened.get("from_batch"), int)
        ):
            raise CorruptData(path, f"bad open attempt {opened!r}")
        return cls(deaths, opened)


async def read_attempts(driver: Driver, layout: JobLayout, job_id: str) -> AttemptRecord:
    """The job's attempt record (an empty one if there is none)."""
    path = layout.attempt(job_id)
    try:
        data, _ = await driver.get(path)
    except NoNode:
        return AttemptRecord()
    return AttemptRecord.from_bytes(path, data)


class Attempt:
    """One job's attempt in one leadership term: ``await Attempt.begin(...)``, then
    ``await failed(error)`` for each raise and ``await close()`` if the term ends first."""

    def __init__(
        self,
        writer: Writer,
        layout: JobLayout,
        plan: JobPlan,
        progress: int,
        failures: int,
        emit: Emit,
    ) -> None:
        self.writer = writer
        self.emit = emit
        self.layout = layout
        self.plan = plan
        self.progress = progress
        self.failures = failures
        self.deaths = 0
        self.opened = False
        self.keep_open = False  # the job manager is going down with it: let it count

    @classmethod
    async def begin(
        cls, writer: Writer, layout: JobLayout, plan: JobPlan, progress: int, emit: Emit
    ) -> Attempt:
        """Count what the previous attempts left; open this one unless the job is done for.
        ``progress``: batches (or micro-batches) the job has committed."""
        job_id = plan.job_id
        failures = await failure_count(writer.driver, layout, job_id)
        attempt = cls(writer, layout, plan, progress, failures, emit)
        record = await read_attempts(writer.driver, layout, job_id)
        attempt.deaths = record.deaths
        if record.open is not None:  # the job manager running it never said it stopped
            moved_on = progress > record.open["from_batch"]
            attempt.deaths = 1 if moved_on else record.deaths + 1
            emit("attempt_died", job=job_id, deaths=attempt.deaths, batch=progress)
        if attempt.verdict() is None:
            opened = {"epoch": writer.lease.epoch, "from_batch": progress}
            record = AttemptRecord(attempt.deaths, opened)
            await writer.put(layout.attempt(job_id), record.to_bytes())
            attempt.opened = True
        return attempt

    def verdict(self) -> str | None:
        """Why the job is failed for good before it runs again; None while it may run."""
        limit = self.plan.max_attempts
        if self.failures >= limit:  # failed for good before a failover lost its result
            return f"failed {self.failures} times"
        if self.deaths >= limit:
            return (
                f"the job manager died running it {self.deaths} times"
                f" (at batch {self.progress}; max_attempts {limit})"
            )
        return None

    def counts(self) -> dict[str, int]:
        """For the job's result: its failures and job manager deaths so far."""
        return {"failures": self.failures, "deaths": self.deaths}

    async def failed(self, error: str, event: str, **fields: Any) -> bool:
        """Count one raised attempt (fenced) and tell it as ``event``; True once failures reach
        ``max_attempts``."""
        self.failures += 1
        job_id, limit = self.plan.job_id, self.plan.max_attempts
        await self.writer.put(self.layout.failure(job_id), failure_record(self.failures, error))
        self.emit(event, job=job_id, **fields, error=error, failures=self.failures)
        log.warning("job %s %s (failure %d of %d)", job_id, error, self.failures, limit)
        return self.failures >= limit

    async def close(self) -> None:
        """The term ends and the job manager lives on: this attempt is no death. Shielded, and
        only while the lease's stop deadline lets it (a quit, a handover); once deposed the
        write is refused at the fence (a successor counts the attempt then), logged only."""
        left = self.writer.lease.stop_deadline() - time.monotonic()
        if not self.opened or self.keep_open or left <= 0:
            return
        path = self.layout.attempt(self.plan.job_id)
        with anyio.CancelScope(shield=True), anyio.move_on_after(left):
            try:
                await self.writer.put(path, AttemptRecord(self.deaths).to_bytes())
                self.opened = False
            except (DriverError, Fenced) as exc:
                log.info("attempt of job %s left open: %s", self.plan.job_id, exc)
