"""A batch job's run in one term: batch by batch from its latest checkpoint.

Each batch is computed and staged in a worker thread, in a Spark job group a cancel request or
the end of the term cancels (the thread finishes on its own; what it staged is never
committed), then committed by an atomic rename (``commit.output``), then recorded as checkpoint
``n`` = "n batches committed" (fenced). A batch that raises counts as one failed attempt and is
run again, until the job's ``max_attempts`` (``attempts``). Why nothing is lost or doubled is
told in ``manager.py``.
"""

from __future__ import annotations

import json
import threading
import time
import traceback
import uuid
from pathlib import Path

import anyio
import anyio.to_thread

from ....stores import CompletedCheckpoint, JobOutcome
from ...api.plan import JobPlan
from ...api.registry import Pipeline
from ...commit.output import clean_staging, commit_batch, stage_batch
from ...spark import run_in_thread
from ..attempts import Attempt
from ..rules import Staged, after_stage, job_detail
from .base import Result, SparkWork, TermContext

__all__ = ("BatchRun",)


class _Stopped(Exception):
    """The batch's thread noticed that its result is no longer wanted."""


class BatchRun:
    """``await BatchRun(context, spec, plan).run()``; ``cancel()`` from another task."""

    def __init__(self, context: TermContext, spec: Pipeline, plan: JobPlan) -> None:
        self.context = context
        self.spec = spec
        self.plan = plan
        self.work = SparkWork()

    def cancel(self) -> None:
        self.work.cancel()

    async def run(self) -> Result:
        ctx, plan = self.context, self.plan
        checkpoints = ctx.stores.checkpoints(plan.job_id)
        recovered = await checkpoints.recover()
        index = max((c.checkpoint_id for c in recovered), default=0)
        attempt = await Attempt.begin(ctx.writer, ctx.layout, plan, index, ctx.emit)
        if (error := attempt.verdict()) is not None:
            return JobOutcome.FAILED, job_detail(plan, index, error=error, **attempt.counts())
        try:
            return await self._run_batches(index, attempt)
        except BaseException:  # the term ends; this job manager lives on
            await attempt.close()
            raise

    async def _run_batches(self, index: int, attempt: Attempt) -> Result:
        ctx, plan, job_id = self.context, self.plan, self.plan.job_id
        started = time.monotonic()
        checkpoints = ctx.stores.checkpoints(job_id)
        await anyio.to_thread.run_sync(clean_staging, plan.output)
        ctx.emit("job_started", job=job_id, from_batch=index, batches=len(plan.batches))
        while index < len(plan.batches):
            if self.work.cancelled:
                return JobOutcome.CANCELLED, job_detail(plan, index)
            ctx.emit("batch_started", job=job_id, batch=index, epoch=ctx.epoch)
            try:
                with self.work.interruptible():
                    staged = await self._stage(index)
                step = after_stage(cancelled=self.work.cancelled, lease_valid=ctx.lease.valid)
                if step is Staged.CANCEL:
                    return JobOutcome.CANCELLED, job_detail(plan, index)
                if step is Staged.DEPOSED:  # or woke up past its stop_deadline()
                    await anyio.sleep_forever()  # our scope is being cancelled
                result = await anyio.to_thread.run_sync(commit_batch, staged, plan.output, index)
            except Exception as exc:
                error = f"batch {index}: {type(exc).__name__}: {exc}"
                if await attempt.failed(error, "batch_failed", batch=index):
                    tb = "".join(traceback.format_exception(exc)[-3:])
                    detail = job_detail(plan, index, error=error, traceback=tb)
                    return JobOutcome.FAILED, {**detail, **attempt.counts()}
                continue  # the same batch again
            if ctx.checkpointing:
                meta = json.dumps({"next_batch": index + 1, "epoch": ctx.epoch}).encode()
                await checkpoints.add(CompletedCheckpoint(job_id, index + 1, meta, time.time()))
            ctx.emit("batch_committed", job=job_id, batch=index, commit=result, epoch=ctx.epoch)
            index += 1
        seconds = round(time.monotonic() - started, 3)
        return JobOutcome.SUCCEEDED, job_detail(plan, index, seconds=seconds, **attempt.counts())

    async def _stage(self, index: int) -> Path:
        """Compute and stage one batch in a worker thread, in a job group we can cancel."""
        spec, plan, epoch = self.spec, self.plan, self.context.epoch
        group = f"ha-{plan.job_id}-e{epoch}-b{index}"
        stop = threading.Event()
        token = f"e{epoch}-{uuid.uuid4().hex[:8]}"
        spark = self.context.spark

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
            self.context.emit("batch_cancelled", job=plan.job_id, batch=index)
            raise
