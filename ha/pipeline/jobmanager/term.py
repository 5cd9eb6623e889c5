"""What one leadership term of the job manager does: recover, take requests, run jobs, finish.

``JobManager`` (``jobmanager.py``) builds a ``_Term`` each time its component is granted the
lead and drops it when the grant ends; the term's work runs only inside the grant, and is
cancelled with it. How a term keeps every batch exactly once is told in ``jobmanager.py``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import anyio.to_thread

from ...drivers.base import NodeEvent
from ...election.lease import Lease
from ...errors import (
    ConfigurationError,
    CorruptData,
    DriverError,
    Fenced,
    NodeExists,
    NoNode,
    NotEmpty,
)
from ...stores import CompletedCheckpoint, JobOutcome, JobResult, Stores, Writer
from ..api.plan import JobPlan
from ..api.registry import Pipeline, get_pipeline
from ..client import children
from ..commit.output import clean_staging, commit_batch, stage_batch
from ..commit.stream_commit import remove_commits
from ..spark import run_in_thread
from .attempts import Attempt
from .runs.stream import StreamRun

if TYPE_CHECKING:
    from .manager import JobManager

__all__ = ("_Term",)

log = logging.getLogger("ha.pipeline.jobmanager")


class _Stopped(Exception):
    """The batch's thread noticed that its result is no longer wanted."""


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


