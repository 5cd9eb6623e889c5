"""The HA job manager: a contender that runs pipeline jobs on Spark while it is the active.

Several job manager processes take part in one election (``<cluster root>/jobmanager``). Each
builds its SparkSession as soon as it starts (hot standby), so a takeover does not pay Spark's
start-up. The active, for each leadership term:

1. finishes the cleanup of jobs whose result is recorded but dirty, then recovers every job
   whose execution plan is stored and that has no result (locking its plan);
2. takes submissions from the inbox into the execution plan store (fenced) and refuses the
   malformed ones with a failed result that says why;
3. runs the jobs one at a time (streams: ``stream_run``), batch by batch from the latest
   checkpoint: stage the batch's output (Spark), commit it (atomic rename, ``commit``), then
   record checkpoint ``n`` = "n batches committed" (fenced);
4. records each job's result (dirty), cleans its plan, checkpoints and registry entry, and
   marks the result clean. A job found with a plan but no result is run again from its
   checkpoint, even if the registry says DONE (the result was lost with its active): batches
   are idempotent, so running it again is how its real outcome is learned.

Why nothing is lost or duplicated: a batch's checkpoint is written only after its output is
committed, so a crash can only make a batch run again, never skip one; running it again writes
the same bytes to the same place (``commit``). Store writes carry the epoch, so a deposed
active cannot move a checkpoint or record a result; its late commit of a batch output is
harmless for the same reason a redo is.

On loss of leadership the elector cancels ``become_active``: the running batch's Spark job
group is cancelled, its staging directory is never committed, and the active stops touching
outputs (it also checks ``lease.valid``, with ``Lease.stop_deadline()``, before each commit: a
paused process may wake up late). A job whose pipeline raises, or whose job managers die
running it, is tried again up to its ``max_attempts`` across failovers, then failed with the
reason (``attempts``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
from anyio.from_thread import BlockingPortal

from ..drivers.base import Driver, NodeEvent
from ..election.elector import Elector
from ..election.journal import JournalWriter
from ..election.lease import Lease
from ..election.timing import Timing
from ..errors import (
    ConfigurationError,
    CorruptData,
    DriverError,
    Fenced,
    NodeExists,
    NoNode,
    NotEmpty,
)
from ..stores import BlobStore, CompletedCheckpoint, JobOutcome, JobResult, Stores, Writer
from .attempts import Attempt
from .commit import clean_staging, commit_batch, stage_batch
from .jobs import children
from .layout import JobLayout
from .plan import JobPlan
from .registry import Pipeline, get_pipeline
from .spark import SparkSettings, WarmSession, run_in_thread
from .stream_run import StreamRun, warm_streaming

__all__ = ("JobManager", "EventSink")

log = logging.getLogger("ha.pipeline.jobmanager")

EventSink = Callable[[str, dict[str, Any]], None]


class _Stopped(Exception):
    """The batch's thread noticed that its result is no longer wanted."""


class JobManager:
    """One job manager process's part in the election. ``await manager.run()`` until ``quit()``.

    ``blobs``: the blob directory shared by every job manager of the cluster (plans and
    checkpoints are kept there, the coordination backend holds pointers). ``spark``: settings
    or a ``WarmSession``; with ``hot_standby`` the session is built at start, not when elected
    (``warm_streams``: and a tiny stream runs once). ``checkpointing=False`` skips the per-batch
    checkpoint (a job restarts from its first batch after a failover): for benchmarks only.
    """

    def __init__(
        self,
        driver: Driver,
        cluster_id: str,
        *,
        identity: str,
        blobs: BlobStore | str | os.PathLike[str],
        spark: SparkSettings | WarmSession | None = None,
        hot_standby: bool = True,
        prefix: str = "/ha",
        timing: Timing | None = None,
        journal: JournalWriter | str | None = None,
        poll_interval: float = 1.0,
        checkpointing: bool = True,
        on_event: EventSink | None = None,
        warm_streams: bool = False,
    ) -> None:
        if poll_interval <= 0:
            raise ConfigurationError(f"poll_interval must be positive, got {poll_interval}")
        self.driver = driver
        self.cluster_id = cluster_id
        self.identity = identity
        self.blobs = blobs
        self.prefix = prefix
        self.layout = JobLayout(cluster_id, prefix)
        self.warm = spark if isinstance(spark, WarmSession) else WarmSession(spark, hot=hot_standby)
        self.elector = Elector(
            driver, self.layout.election, identity, timing=timing, journal=journal
        )
        self.poll_interval = poll_interval
        self.checkpointing = checkpointing
        self.on_event = on_event or partial(log.info, "%s %s")
        self.portal: BlockingPortal | None = None
        self.warm_streams = warm_streams

    def emit(self, name: str, **fields: Any) -> None:
        fields.setdefault("t", time.time())
        fields.setdefault("identity", self.identity)
        try:
            self.on_event(name, fields)
        except Exception:  # an observer's bug must not stop the job manager
            log.exception("event sink raised on %s", name)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[Any] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Join the election and serve until ``quit()``."""
        self.warm.start()
        self.emit("started", election=self.layout.election, hot_standby=self.warm.hot)
        # Streams commit through it from Spark's threads, past their term (``stream_run``).
        async with BlockingPortal() as self.portal, anyio.create_task_group() as tg:
            if self.warm.hot:
                tg.start_soon(self._announce_warm)
            await self.elector.run(self, task_status=task_status)
            tg.cancel_scope.cancel()

    async def _announce_warm(self) -> None:
        try:
            spark = await self.warm.wait()
            if self.warm_streams:
                await anyio.to_thread.run_sync(warm_streaming, spark, abandon_on_cancel=True)
        except Exception:  # reported when it matters: on election
            return
        self.emit("spark_warm")

    def quit(self) -> None:
        self.elector.quit()

    # --- contender hooks ------------------------------------------------------------------------

    async def become_active(self, lease: Lease) -> None:
        self.emit("active", epoch=lease.epoch)
        stores = Stores(
            self.driver, self.cluster_id, blobs=self.blobs, lease=lease, prefix=self.prefix
        )
        try:
            spark = await self.warm.wait()
            self.emit("spark_ready", epoch=lease.epoch)
            await _Term(self, stores, lease, spark).run()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(2.0):
                try:
                    await stores.close()  # releases our locks; every byte stays
                except DriverError as exc:  # the session may be gone: its locks went with it
                    log.info("store locks not released: %s", exc)

    async def become_standby(self) -> None:
        self.emit("standby")

    async def enter_neutral(self) -> None:
        self.emit("neutral")


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
