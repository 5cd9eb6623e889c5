"""A hot standby rehearses the streaming jobs it may take over, in private.

A JVM's first micro-batch of a query costs about half a second more than the next ones: Spark
generates and compiles the query's code (a JVM-wide cache keyed by that code) and loads what it
runs. With ``warm_streams``, a standby therefore runs each stored streaming job's own source
and function once, on a copy of one micro-batch's worth of its input files, into a temporary
directory: the same plan, so a new active's first micro-batch finds its code compiled.

Nothing of it is visible: the job's input is only read (a few files copied out), the
checkpoint and output are the temporary directory's, and nothing is written to the stores.
Only file sources (``streaming.FileSource``) are rehearsed, since their input can be sampled
by copying files; other sources are skipped. ``rehearse`` blocks; ``stop`` ends it early (the
standby was elected). ``rehearse_stored_streams`` is the standby's loop; cancelled, it leaves a
rehearsal in flight to finish its micro-batch on its own.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from ...errors import ConfigurationError, CorruptData, DriverError
from ...stores import Stores
from ..api.plan import JobPlan
from ..api.registry import Pipeline, get_pipeline
from ..api.streaming import FileSource, StreamSpec
from ..commit.output import stage_batch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ("rehearse", "rehearse_stored_streams", "sample_files")

log = logging.getLogger("ha.pipeline.stream_rehearsal")


def sample_files(directory: Path, count: int) -> list[Path]:
    """Up to ``count`` input files of ``directory`` that Spark would read (not hidden: no
    leading ``.`` or ``_``), without listing more of it than needed."""
    found: list[Path] = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if not entry.name.startswith((".", "_")) and entry.is_file():
                    found.append(Path(entry.path))
                    if len(found) == count:
                        break
    except OSError:  # not there yet: nothing to rehearse on
        return []
    return found


def rehearse(spark: Any, spec: Pipeline, plan: JobPlan, *, stop: threading.Event) -> bool:
    """Run ``plan``'s query for one micro-batch on a private copy of a few input files.

    False when there was nothing to rehearse (not a file source, no input yet, or ``stop``).
    Raises what the query raised.
    """
    stream = spec.stream
    source = stream.source if isinstance(stream, StreamSpec) else None
    if not isinstance(source, FileSource) or stop.is_set():
        return False
    files = sample_files(Path(plan.params[source.param]).expanduser(), source.files_per_batch)
    with tempfile.TemporaryDirectory(prefix="ha-rehearsal-") as tmp:
        root = Path(tmp)
        (root / "in").mkdir()
        copied = 0
        for path in files:
            try:
                shutil.copyfile(path, root / "in" / path.name)
                copied += 1
            except FileNotFoundError:  # moved away meanwhile
                continue
        if not copied:  # no input yet: another time
            return False
        params = {**plan.params, source.param: str(root / "in")}

        def sink(df: DataFrame, batch_id: int) -> None:
            if not stop.is_set():
                out = spec.compute(spark, params, df)
                stage_batch(
                    out, root / "out", batch_id, files=spec.files_per_batch, sort_by=spec.sort_by
                )

        query = (
            source(spark, params)
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(root / "checkpoint"))
            .trigger(availableNow=True)  # the copied files make one micro-batch, then it ends
            .start()
        )
        try:
            while not query.awaitTermination(1):
                if stop.is_set():
                    break
        finally:
            query.stop()
    return not stop.is_set()


async def rehearse_stored_streams(
    stores: Stores,
    spark: Any,
    *,
    leading: threading.Event,
    emit: Callable[..., None],
    poll: float,
) -> None:
    """Forever, every ``poll`` seconds while ``leading`` is clear: rehearse each stored
    streaming job not rehearsed yet (event ``stream_rehearsed``; a failure is logged, not
    tried again). Only reads the stores; a job whose plan is gone is forgotten."""
    seen: set[str] = set()
    while True:
        if not leading.is_set():
            try:
                stored = await stores.execution_plans.job_ids()
                seen.intersection_update(stored)  # a finished job's plan is gone: forget it
                for job_id in stored:
                    if job_id not in seen and not leading.is_set():
                        await _rehearse_job(stores, spark, job_id, seen, leading=leading, emit=emit)
            except (DriverError, CorruptData, OSError) as exc:  # a standby's extra: try later
                log.info("reading the stored jobs to rehearse failed: %s", exc)
        await anyio.sleep(poll)


async def _rehearse_job(
    stores: Stores,
    spark: Any,
    job_id: str,
    seen: set[str],
    *,
    leading: threading.Event,
    emit: Callable[..., None],
) -> None:
    found = await _stream_plan(stores, job_id)
    if found is None:
        seen.add(job_id)
        return
    spec, plan = found
    started = time.monotonic()
    try:
        done = await anyio.to_thread.run_sync(
            partial(rehearse, spark, spec, plan, stop=leading), abandon_on_cancel=True
        )
    except Exception:
        log.warning("rehearsing stream job %s failed", job_id, exc_info=True)
        seen.add(job_id)  # not again: the active reports what is wrong with it
        return
    if done:
        seen.add(job_id)
        emit("stream_rehearsed", job=job_id, seconds=round(time.monotonic() - started, 3))


async def _stream_plan(stores: Stores, job_id: str) -> tuple[Pipeline, JobPlan] | None:
    """The job's pipeline and plan if it is a stream this process knows; read, never locked."""
    data = await stores.execution_plans.get(job_id)
    if data is None:
        return None
    try:
        plan = JobPlan.from_bytes(data, f"{stores.layout.execution_plans}/{job_id}")
        spec = get_pipeline(plan.pipeline)
    except (CorruptData, ConfigurationError):  # the active reports these
        return None
    return (spec, plan) if spec.stream is not None else None
