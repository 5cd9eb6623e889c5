"""The example pipeline: sessionizing a click stream, with its data generator.

Input: one Parquet file per day of clicks (``user_id``, ``ts``, ``page``, ``action``), written
by :func:`generate_clicks`. One batch per file. A session is a user's run of clicks with no gap
longer than ``gap_seconds``; sessions are cut at day boundaries, as a daily job would.

Output, one row per session, every value exact (no floating-point aggregates, whose last bits
could depend on how Spark splits the work), so the output bytes are repeatable.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError
from ..api.registry import Param, pipeline

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ("PAGES", "generate_clicks", "list_click_files", "sessionize")

PAGES = tuple(
    ["home", "search", "cart", "checkout", "account", "help"] + [f"product/{i}" for i in range(40)]
)
ACTIONS = ("view", "click", "add", "purchase")
DAY = 86_400
EPOCH_START = 1_700_006_400  # 2023-11-15 00:00:00 UTC, a fixed origin for repeatable data


def generate_clicks(
    directory: Path | str,
    *,
    days: int = 4,
    rows_per_day: int = 50_000,
    users: int = 2_000,
    seed: int = 0,
) -> list[Path]:
    """Write ``days`` Parquet files of clicks (``clicks-NNNN.parquet``); return their paths.

    Vectorized with numpy: about a million rows per second. The same arguments give the same
    files. Clicks come in bursts (sessions) of geometric length with exponential pauses.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    if days < 1 or rows_per_day < 1 or users < 1:
        raise ConfigurationError("days, rows_per_day and users must be positive")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for day in range(days):
        rng = np.random.default_rng([seed, day])
        # Sessions of 1 + geometric(mean 8) clicks, 20-120 s apart on average per user.
        lengths = rng.geometric(1 / 8, size=rows_per_day)  # sums to >= rows_per_day
        ends = np.cumsum(lengths)
        n_sessions = int(np.searchsorted(ends, rows_per_day)) + 1
        lengths = lengths[:n_sessions]
        lengths[-1] -= int(ends[n_sessions - 1] - rows_per_day)
        session_of_row = np.repeat(np.arange(n_sessions), lengths)
        first_row = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        pauses = rng.exponential(rng.uniform(20, 120, size=n_sessions)[session_of_row])
        pauses[first_row] = 0.0
        csum = np.cumsum(pauses)
        offsets = csum - csum[first_row][session_of_row]  # seconds since the session start
        starts = rng.uniform(0, DAY, size=n_sessions)
        ts_s = np.minimum(starts[session_of_row] + offsets, DAY - 0.001)
        ts_ms = (EPOCH_START + day * DAY) * 1000 + np.floor(ts_s * 1000).astype(np.int64)
        user_of_session = rng.integers(0, users, size=n_sessions)
        order = rng.permutation(rows_per_day)  # files are not sorted: the pipeline sorts
        table = pa.table(
            {
                "user_id": pa.array(user_of_session[session_of_row][order], pa.int64()),
                "ts": pa.array(ts_ms[order], pa.timestamp("ms", tz="UTC")),
                "page": pa.array(
                    np.array(PAGES, dtype=object)[rng.integers(0, len(PAGES), rows_per_day)]
                ),
                "action": pa.array(
                    np.array(ACTIONS, dtype=object)[
                        rng.choice(len(ACTIONS), rows_per_day, p=[0.6, 0.3, 0.08, 0.02])
                    ]
                ),
            }
        )
        path = out / f"clicks-{day:04d}.parquet"
        pq.write_table(table, path, compression="snappy")
        paths.append(path)
    return paths


def list_click_files(params: Mapping[str, Any]) -> list[str]:
    """One batch per input file, in name order (absolute paths, so any process finds them)."""
    root = Path(params["input"]).expanduser().absolute()
    if not root.is_dir():
        raise ConfigurationError(f"input directory does not exist: {root}")
    files = sorted(str(p) for p in root.glob("*.parquet"))
    if not files:
        raise ConfigurationError(f"no *.parquet file in {root}")
    return files


def _check(params: Mapping[str, Any]) -> None:
    if params["gap_seconds"] <= 0:
        raise ValueError(f"gap_seconds must be positive, got {params['gap_seconds']}")
    if params["delay_seconds"] < 0:
        raise ValueError(f"delay_seconds must not be negative, got {params['delay_seconds']}")


@pipeline(
    "clicks.sessionize",
    batches=list_click_files,
    params={
        "input": Param(str, help="directory of clicks-*.parquet files"),
        "gap_seconds": Param(int, 1800, "a longer pause starts a new session"),
        "delay_seconds": Param(float, 0.0, "sleep before each batch (demos and tests)"),
    },
    sort_by=("user_id", "session_start"),
    validate=_check,
)
def sessionize(spark: SparkSession, params: Mapping[str, Any], batch: Any) -> DataFrame:
    """Sessions of a click stream: one row per user session with its length and pages."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if params["delay_seconds"]:
        time.sleep(params["delay_seconds"])
    clicks = spark.read.parquet(str(batch))
    by_user = Window.partitionBy("user_id").orderBy("ts", "page", "action")
    marked = (
        clicks.withColumn("ms", F.unix_millis("ts"))
        .withColumn("prev_ms", F.lag("ms").over(by_user))
        .withColumn(
            "new_session",
            (
                F.col("prev_ms").isNull()
                | (F.col("ms") - F.col("prev_ms") > params["gap_seconds"] * 1000)
            ).cast("int"),
        )
        .withColumn(
            "session_no",
            F.sum("new_session").over(by_user.rowsBetween(Window.unboundedPreceding, 0)),
        )
    )
    order = F.struct("ms", "page", "action")
    sessions = marked.groupBy("user_id", "session_no").agg(
        F.min("ms").alias("start_ms"),
        F.max("ms").alias("end_ms"),
        F.count(F.lit(1)).alias("clicks"),
        F.countDistinct("page").alias("distinct_pages"),
        F.sum((F.col("action") == "purchase").cast("int")).alias("purchases"),
        F.min_by("page", order).alias("first_page"),
        F.max_by("page", order).alias("last_page"),
    )
    return sessions.select(
        "user_id",
        F.concat_ws("-", F.col("user_id").cast("string"), F.col("start_ms").cast("string")).alias(
            "session_id"
        ),
        F.timestamp_millis("start_ms").alias("session_start"),
        F.timestamp_millis("end_ms").alias("session_end"),
        (F.col("end_ms") - F.col("start_ms")).alias("duration_ms"),
        F.col("clicks").cast("int"),
        F.col("distinct_pages").cast("int"),
        F.col("purchases").cast("int"),
        "first_page",
        "last_page",
    )
