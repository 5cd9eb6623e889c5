"""Running a streaming job while active: a Structured Streaming query with a fenced sink.

The active job manager starts the pipeline's query with Spark's ``checkpointLocation`` under
the job's output directory (its term's copy: ``spark_checkpoint``) and ``foreachBatch`` as
its sink.
Spark calls the sink in a thread of this Python process (Py4J's callback server): it computes
the micro-batch, stages it, and commits it through ``stream_commit`` on the job manager's event
loop (a ``BlockingPortal`` that outlives leadership terms, so a late batch of a deposed term
still meets the fence and is refused there, in the open).

Two processes are involved, the Python driver and Spark's JVM, and either may stop alone:

- Python paused or killed, JVM running: the JVM blocks in its ``foreachBatch`` call (the
  callback is Python), and a JVM whose Python parent died exits when its stdin closes. Until
  then it writes only staging directories and its own term's checkpoint copy; nothing
  becomes visible without the Python driver's fenced record.
- JVM paused: the query stalls, the Python driver keeps its lease and nothing is written.
- JVM killed: the session is gone for good, so the job manager leaves the election (a standby
  with a live session takes over) instead of counting failures against the query; the attempt
  counts as the job manager's death, as the OOM killer's would.

When the term ends (leadership lost, or the job cancelled) no new micro-batch starts, the one in
flight is let finish (its commit meets the fence) for at most ``STOP_GRACE`` seconds, then the
query is stopped. A query that fails otherwise counts as one failed attempt of the job and is
restarted from its checkpoint, up to the job's ``max_attempts``; a driver (or JVM) that dies
running it leaves its attempt open, for the next active to count as a death (``attempts``).
The events of a micro-batch
(``batch_started``, ``batch_committed``, ``batch_rejected``) are emitted from Spark's callback
thread, not the event loop's.
"""

from __future__ import annotations

import itertools
import logging
import tempfile
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from ....errors import Fenced
from ....stores import JobOutcome
from ...api.registry import Pipeline
from ...api.streaming import StreamSpec, checkpoint_dir
from ...client import count_commits
from ...commit.output import clean_staging, stage_batch
from ...commit.spark_checkpoint import term_checkpoint
from ...commit.stream_commit import commit_micro_batch
from ..attempts import Attempt
from ..rules import QueryEnd, after_query, job_detail
from .base import Result, SparkWork, TermContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.query import StreamingQuery

    from ...api.plan import JobPlan

__all__ = ("STOP_GRACE", "StreamRun", "session_alive", "warm_streaming")

log = logging.getLogger("ha.pipeline.stream_run")

STOP_GRACE = 10.0
_queries = itertools.count()


class _Stopped(Exception):
    """The term is over: no new micro-batch starts."""


def session_alive(spark: Any) -> bool:
    """Whether the session's JVM still answers (it may have been killed under us)."""
    try:
        return not spark.sparkContext._jsc.sc().isStopped()
    except Exception:
        return False


