"""What one leadership term of the job manager does: recover, take requests, run jobs, finish.

``JobManager`` (``manager.py``) builds a ``Term`` each time its component is granted the lead
and drops it when the grant ends; the term's work runs only inside the grant, and is cancelled
with it. The term decides nothing itself: it reads, asks its ``rules.Schedule`` what to do,
and does that (httpcore's connection pool: decide, then do the I/O). Each job runs as a
``JobRun`` (``runs``) handed the term's ``TermContext``. How a term keeps every batch exactly
once is told in ``manager.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import anyio.lowlevel

from ...drivers.base import NodeEvent
from ...errors import (
    ConfigurationError,
    CorruptData,
    DriverError,
    Fenced,
    NodeExists,
    NoNode,
    NotEmpty,
)
from ...stores import JobOutcome, JobResult
from ..api.plan import JobPlan
from ..client import children
from ..commit.stream_commit import remove_commits
from .rules import (
    Cleanup,
    DeleteRequest,
    Effect,
    Emit,
    Enqueue,
    Finish,
    Interrupt,
    MarkClean,
    Record,
    ReportCorrupt,
    Schedule,
    SetPending,
    StoredPlan,
    StorePlan,
    WriteFailure,
    after_write_failure,
    job_detail,
)
from .runs.base import JobRun, Result, TermContext
from .runs.batch import BatchRun
from .runs.stream import StreamRun

__all__ = ("Term",)

log = logging.getLogger("ha.pipeline.jobmanager")


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


class Term:
    """What one leadership term does; dropped when the term ends. ``poll_interval``: how often
    the inbox is read without its doorbell."""

    def __init__(self, context: TermContext, *, poll_interval: float) -> None:
        self.context = context
        self.stores = context.stores
        self.layout = context.layout
        self.poll_interval = poll_interval
        self.schedule = Schedule()
        self.current: JobRun | None = None  # the running job's run
        self.wake = anyio.Event()
        self.queued = anyio.Event()

    async def run(self) -> None:
        driver = self.context.driver
        await driver.ensure_path(self.layout.inbox)
        sub = driver.subscribe(self.layout.inbox, self._on_doorbell)
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
        """Run ``work``; a backend error once leadership is gone is only its echo (J7).

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
            if after_write_failure(lease_valid=self.context.lease.valid) is WriteFailure.FAIL_TERM:
                raise
            log.info("leadership ended under a store write: %s", exc)
            await anyio.sleep_forever()  # the elector's cancellation is on its way

    def _on_doorbell(self, event: NodeEvent) -> None:
        self.wake.set()

    # --- doing what the schedule decided ----------------------------------------------------------

    async def _do(self, effects: Sequence[Effect]) -> None:
        for effect in effects:
            match effect:
                case Cleanup(job_id):
                    await self._cleanup(job_id)
                case MarkClean(job_id):
                    await self.stores.job_results.mark_clean(job_id)
                case StorePlan(job_id, data):
                    await self.stores.execution_plans.put(job_id, data)
                case SetPending(job_id):
                    await self.stores.running_jobs.set_pending(job_id)
                case DeleteRequest(path):
                    await self._delete_request(path)
                case Record(job_id, outcome, detail):
                    await self._record(job_id, outcome, detail)
                case Finish(plan, outcome, detail):
                    await self._finish(plan, outcome, detail)
                case Enqueue(plan):
                    self.schedule.enqueue(plan)
                    self.queued.set()
                case Interrupt():
                    if self.current is not None:
                        self.current.cancel()
                case ReportCorrupt(job_id, error):
                    # Never replace or delete what we cannot read; say so and leave it.
                    log.error("job %s not recovered: %s", job_id, error)
                    self.context.emit("corrupt_plan", job=job_id, error=error)
                case Emit(name, fields):
                    self.context.emit(name, **fields)

    # --- recovery -------------------------------------------------------------------------------

    async def _recover(self) -> None:
        for result in await self.stores.job_results.dirty_results():
            job_id = result.job_id
            finished = Emit("cleanup_finished", {"job": job_id})
            await self._do([Cleanup(job_id), MarkClean(job_id), finished])  # J1
        await self._expire_results()
        stored = await self.stores.execution_plans.job_ids()
        found = [await self._read_plan(job_id) for job_id in stored]
        await self._do(self.schedule.recovered(found))
        if self.schedule.queue:
            self.queued.set()

    async def _read_plan(self, job_id: str) -> StoredPlan:
        if await self.stores.job_results.has_entry(job_id):
            return StoredPlan(job_id, has_result=True)
        where = f"{self.layout.execution_plans}/{job_id}"
        try:
            plan = JobPlan.from_bytes(await self.stores.execution_plans.recover(job_id), where)
        except CorruptData as exc:
            return StoredPlan(job_id, has_result=False, error=str(exc))
        return StoredPlan(job_id, has_result=False, plan=plan)

    # --- requests: submissions and cancellations ------------------------------------------------

    async def _watch_requests(self) -> None:
        while True:
            self.wake = anyio.Event()
            await self._take_submissions()
            await self._take_cancels()
            with anyio.move_on_after(self.poll_interval):
                await self.wake.wait()

    async def _known(self, job_id: str) -> bool:
        return await self.stores.execution_plans.get(job_id) is not None or (
            await self.stores.job_results.has_entry(job_id)
        )

    async def _take_submissions(self) -> None:
        driver = self.context.driver
        for job_id in await children(driver, self.layout.inbox):
            path = self.layout.submission(job_id)
            try:
                data, _ = await driver.get(path)
            except NoNode:
                continue
            known = await self._known(job_id)
            await self._do(self.schedule.submitted(job_id, path, data, known=known))

    async def _take_cancels(self) -> None:
        for job_id in await children(self.context.driver, self.layout.cancels):
            await self._do(self.schedule.cancel_requested(job_id, self.layout.cancel(job_id)))

    async def _delete_request(self, path: str) -> None:
        # Inbox and cancel nodes are the clients' (unfenced); removing one twice is harmless.
        try:
            await self.context.driver.delete(path)
        except NoNode:
            pass

    # --- running --------------------------------------------------------------------------------

    async def _run_jobs(self) -> None:
        while True:
            while (plan := self.schedule.start_next()) is None:
                self.queued = anyio.Event()
                await self.queued.wait()
            try:
                outcome, detail = await self._run_job(plan)
            finally:
                self.current = None
                self.schedule.ended()
            await self._finish(plan, outcome, detail)

    async def _run_job(self, plan: JobPlan) -> Result:
        try:
            spec = self.schedule.lookup(plan.pipeline)
        except ConfigurationError as exc:
            return JobOutcome.FAILED, job_detail(plan, 0, error=str(exc))
        # The run exists before the first await: a cancel request from now on reaches it.
        run: JobRun
        if spec.stream is not None:
            run = StreamRun(self.context, spec, plan)
        else:
            run = BatchRun(self.context, spec, plan)
        self.current = run
        await self.stores.running_jobs.set_running(plan.job_id)
        return await run.run()

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
            await remove_commits(self.context.writer, self.layout, job_id)
            await self.stores.job_results.remove(job_id)

    async def _finish(self, plan: JobPlan, outcome: JobOutcome, detail: dict[str, Any]) -> None:
        await self.stores.running_jobs.set_done(plan.job_id)
        await self._record(plan.job_id, outcome, detail)
        self.context.emit("job_finished", job=plan.job_id, outcome=outcome.value, **detail)

    async def _cleanup(self, job_id: str) -> None:
        """Remove what only a running job needs; its result entry stays as the record."""
        writer, layout = self.context.writer, self.layout
        await self.stores.checkpoints(job_id).remove_all()
        await self.stores.checkpoint_ids(job_id).remove()
        for container in (layout.completed_checkpoints(job_id), layout.checkpoints(job_id)):
            try:
                await writer.delete(container)  # empty now; one node per job otherwise
            except NotEmpty:
                log.info("%s: not empty, left in place", container)
        await self.stores.execution_plans.remove(job_id)
        await writer.delete(layout.failure(job_id))
        await writer.delete(layout.attempt(job_id))
        await self.stores.running_jobs.clear(job_id)
        await self._delete_request(layout.cancel(job_id))
