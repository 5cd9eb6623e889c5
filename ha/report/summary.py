"""What of the report reaches the driver: small pandas frames from the swept intervals.

``analyze`` (``analysis``) reads the journals and sweeps the intervals in Spark; this module
asks Spark for the per-election summary and the plots' data, each a query over the cached,
swept intervals (partitioned by election, so none shuffles), and shapes them in pandas.
"""

from __future__ import annotations

import functools
import math
import operator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

__all__ = (
    "INFERRED_ENDS",
    "closeups",
    "election_summary",
    "finish_summary",
    "timeline_and_epochs",
    "to_pandas",
)

# How an interval's end is known (``end_kind``, ``analysis``): only "left" is a record of
# the holder's own; the others are dated from other records.
INFERRED_ENDS = ("superseded", "assumed", "restarted")
TIMELINE_INTERVALS = 40
TIMELINE_ELECTIONS = 6
EPOCH_POINTS = 4_000
CLOSEUPS = 4


def to_pandas(frame: DataFrame) -> pd.DataFrame:
    result: pd.DataFrame = frame.toPandas()
    return result


def election_summary(per_election: pd.DataFrame, swept: DataFrame) -> pd.DataFrame:
    """One row per election, by name: per_election's counts, then the swept intervals'."""
    from pyspark.sql import functions as F

    per_interval = swept.groupBy("election").agg(
        F.count(F.lit(1)).alias("intervals"),
        F.sum((F.col("end_kind") == "open").cast("int")).alias("open_intervals"),
        F.sum(F.col("end_kind").isin(*INFERRED_ENDS).cast("int")).alias("unclosed"),
        F.sum((F.col("end_kind") == "superseded").cast("int")).alias("dated_ends"),
        F.sum((F.col("end_kind") == "assumed").cast("int")).alias("assumed_ends"),
        F.sum((F.col("kind") == "failover").cast("int")).alias("failovers"),
        F.count("gap").alias("known_gaps"),
        F.coalesce(F.sum(F.col("crash").cast("int")), F.lit(0)).alias("crashes"),
        # both quantiles from one summary of the gaps (two calls build two)
        F.percentile_approx("gap", [0.5, 0.9], 10_000).alias("gap_quantiles"),
        F.max("gap").alias("gap_max"),
        F.count("overlap").alias("overlaps"),
        F.coalesce(F.sum("overlap"), F.lit(0.0)).alias("overlap_s"),
        F.sum("covered").alias("covered_s"),
        F.min("epoch").alias("first_epoch"),
        F.max("epoch").alias("last_epoch"),
        F.sum((~F.col("epoch_ok")).cast("int")).alias("epoch_violations"),
        F.count("epoch").alias("epochs"),
    )
    counted = to_pandas(per_interval)
    at = counted.columns.get_loc("gap_quantiles")
    gaps = counted.pop("gap_quantiles")
    counted.insert(at, "gap_p90", gaps.map(lambda q: None if q is None else q[1]))
    counted.insert(at, "gap_p50", gaps.map(lambda q: None if q is None else q[0]))
    # Epochs that strictly increase in start order, none missing, are all distinct: only
    # the other elections are counted (another pass over the intervals). Not in the
    # aggregation above: with a DISTINCT there, Spark plans percentile_approx so badly that
    # 200k events took 60 s instead of 0.5 s.
    increasing = (counted["epoch_violations"] == 0) & (counted["epochs"] == counted["intervals"])
    counted["distinct_epochs"] = counted["epochs"].where(increasing)
    others = list(counted.loc[~increasing, "election"])
    if others:
        distinct = to_pandas(
            swept.where(F.col("election").isin(*others))
            .groupBy("election")
            .agg(F.countDistinct("epoch").alias("distinct_epochs"))
        )
        found = dict(zip(distinct["election"], distinct["distinct_epochs"], strict=True))
        counted["distinct_epochs"] = counted["distinct_epochs"].fillna(
            counted["election"].map(found)
        )
    return finish_summary(per_election, counted.drop(columns="epochs"))


def finish_summary(per_election: pd.DataFrame, counted: pd.DataFrame) -> pd.DataFrame:
    """The summary from the per-election counts of records and of intervals (either engine):
    span, availability, transitions per hour."""
    summary = per_election.merge(counted, on="election", how="left")
    span = summary["last_ts"] - summary["first_ts"]
    summary["span_s"] = span
    summary["availability"] = (summary["covered_s"].fillna(0.0) / span).where(span > 0)
    summary["transitions_per_hour"] = (summary["events"] / (span / 3600)).where(span > 0)
    return summary.sort_values("election", ignore_index=True)


def timeline_and_epochs(
    swept: DataFrame, summary: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The busiest elections' first intervals, and their epochs thinned to EPOCH_POINTS each,
    in one pass over their intervals in start order."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    busiest = summary.sort_values("events", ascending=False).head(TIMELINE_ELECTIONS)
    stride = F.lit(1)  # every interval's epoch when an election has few
    for name, count in zip(busiest["election"], busiest["intervals"].fillna(0), strict=True):
        stride = F.when(
            F.col("election") == name, max(1, math.ceil(count / EPOCH_POINTS))
        ).otherwise(stride)
    # Numbered in the sweep's order (``sweep(numbered=True)`` did it in its own pass).
    by_start = Window.partitionBy("election").orderBy("start", "end", "identity")
    number = F.col("n") if "n" in swept.columns else F.row_number().over(by_start)
    numbered = swept.where(F.col("election").isin(*busiest["election"])).select(
        "election", "identity", "start", "end", "epoch", "kind", "end_kind", number.alias("n"),
    )  # fmt: skip
    first = F.col("n") <= TIMELINE_INTERVALS
    sampled = (F.col("n") - 1) % stride == 0
    rows = to_pandas(
        numbered.where(first | sampled).select("*", first.alias("first"), sampled.alias("sampled"))
    ).sort_values(["election", "n"], ignore_index=True)
    timeline = rows[rows["first"]].drop(columns=["first", "sampled"]).reset_index(drop=True)
    epochs = rows.loc[rows["sampled"], ["election", "start", "epoch"]]
    return timeline, epochs.sort_values(["election", "start"], ignore_index=True)


def closeups(swept: DataFrame, overlaps: pd.DataFrame) -> pd.DataFrame:
    """The intervals around each of the first overlaps, so a plot can show them up close."""
    import pandas as pd
    from pyspark.sql import functions as F

    windows = []
    for row in overlaps.head(CLOSEUPS).to_dict("records"):
        pad = max(10 * float(row["overlap"]), 5.0)
        windows.append((row, float(row["start"]) - pad, float(row["end"]) + pad))
    if not windows:
        return pd.DataFrame()

    def near(election: str, lo: float, hi: float) -> Any:
        return (F.col("election") == election) & (F.col("start") < hi) & (F.col("end") > lo)

    # One pass over the intervals for every close-up; each takes its own rows from it.
    wanted = functools.reduce(
        operator.or_, (near(row["election"], lo, hi) for row, lo, hi in windows)
    )
    rows: pd.DataFrame = (
        swept.where(wanted)
        .select("election", "identity", "start", "end", "epoch", "kind")
        .toPandas()
    )
    frames = []
    for n, (row, lo, hi) in enumerate(windows):
        mine = (rows["election"] == row["election"]) & (rows["start"] < hi) & (rows["end"] > lo)
        frame = rows[mine].reset_index(drop=True)
        frame["closeup"] = n
        frame["lo"], frame["hi"] = lo, hi
        frame["ov_start"], frame["ov_end"] = float(row["start"]), float(row["end"])
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)
