"""Streaming pipelines: a Structured Streaming source and a function applied to each micro-batch.

A streaming pipeline is registered like a batch one (``registry``), with a ``stream`` part::

    @streaming_pipeline("events.count", source=file_source("json", SCHEMA),
                        params={"input": Param(str)}, sort_by=("user", "action"))
    def count(spark, params, batch_df):
        return batch_df.groupBy("user", "action").count()

The job manager runs it as a Structured Streaming query whose sink is ``foreachBatch``: each
micro-batch's DataFrame goes through the decorated function, is staged under the job's output
directory and committed by a fenced write (``stream_commit``). Spark's ``checkpointLocation`` is
under the output directory too (``checkpoint_dir``), so a new active restarts the query where
the last one left it (from a copy of its own: ``spark_checkpoint``) and redoes at most the
micro-batch in flight, with the same input (Spark logs a batch's offsets before running it).

A stream has no batch list known at submission: its plan holds one entry, ``{"stream": ...}``
(``is_stream_plan``). With ``interval=None`` the query processes what the source holds and
stops (Spark's ``availableNow`` trigger), which ends the job; with an interval it runs until
the job is cancelled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError
from .registry import Compute, Param, Pipeline, Validate, pipeline

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from .plan import JobPlan

__all__ = (
    "FileSource",
    "Source",
    "StreamSpec",
    "checkpoint_dir",
    "file_source",
    "is_stream_plan",
    "streaming_pipeline",
)

# A streaming DataFrame for the job's checked parameters.
Source = Callable[["SparkSession", Mapping[str, Any]], "DataFrame"]

STREAM_DIR = "_stream"


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """The streaming part of a pipeline: where micro-batches come from and how often."""

    source: Source
    # None: process what is available, then finish (availableNow); seconds: run until cancelled.
    interval: float | None = None

    def __post_init__(self) -> None:
        if self.interval is not None and self.interval <= 0:
            raise ConfigurationError(f"stream interval must be positive, got {self.interval}")


@dataclass(frozen=True, slots=True)
class FileSource:
    """A ``Source`` reading new ``fmt`` files of the directory named by ``param`` (a
    ``file_source``). Its parts are kept so a standby can rehearse it on a copy of a few of
    those files (``stream_rehearsal``)."""

    fmt: str
    schema: str
    param: str = "input"
    files_per_batch: int = 1

    def __call__(self, spark: SparkSession, params: Mapping[str, Any]) -> DataFrame:
        reader = spark.readStream.format(self.fmt).schema(self.schema)
        reader = reader.option("maxFilesPerTrigger", self.files_per_batch)
        if self.fmt == "csv":
            reader = reader.option("header", "true")
        return reader.load(str(Path(params[self.param]).expanduser().absolute()))


def file_source(
    fmt: str, schema: str, *, param: str = "input", files_per_batch: int = 1
) -> FileSource:
    """A source reading new ``fmt`` files (json, csv...) of a directory named by ``param``.

    ``schema`` is a DDL string (streams need one). Spark takes new files oldest first, at most
    ``files_per_batch`` per micro-batch, and logs which ones each batch read, so a redone batch
    reads the same files.
    """
    if files_per_batch < 1:
        raise ConfigurationError(f"files_per_batch must be at least 1, got {files_per_batch}")
    return FileSource(fmt, schema, param, files_per_batch)


def streaming_pipeline(
    name: str,
    *,
    source: Source,
    params: Mapping[str, Param] | None = None,
    sort_by: Sequence[str] | None = None,
    files_per_batch: int = 1,
    interval: float | None = None,
    description: str | None = None,
    validate: Validate | None = None,
    replace: bool = False,
) -> Callable[[Compute], Pipeline]:
    """Decorator registering ``compute(spark, params, batch_df) -> DataFrame`` as the
    micro-batch function of a streaming pipeline ``name`` reading ``source``.

    ``compute`` must be deterministic (same micro-batch, same rows): a batch redone by a new
    active must write the same bytes.
    """

    def plan(checked: Mapping[str, Any]) -> list[Any]:
        return [{"stream": name, "interval": interval}]

    return pipeline(
        name,
        batches=plan,
        params=params,
        sort_by=sort_by,
        files_per_batch=files_per_batch,
        description=description,
        validate=validate,
        replace=replace,
        stream=StreamSpec(source, interval),
    )


def is_stream_plan(plan: JobPlan) -> bool:
    """A streaming job's plan: its one entry says so (readers need no registry for this)."""
    entries = plan.batches
    return len(entries) == 1 and isinstance(entries[0], dict) and "stream" in entries[0]


def checkpoint_dir(output: str | Path) -> Path:
    """Where the job writing ``output`` keeps Spark's checkpoints (shared like the output): one
    ``checkpointLocation`` per leadership term (``spark_checkpoint.term_checkpoint``)."""
    return Path(output) / STREAM_DIR