class StreamRun:
    """One streaming job in one leadership term: ``await StreamRun(context, spec, plan).run()``;
    ``cancel()`` from another task."""

    def __init__(self, context: TermContext, spec: Pipeline, plan: JobPlan) -> None:
        assert isinstance(spec.stream, StreamSpec)
        self.context = context
        self.emit = context.emit
        self.spec = spec
        self.stream: StreamSpec = spec.stream
        self.plan = plan
        self.epoch = context.epoch
        self.work = SparkWork()
        self.stop = threading.Event()
        self.in_flight = threading.Lock()
        self.checkpoint = checkpoint_dir(plan.output)  # this term's copy, once run() made it

    def cancel(self) -> None:
        self.work.cancel()

    async def run(self) -> Result:
        ctx, plan, job_id = self.context, self.plan, self.plan.job_id
        done = await count_commits(ctx.driver, ctx.layout, job_id)
        attempt = await Attempt.begin(ctx.writer, ctx.layout, plan, done, ctx.emit)
        if (reason := attempt.verdict()) is not None:
            return JobOutcome.FAILED, await self._detail(error=reason, **attempt.counts())
        try:
            return await self._run(attempt)
        except BaseException:  # the term ends; unless Spark went (keep_open), we live on
            await attempt.close()
            raise

    async def _run(self, attempt: Attempt) -> Result:
        ctx, plan, job_id = self.context, self.plan, self.plan.job_id
        await anyio.to_thread.run_sync(clean_staging, plan.output)
        self.checkpoint, trimmed = await anyio.to_thread.run_sync(
            term_checkpoint, checkpoint_dir(plan.output), self.epoch
        )
        if trimmed:  # a dead driver's half-planned batch: planned again, the same way
            self.emit("checkpoint_trimmed", job=job_id, files=[p.name for p in trimmed])
        self.emit("job_started", job=job_id, from_batch=attempt.progress, stream=True)
        started = time.monotonic()
        while True:
            error: BaseException | None = None
            with self.work.interruptible():  # a cancel request stops the query
                error = await self._query()
            end = after_query(
                cancelled=self.work.cancelled,
                failed=error is not None,
                session_alive=error is None or session_alive(ctx.spark),
            )
            if end is QueryEnd.CANCELLED:
                return JobOutcome.CANCELLED, await self._detail()
            if end is QueryEnd.SUCCEEDED:
                seconds = round(time.monotonic() - started, 3)
                return JobOutcome.SUCCEEDED, await self._detail(seconds=seconds, **attempt.counts())
            if end is QueryEnd.SPARK_LOST:
                self.emit("spark_lost", job=job_id, epoch=self.epoch, error=str(error))
                log.error("Spark's JVM is gone (%s): leaving the election", error)
                # Killed from outside or by the job (the OOM killer): the next active counts
                # this attempt as a death, as it would the whole process's.
                attempt.keep_open = True
                ctx.leave()  # a standby with a live session takes over
                await anyio.sleep_forever()
            assert error is not None  # QueryEnd.FAILED
            text = f"stream: {type(error).__name__}: {_first_line(error)}"
            if await attempt.failed(text, "stream_failed"):
                tb = "".join(traceback.format_exception(error)[-3:])
                return JobOutcome.FAILED, await self._detail(
                    error=text, traceback=tb, **attempt.counts()
                )

    async def _detail(self, **extra: Any) -> dict[str, Any]:
        done = await count_commits(self.context.driver, self.context.layout, self.plan.job_id)
        return job_detail(self.plan, done, stream=True, **{"batches": done, **extra})

    # --- the query ------------------------------------------------------------------------------

    async def _query(self) -> BaseException | None:
        """Run the query to its end; its error, or None. Cancelled: stop it, then re-raise."""
        try:
            query = await anyio.to_thread.run_sync(self._start)
        except Exception as exc:  # e.g. a checkpoint a dying JVM still writes: try again
            return exc
        try:
            return await anyio.to_thread.run_sync(_await, query, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            self.stop.set()
            with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_GRACE + 5):
                await anyio.to_thread.run_sync(self._stop, query, abandon_on_cancel=True)
            raise

    def _start(self) -> StreamingQuery:
        df = self.stream.source(self.context.spark, self.plan.params)
        writer = (
            df.writeStream.foreachBatch(self._on_batch)
            .option("checkpointLocation", str(self.checkpoint))
            .queryName(f"ha-{self.plan.job_id}-e{self.epoch}-{next(_queries)}")
        )
        if self.stream.interval is None:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{self.stream.interval} seconds")
        return writer.start()

    def _stop(self, query: StreamingQuery) -> None:
        # The batch in flight goes on to its fenced commit (refused if we were deposed).
        if self.in_flight.acquire(timeout=STOP_GRACE):
            self.in_flight.release()
        try:
            query.stop()
        except Exception:  # already failed, or the JVM is gone
            log.info("stopping the streaming query failed", exc_info=True)

    # --- one micro-batch (a Py4J callback thread) -----------------------------------------------

    def _on_batch(self, df: DataFrame, batch_id: int) -> None:
        if self.stop.is_set():
            raise _Stopped(f"term of epoch {self.epoch} is over")
        ctx, plan, job_id = self.context, self.plan, self.plan.job_id
        with self.in_flight:
            self.emit("batch_started", job=job_id, batch=batch_id, epoch=self.epoch)
            out = self.spec.compute(ctx.spark, plan.params, df)
            staged = stage_batch(
                out,
                plan.output,
                batch_id,
                files=self.spec.files_per_batch,
                sort_by=self.spec.sort_by,
                token=f"e{self.epoch}-{uuid.uuid4().hex[:8]}",
            )
            try:
                result = ctx.portal.call(
                    commit_micro_batch,
                    ctx.writer,
                    ctx.layout,
                    job_id,
                    batch_id,
                    staged,
                    plan.output,
                )
            except Fenced as exc:
                self.emit(
                    "batch_rejected", job=job_id, batch=batch_id, epoch=self.epoch, error=str(exc)
                )
                raise
            self.emit(
                "batch_committed", job=job_id, batch=batch_id, commit=result, epoch=self.epoch
            )


def warm_streaming(spark: Any) -> None:
    """Run a one-file stream through ``foreachBatch`` and a Parquet write, then forget it.

    A JVM's first micro-batch costs seconds more than the next ones (Py4J's callback server
    starts, the file source and the writer load their classes); a hot standby pays that ahead
    of a takeover instead of after it. Blocking; a failure is logged, never raised (the
    session is still good for what did not fail).
    """
    try:
        _warm_up(spark)
    except Exception:
        log.warning("warming up streaming failed", exc_info=True)


def _warm_up(spark: Any) -> None:
    with tempfile.TemporaryDirectory(prefix="ha-warm-stream-") as tmp:
        source = Path(tmp, "in")
        source.mkdir()
        (source / "a.json").write_text('{"k": 1}\n')

        def sink(df: DataFrame, batch_id: int) -> None:
            df.groupBy("k").count().write.parquet(str(Path(tmp, f"out-{batch_id}")))

        query = (
            spark.readStream.schema("k BIGINT")
            .json(str(source))
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(Path(tmp, "checkpoint")))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()


def _await(query: StreamingQuery) -> BaseException | None:
    try:
        query.awaitTermination()
    except Exception as exc:  # StreamingQueryException: the query failed
        return exc
    return None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else repr(error)
