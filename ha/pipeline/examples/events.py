"""The example streaming pipeline: counting users' actions in a directory of JSON-lines files.

Input: files ``events-NNNN.json`` of ``{"user": int, "ts": int (ms), "action": str}`` lines,
written by :func:`generate_events`, each with its own modification time (Spark's file source
takes new files oldest first). Output, one row per (user, action) of each micro-batch: its
count and first and last time, every value exact, so a redone micro-batch writes the same
bytes.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError
from ..api.registry import Param
from ..api.streaming import file_source, streaming_pipeline

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ("SCHEMA", "count_actions", "generate_events")

SCHEMA = "user BIGINT, ts BIGINT, action STRING"
ACTIONS = ("view", "click", "add", "purchase")
START_MS = 1_700_006_400_000  # a fixed origin: the same arguments give the same files


def generate_events(
    directory: Path | str, *, files: int = 4, rows: int = 200, users: int = 20, first: int = 0
) -> list[Path]:
    """Write ``files`` files of ``rows`` events each, numbered from ``first``; return them.

    Each file is written to a hidden name then renamed (the source must never see half a file)
    and gets a modification time one second after the previous one's.
    """
    if files < 1 or rows < 1 or users < 1:
        raise ConfigurationError("files, rows and users must be positive")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for n in range(first, first + files):
        lines = []
        for i in range(rows):
            k = n * rows + i
            event = {"user": (k * 7919) % users, "ts": START_MS + k * 997, "action": ACTIONS[k % 4]}
            lines.append(json.dumps(event, separators=(",", ":")))
        path = out / f"events-{n:04d}.json"
        hidden = out / f".events-{n:04d}.json.tmp"
        hidden.write_text("\n".join(lines) + "\n")
        os.utime(hidden, (START_MS / 1000 + n, START_MS / 1000 + n))
        hidden.rename(path)
        paths.append(path)
    return paths


def _check(params: Mapping[str, Any]) -> None:
    if not Path(params["input"]).expanduser().is_dir():
        raise ValueError(f"input directory does not exist: {params['input']}")
    if params["delay_seconds"] < 0:
        raise ValueError(f"delay_seconds must not be negative, got {params['delay_seconds']}")


@streaming_pipeline(
    "events.count",
    source=file_source("json", SCHEMA),
    params={
        "input": Param(str, help="directory of events-*.json files (JSON lines)"),
        "delay_seconds": Param(float, 0.0, "sleep before each micro-batch (demos and tests)"),
    },
    sort_by=("user", "action"),
    validate=_check,
)
def count_actions(spark: SparkSession, params: Mapping[str, Any], batch: DataFrame) -> DataFrame:
    """Counts of each user's actions, per micro-batch of new event files."""
    from pyspark.sql import functions as F

    if params["delay_seconds"]:
        time.sleep(params["delay_seconds"])
    return batch.groupBy("user", "action").agg(
        F.count(F.lit(1)).alias("events"),
        F.min("ts").alias("first_ts"),
        F.max("ts").alias("last_ts"),
    )