class _Term:
    """What one leadership term does; dropped when the term ends."""

    def __init__(self, jm: JobManager, stores: Stores, lease: Lease, spark: Any) -> None:
        self.jm = jm
        self.stores = stores
        self.lease = lease
        self.spark = spark
        self.driver = jm.driver
        self.layout = jm.layout
        self.writer = Writer(jm.driver, lease)
        self.queue: list[JobPlan] = []
        self.running: JobPlan | None = None
        self.stage_scope: anyio.CancelScope | None = None
        self.cancelled: set[str] = set()
        self.wake = anyio.Event()
        self.queued = anyio.Event()

    async def run(self) -> None:
        await self.driver.ensure_path(self.layout.inbox)
        sub = self.driver.subscribe(self.layout.inbox, self._on_doorbell)
        try:
            await self._guarded(self._recover)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._guarded, self._watch_requests)
                await self._guarded(self._run_jobs)
        except BaseExceptionGroup as group:
            # The elector expects a plain error or a cancellation, not a mix of both, which
            # is what a failed write racing with the loss of leadership leaves in our group.
            cancelled, errors = group.split(anyio.get_cancelled_exc_class())
            if cancelled is not None:
                if errors is not None:
                    log.info("stopped; the work also raised: %r", errors)
                raise cancelled from None
            assert errors is not None
            raise _first(errors) from group
        finally:
            sub.close()

    async def _guarded(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run ``work``; a backend error once leadership is gone is only its echo.

        While the elector cancels us (quit, lost session, newer epoch), a store write may fail
        before the cancellation reaches it. Raising that would turn a normal stop into an
        error (a group of it and the cancellation); waiting lets the cancellation finish it.
        """
        try:
            await work()
        except (DriverError, Fenced) as exc:
            try:
                await anyio.lowlevel.checkpoint()  # raises if we are being cancelled
            except anyio.get_cancelled_exc_class():
                log.info("stopped under a store write: %s", exc)
                raise
            if self.lease.valid:
                raise
            log.info("leadership ended under a store write: %s", exc)
            await anyio.sleep_forever()  # the elector's cancellation is on its way

    def _on_doorbell(self, event: NodeEvent) -> None:
        self.wake.set()

    # --- recovery -------------------------------------------------------------------------------

    async def _recover(self) -> None:
        for result in await self.stores.job_results.dirty_results():
            await self._cleanup(result.job_id)
            await self.stores.job_results.mark_clean(result.job_id)
            self.jm.emit("cleanup_finished", job=result.job_id)
        await self._expire_results()
        for job_id in await self.stores.execution_plans.job_ids():
            if await self.stores.job_results.has_entry(job_id):
                await self._cleanup(job_id)  # a finished job's leftovers
                continue
            where = f"{self.layout.execution_plans}/{job_id}"
            try:
                plan = JobPlan.from_bytes(await self.stores.execution_plans.recover(job_id), where)
            except CorruptData as exc:
                # Never replace or delete what we cannot read; say so and leave it.
                log.error("job %s not recovered: %s", job_id, exc)
                self.jm.emit("corrupt_plan", job=job_id, error=str(exc))
                continue
            self.queue.append(plan)
        self.queue.sort(key=lambda p: (p.submitted_at, p.job_id))
        self.jm.emit("recovered", jobs=[p.job_id for p in self.queue])
        if self.queue:
            self.queued.set()

    # --- requests: submissions and cancellations ------------------------------------------------

    async def _watch_requests(self) -> None:
        while True:
            self.wake = anyio.Event()
            await self._take_submissions()
            await self._take_cancels()
            with anyio.move_on_after(self.jm.poll_interval):
                await self.wake.wait()

    async def _known(self, job_id: str) -> bool:
        return await self.stores.execution_plans.get(job_id) is not None or (
            await self.stores.job_results.has_entry(job_id)
        )

    async def _take_submissions(self) -> None:
        for job_id in await children(self.driver, self.layout.inbox):
            path = self.layout.submission(job_id)
            try:
                data, _ = await self.driver.get(path)
            except NoNode:
                continue
            if await self._known(job_id):  # taken already (by us or a previous active)
                await self._delete_request(path)
                continue
            try:
                plan = self._check_submission(job_id, path, data)
            except (CorruptData, ConfigurationError) as exc:
                await self._record(job_id, JobOutcome.FAILED, {"error": str(exc), "refused": True})
                await self._delete_request(path)
                self.jm.emit("refused", job=job_id, error=str(exc))
                continue
            await self.stores.execution_plans.put(job_id, data)
            await self.stores.running_jobs.set_pending(job_id)
            await self._delete_request(path)
            self.queue.append(plan)
            self.queued.set()
            self.jm.emit("accepted", job=job_id, batches=len(plan.batches))

    def _check_submission(self, job_id: str, path: str, data: bytes) -> JobPlan:
        plan = JobPlan.from_bytes(data, path)
        if plan.job_id != job_id:
            raise CorruptData(path, f"holds the plan of job {plan.job_id!r}")
        spec = get_pipeline(plan.pipeline)  # registered in this process too?
        spec.check_params(plan.params)
        if not plan.batches:
            raise ConfigurationError(f"job {job_id} has no batches")
        busy = [p for p in [*self.queue, self.running] if p is not None and p.output == plan.output]
        if busy:
            raise ConfigurationError(f"output {plan.output} is in use by job {busy[0].job_id}")
        return plan

    async def _take_cancels(self) -> None:
        for job_id in await children(self.driver, self.layout.cancels):
            path = self.layout.cancel(job_id)
            if self.running is not None and self.running.job_id == job_id:
                # Only the Spark work is interrupted; store writes are never cut in half.
                self.cancelled.add(job_id)
                if self.stage_scope is not None:
                    self.stage_scope.cancel()
                continue
            queued = [p for p in self.queue if p.job_id == job_id]
            if queued:
                self.queue.remove(queued[0])
                await self._finish(queued[0], JobOutcome.CANCELLED, self._detail(queued[0], 0))
            await self._delete_request(path)  # done, or for a job we do not know

    async def _delete_request(self, path: str) -> None:
        # Inbox and cancel nodes are the clients' (unfenced); removing one twice is harmless.
        try:
            await self.driver.delete(path)
        except NoNode:
            pass

    # --- running --------------------------------------------------------------------------------

    async def _run_jobs(self) -> None:
        while True:
            while not self.queue:
                self.queued = anyio.Event()
                await self.queued.wait()
            plan = self.running = self.queue.pop(0)
            try:
                outcome, detail = await self._run_job(plan)
            finally:
                self.running = None
            await self._finish(plan, outcome, detail)

    def _detail(self, plan: JobPlan, done: int, **extra: Any) -> dict[str, Any]:
        return {
            "pipeline": plan.pipeline,
            "batches": len(plan.batches),
            "batches_done": done,
            "output": plan.output,
            **extra,
        }

    async def _run_job(self, plan: JobPlan) -> tuple[JobOutcome, dict[str, Any]]:
        job_id = plan.job_id
        try:
            spec = get_pipeline(plan.pipeline)
        except ConfigurationError as exc:
            return JobOutcome.FAILED, self._detail(plan, 0, error=str(exc))
        await self.stores.running_jobs.set_running(job_id)
        if spec.stream is not None:
            return await StreamRun(self, spec, plan).run()
        checkpoints = self.stores.checkpoints(job_id)
        recovered = await checkpoints.recover()
        index = max((c.checkpoint_id for c in recovered), default=0)
        attempt = await Attempt.begin(self.writer, self.layout, plan, index, self.jm.emit)
        if (error := attempt.verdict()) is not None:
            return JobOutcome.FAILED, self._detail(plan, index, error=error, **attempt.counts())
        try:
            return await self._run_batches(spec, plan, index, attempt)
        except BaseException:  # the term ends; this job manager lives on
            await attempt.close()
            raise

    async def _run_batches(
        self, spec: Pipeline, plan: JobPlan, index: int, attempt: Attempt
    ) -> tuple[JobOutcome, dict[str, Any]]:
        started = time.monotonic()
        job_id = plan.job_id
        checkpoints = self.stores.checkpoints(job_id)
        await anyio.to_thread.run_sync(clean_staging, plan.output)
        self.jm.emit("job_started", job=job_id, from_batch=index, batches=len(plan.batches))
        while index < len(plan.batches):
            if job_id in self.cancelled:
                return JobOutcome.CANCELLED, self._detail(plan, index)
            self.jm.emit("batch_started", job=job_id, batch=index, epoch=self.lease.epoch)
            try:
                try:
                    with anyio.CancelScope() as self.stage_scope:
                        staged = await self._stage(spec, plan, index)
                finally:
                    self.stage_scope = None
                if job_id in self.cancelled:
                    return JobOutcome.CANCELLED, self._detail(plan, index)
                if not self.lease.valid:  # deposed, or woke up past its stop_deadline()
                    await anyio.sleep_forever()  # our scope is being cancelled
                result = await anyio.to_thread.run_sync(commit_batch, staged, plan.output, index)
            except Exception as exc:
                error = f"batch {index}: {type(exc).__name__}: {exc}"
                if await attempt.failed(error, "batch_failed", batch=index):
                    tb = "".join(traceback.format_exception(exc)[-3:])
                    detail = self._detail(plan, index, error=error, traceback=tb)
                    return JobOutcome.FAILED, {**detail, **attempt.counts()}
                continue  # the same batch again
            if self.jm.checkpointing:
                meta = json.dumps({"next_batch": index + 1, "epoch": self.lease.epoch}).encode()
                await checkpoints.add(CompletedCheckpoint(job_id, index + 1, meta, time.time()))
            self.jm.emit(
                "batch_committed", job=job_id, batch=index, commit=result, epoch=self.lease.epoch
            )
            index += 1
        seconds = round(time.monotonic() - started, 3)
        return JobOutcome.SUCCEEDED, self._detail(plan, index, seconds=seconds, **attempt.counts())

    async def _stage(self, spec: Pipeline, plan: JobPlan, index: int) -> Path:
        """Compute and stage one batch in a worker thread, in a job group we can cancel."""
        group = f"ha-{plan.job_id}-e{self.lease.epoch}-b{index}"
        stop = threading.Event()
        token = f"e{self.lease.epoch}-{uuid.uuid4().hex[:8]}"
        spark = self.spark

        def work() -> Path:
            df = spec.compute(spark, plan.params, plan.batches[index])
            if stop.is_set():
                raise _Stopped(group)
            return stage_batch(
                df,
                plan.output,
                index,
                files=spec.files_per_batch,
                sort_by=spec.sort_by,
                token=token,
            )

        try:
            # Cancelled: the thread finishes on its own; what it staged is never committed.
            return await run_in_thread(spark, group, work, abandoned=stop)
        except anyio.get_cancelled_exc_class():
            self.jm.emit("batch_cancelled", job=plan.job_id, batch=index)
            raise

    # --- finishing ------------------------------------------------------------------------------

    async def _record(self, job_id: str, outcome: JobOutcome, detail: dict[str, Any]) -> None:
        try:
            await self.stores.job_results.create_dirty(JobResult(job_id, outcome, detail))
        except NodeExists:
            pass  # recorded before a failover; finish its cleanup
        await self._cleanup(job_id)
        await self.stores.job_results.mark_clean(job_id)
        await self._expire_results()

    async def _expire_results(self) -> None:
        """Remove the clean results past their retention (``JobResultStore``), each after
        what its job kept beside it for audit: a stream's commit log."""
        for job_id in await self.stores.job_results.expired():
            await remove_commits(self.writer, self.layout, job_id)
            await self.stores.job_results.remove(job_id)

    async def _finish(self, plan: JobPlan, outcome: JobOutcome, detail: dict[str, Any]) -> None:
        await self.stores.running_jobs.set_done(plan.job_id)
        await self._record(plan.job_id, outcome, detail)
        self.jm.emit("job_finished", job=plan.job_id, outcome=outcome.value, **detail)

    async def _cleanup(self, job_id: str) -> None:
        """Remove what only a running job needs; its result entry stays as the record."""
        await self.stores.checkpoints(job_id).remove_all()
        await self.stores.checkpoint_ids(job_id).remove()
        layout = self.layout
        for container in (layout.completed_checkpoints(job_id), layout.checkpoints(job_id)):
            try:
                await self.writer.delete(container)  # empty now; one node per job otherwise
            except NotEmpty:
                log.info("%s: not empty, left in place", container)
        await self.stores.execution_plans.remove(job_id)
        await self.writer.delete(self.layout.failure(job_id))
        await self.writer.delete(self.layout.attempt(job_id))
        await self.stores.running_jobs.clear(job_id)
        await self._delete_request(self.layout.cancel(job_id))
