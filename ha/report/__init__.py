"""The election journal report: leadership intervals, failover gaps, overlaps, availability.

Definitions (per election):

- A **leadership interval** of an identity runs from its transition to ``active`` until its
  next record, which normally leaves ``active`` (``end_kind`` "left"). A process killed while
  active writes nothing more, so an interval can stay unclosed; it is then closed by the first
  of: the identity's next record, from a restarted process ("restarted"); the start of the
  next interval with a higher epoch, which proves the old one deposed ("superseded"); the
  election's last record ("open": still active when the journal ends).
- Intervals are swept in start order, keeping the latest end seen so far. An interval that
  starts before that end **overlaps** the interval holding it (two actives at once: a safety
  violation, which must never appear). One that starts at or after it is a **failover**; its
  **gap** is the time with no active in between, known only when the previous holder recorded
  its leaving (after a crash, the moment it stopped is not in the journal).
- **Availability** is the share of the election's observed span (first to last record)
  covered by at least one interval (an upper bound when intervals were closed by supersession);
  **transitions per hour** counts every record over that span.
- **Epochs** must strictly increase from one interval to the next; a violation is counted.

All of it runs in Spark (windows partitioned by election), so journals of tens of millions of
records are fine; only small results (per-election rows, samples for the plots) reach the
driver.
"""

from __future__ import annotations

import base64
import glob
import html
import io
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ..pipeline.registry import Param, pipeline
from .synthetic import STATES

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession
    from rich.table import Table

__all__ = (
    "JournalReport",
    "analyze",
    "leadership_intervals",
    "read_journals",
    "render_html",
    "run_report",
    "summary_table",
    "sweep",
)

MAX_OVERLAP_ROWS = 1_000
GAP_SAMPLE = 200_000
TIMELINE_INTERVALS = 40
TIMELINE_ELECTIONS = 6
EPOCH_POINTS = 4_000
CLOSEUPS = 4
TERMINAL_SKIP = ("span", "intervals", "unclosed")  # in the HTML only: keep the table narrow


def journal_schema() -> Any:
    from pyspark.sql.types import (
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    return StructType(
        [
            StructField("ts", DoubleType()),
            StructField("election", StringType()),
            StructField("identity", StringType()),
            StructField("from", StringType()),
            StructField("to", StringType()),
            StructField("epoch", LongType()),
            StructField("cause", StringType()),
        ]
    )


def read_journals(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """The records of the JSON-lines journals at ``paths``, with a boolean ``valid`` column.

    Paths are anything Spark reads (local files, directories, globs, hdfs://, s3a://...).
    A record is not valid if it is not JSON, lacks a field, or names an unknown state.
    """
    from pyspark.sql import functions as F

    raw = spark.read.schema(journal_schema()).option("mode", "PERMISSIVE").json(_expand(paths))
    ok = (
        F.col("ts").isNotNull()
        & F.col("election").isNotNull()
        & F.col("identity").isNotNull()
        & F.col("from").isin(*STATES)
        & F.col("to").isin(*STATES)
    )
    return raw.withColumn("valid", F.coalesce(ok, F.lit(False)))


def _expand(paths: Sequence[str]) -> list[str]:
    """Local globs expanded here (a clear error when nothing matches, and no Spark warning);
    URIs with a scheme go to Spark as they are."""
    found: list[str] = []
    for path in paths:
        if "://" in path or not any(c in path for c in "*?["):
            found.append(path)
            continue
        matches = sorted(glob.glob(os.path.expanduser(path)))
        if not matches:
            raise ConfigurationError(f"no journal matches {path!r}")
        found.extend(matches)
    return found


def leadership_intervals(events: DataFrame) -> DataFrame:
    """One row per leadership interval: election, identity, start, end, epoch, end_kind."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    span = events.groupBy("election").agg(F.max("ts").alias("election_end"))
    # At equal times a departure sorts first: it closes the interval it belongs to.
    departs = (F.col("from") == "active").cast("int")
    by_holder = Window.partitionBy("election", "identity").orderBy("ts", F.desc("departs"))
    entries = (
        events.withColumn("departs", departs)
        .select(
            "*",
            F.lead("ts").over(by_holder).alias("next_ts"),
            F.lead("from").over(by_holder).alias("next_from"),
            F.lead("cause").over(by_holder).alias("next_cause"),
        )
        .where(F.col("to") == "active")
    )
    by_start = Window.partitionBy("election").orderBy("ts", "identity")
    entries = entries.select(
        "*",
        F.lead("ts").over(by_start).alias("succ_ts"),
        F.lead("epoch").over(by_start).alias("succ_epoch"),
    ).join(span, "election")
    left = F.col("next_from") == "active"
    higher = (
        F.col("succ_epoch").isNull()
        | F.col("epoch").isNull()
        | (F.col("succ_epoch") > F.col("epoch"))
    )
    superseded_at = F.when(higher, F.col("succ_ts"))
    # least() skips nulls: the earliest of the candidates that exist.
    end = F.when(left, F.col("next_ts")).otherwise(
        F.least("next_ts", superseded_at, "election_end")
    )
    kind = (
        F.when(left, "left")
        .when(
            F.col("next_ts").isNotNull()
            & (superseded_at.isNull() | (F.col("next_ts") <= superseded_at)),
            "restarted",
        )
        .when(superseded_at.isNotNull(), "superseded")
        .otherwise("open")
    )
    return entries.select(
        "election",
        "identity",
        F.col("ts").alias("start"),
        end.alias("end"),
        "epoch",
        kind.alias("end_kind"),
        F.when(left, F.col("next_cause")).alias("end_cause"),
    )


def sweep(intervals: DataFrame) -> DataFrame:
    """Intervals in start order with what came before: the latest earlier end and its holder.

    Adds ``prev_end``, ``prev_identity``, ``prev_epoch`` (of the interval with that end),
    ``kind`` (``first``, ``failover`` or ``overlap``), ``gap`` (failovers whose previous
    holder recorded its leaving), ``overlap``
    (seconds shared with ``prev_identity``), ``covered`` (seconds added to the union) and
    ``epoch_ok`` (strictly above the previous interval's epoch, in start order).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = Window.partitionBy("election").orderBy("start", "end", "identity")
    before = order.rowsBetween(Window.unboundedPreceding, -1)
    holder = F.struct("end", "identity", "epoch", "end_kind")
    s = intervals.select(
        "*",
        F.max(holder).over(before).alias("prev"),
        F.lag("epoch").over(order).alias("lag_epoch"),
    ).select(
        "*",
        F.col("prev.end").alias("prev_end"),
        F.col("prev.identity").alias("prev_identity"),
        F.col("prev.epoch").alias("prev_epoch"),
        F.col("prev.end_kind").alias("prev_end_kind"),
    )
    first = F.col("prev_end").isNull()
    overlapping = F.col("start") < F.col("prev_end")
    return s.drop("prev").select(
        "*",
        F.when(first, "first").when(overlapping, "overlap").otherwise("failover").alias("kind"),
        F.when(
            ~first & ~overlapping & (F.col("prev_end_kind") == "left"),
            F.col("start") - F.col("prev_end"),
        ).alias("gap"),
        F.when(overlapping, F.least("end", "prev_end") - F.col("start")).alias("overlap"),
        F.greatest(
            F.lit(0.0), F.col("end") - F.greatest("start", F.coalesce("prev_end", "start"))
        ).alias("covered"),
        (F.col("lag_epoch").isNull() | (F.col("epoch") > F.col("lag_epoch"))).alias("epoch_ok"),
    )


@dataclass(slots=True)
class JournalReport:
    """The report's results, small enough for the driver (pandas frames)."""

    summary: pd.DataFrame  # one row per election
    overlaps: pd.DataFrame  # first MAX_OVERLAP_ROWS overlaps, by election and start
    overlap_count: int
    gaps: pd.DataFrame  # election, gap: a sample of at most GAP_SAMPLE failovers
    hourly: pd.DataFrame  # election, hour (unix s), transitions
    timeline: pd.DataFrame  # the first intervals of the busiest elections
    closeups: pd.DataFrame  # intervals around the first overlaps, column ``closeup``: its number
    epochs: pd.DataFrame  # election, start, epoch: thinned to EPOCH_POINTS per election
    events: int
    malformed: int
    seconds: float  # time spent in Spark

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


def analyze(spark: SparkSession, paths: Sequence[str]) -> JournalReport:
    """Run the report's Spark job over the journals at ``paths``."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    started = time.perf_counter()
    records = read_journals(spark, paths).persist(StorageLevel.MEMORY_AND_DISK)
    events = records.where("valid").drop("valid")
    swept = sweep(leadership_intervals(events)).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        per_election = events.groupBy("election").agg(
            F.count(F.lit(1)).alias("events"),
            F.countDistinct("identity").alias("identities"),
            F.min("ts").alias("first_ts"),
            F.max("ts").alias("last_ts"),
        )
        per_interval = swept.groupBy("election").agg(
            F.count(F.lit(1)).alias("intervals"),
            F.sum((F.col("end_kind") == "open").cast("int")).alias("open_intervals"),
            F.sum(F.col("end_kind").isin("restarted", "superseded").cast("int")).alias("unclosed"),
            F.sum((F.col("kind") == "failover").cast("int")).alias("failovers"),
            F.count("gap").alias("known_gaps"),
            F.percentile_approx("gap", 0.5, 10_000).alias("gap_p50"),
            F.percentile_approx("gap", 0.9, 10_000).alias("gap_p90"),
            F.max("gap").alias("gap_max"),
            F.count("overlap").alias("overlaps"),
            F.coalesce(F.sum("overlap"), F.lit(0.0)).alias("overlap_s"),
            F.sum("covered").alias("covered_s"),
            F.min("epoch").alias("first_epoch"),
            F.max("epoch").alias("last_epoch"),
            F.sum((~F.col("epoch_ok")).cast("int")).alias("epoch_violations"),
        )
        # Not in the aggregation above: with a DISTINCT there, Spark plans percentile_approx so
        # badly that 200k events took 60 s instead of 0.5 s.
        distinct_epochs = swept.groupBy("election").agg(
            F.countDistinct("epoch").alias("distinct_epochs")
        )
        span = F.col("last_ts") - F.col("first_ts")
        summary: pd.DataFrame = (
            per_election.join(per_interval, "election", "left")
            .join(distinct_epochs, "election", "left")
            .select(
                "*",
                span.alias("span_s"),
                F.when(span > 0, F.coalesce("covered_s", F.lit(0.0)) / span).alias("availability"),
                F.when(span > 0, F.col("events") / (span / 3600)).alias("transitions_per_hour"),
            )
            .orderBy("election")
            .toPandas()
        )
        overlap_rows = swept.where(F.col("kind") == "overlap").select(
            "election",
            F.col("prev_identity").alias("first"),
            F.col("identity").alias("second"),
            F.col("prev_epoch").alias("first_epoch"),
            F.col("epoch").alias("second_epoch"),
            F.col("start"),
            (F.col("start") + F.col("overlap")).alias("end"),
            "overlap",
        )
        overlaps: pd.DataFrame = (
            overlap_rows.orderBy("election", "start").limit(MAX_OVERLAP_ROWS).toPandas()
        )
        overlap_count = int(summary["overlaps"].fillna(0).sum())
        failovers = swept.where(F.col("gap").isNotNull())  # failovers with a known gap
        total_failovers = int(summary["known_gaps"].fillna(0).sum())
        if total_failovers > GAP_SAMPLE:
            failovers = failovers.sample(fraction=GAP_SAMPLE / total_failovers, seed=1)
        gaps: pd.DataFrame = failovers.select("election", "gap").toPandas()
        hourly: pd.DataFrame = (
            events.groupBy("election", (F.floor(F.col("ts") / 3600) * 3600).alias("hour"))
            .agg(F.count(F.lit(1)).alias("transitions"))
            .orderBy("election", "hour")
            .toPandas()
        )
        busiest = list(summary.sort_values("events", ascending=False)["election"])
        busiest = busiest[:TIMELINE_ELECTIONS]
        by_start = Window.partitionBy("election").orderBy("start", "identity")
        numbered = swept.where(F.col("election").isin(*busiest)).select(
            "election", "identity", "start", "end", "epoch", "kind", "end_kind",
            F.row_number().over(by_start).alias("n"),
            F.count(F.lit(1)).over(Window.partitionBy("election")).alias("of"),
        )  # fmt: skip
        timeline: pd.DataFrame = (
            numbered.where(F.col("n") <= TIMELINE_INTERVALS).drop("of").toPandas()
        )
        stride = F.greatest(F.lit(1), F.ceil(F.col("of") / EPOCH_POINTS))
        epochs: pd.DataFrame = (
            numbered.where((F.col("n") - 1) % stride == 0)
            .select("election", "start", "epoch")
            .orderBy("election", "start")
            .toPandas()
        )
        closeups = _closeups(swept, overlaps)
        total = int(summary["events"].sum())
        bad = records.where(~F.col("valid")).count()
    finally:
        swept.unpersist()
        records.unpersist()
    return JournalReport(
        summary=summary,
        overlaps=overlaps,
        overlap_count=overlap_count,
        gaps=gaps,
        hourly=hourly,
        timeline=timeline,
        closeups=closeups,
        epochs=epochs,
        events=total,
        malformed=bad,
        seconds=time.perf_counter() - started,
    )


def _closeups(swept: DataFrame, overlaps: pd.DataFrame) -> pd.DataFrame:
    """The intervals around each of the first overlaps, so a plot can show them up close."""
    import pandas as pd
    from pyspark.sql import functions as F

    frames = []
    for n, row in enumerate(overlaps.head(CLOSEUPS).to_dict("records")):
        pad = max(10 * float(row["overlap"]), 5.0)
        lo, hi = float(row["start"]) - pad, float(row["end"]) + pad
        near = swept.where(
            (F.col("election") == row["election"]) & (F.col("start") < hi) & (F.col("end") > lo)
        )
        frame: pd.DataFrame = near.select(
            "election", "identity", "start", "end", "epoch", "kind"
        ).toPandas()
        frame["closeup"] = n
        frame["lo"], frame["hi"] = lo, hi
        frame["ov_start"], frame["ov_end"] = float(row["start"]), float(row["end"])
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _journal_batches(params: Any) -> list[str]:
    # One batch: an election's intervals need all of its records, from every file.
    journals = [p.strip() for p in params["journals"].split(",") if p.strip()]
    if not journals:
        raise ValueError("journals: give at least one path, directory or glob")
    return [",".join(journals)]


@pipeline(
    "journal.intervals",
    batches=_journal_batches,
    params={"journals": Param(str, help="comma-separated journal paths, directories or globs")},
    sort_by=("election", "start", "identity"),
)
def journal_intervals(spark: SparkSession, params: Any, batch: Any) -> DataFrame:
    """Leadership intervals of election journals, swept: failovers, gaps and overlaps."""
    events = read_journals(spark, str(batch).split(",")).where("valid").drop("valid")
    return sweep(leadership_intervals(events))


# --- presentation ---------------------------------------------------------------------------


def _fmt_s(value: Any) -> str:
    if value is None or value != value:  # None or NaN
        return "-"
    v = float(value)
    if v < 1:
        return f"{v * 1000:.1f} ms"
    if v < 120:
        return f"{v:.2f} s"
    if v < 7200:
        return f"{v / 60:.1f} min"
    return f"{v / 3600:.1f} h"


def _fmt_int(value: Any) -> str:
    if value is None or value != value:
        return "-"
    return f"{int(value):,}"


def _summary_rows(report: JournalReport) -> list[dict[str, str]]:
    rows = []
    for r in report.summary.to_dict("records"):
        avail = r.get("availability")
        rows.append(
            {
                "election": str(r["election"]),
                "events": _fmt_int(r["events"]),
                "span": _fmt_s(r["span_s"]),
                "intervals": _fmt_int(r["intervals"]),
                "failovers": _fmt_int(r["failovers"]),
                "unclosed": _fmt_int(r["unclosed"]),
                "gap p50": _fmt_s(r["gap_p50"]),
                "gap p90": _fmt_s(r["gap_p90"]),
                "gap max": _fmt_s(r["gap_max"]),
                "overlaps": _fmt_int(r["overlaps"]),
                "availability": "-" if avail != avail or avail is None else f"{avail:.4%}",
                "transitions/h": "-"
                if r["transitions_per_hour"] != r["transitions_per_hour"]
                else f"{r['transitions_per_hour']:.1f}",
                "epochs": f"{_fmt_int(r['first_epoch'])}..{_fmt_int(r['last_epoch'])}",
                "epoch errors": _fmt_int(r["epoch_violations"]),
            }
        )
    return rows


def summary_table(report: JournalReport) -> Table:
    """The per-election summary as a rich table (print it with ``rich.print``)."""
    from rich.table import Table

    bad = report.overlap_count > 0
    table = Table(
        title=f"Election journal: {report.events:,} events, {report.malformed:,} malformed, "
        f"{report.overlap_count:,} overlaps",
        title_style="bold red" if bad else "bold",
    )
    rows = [{k: v for k, v in r.items() if k not in TERMINAL_SKIP} for r in _summary_rows(report)]
    columns = list(rows[0]) if rows else ["election"]
    for name in columns:
        table.add_column(name, justify="left" if name == "election" else "right")
    for row in rows:
        style = "red" if row.get("overlaps") not in ("0", "-") else None
        table.add_row(*row.values(), style=style)
    return table


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _plots(report: JournalReport) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")  # no display; also safe in worker threads
    import matplotlib.pyplot as plt
    import numpy as np

    out: list[tuple[str, str]] = []

    tl = report.timeline
    if len(tl):
        elections = list(dict.fromkeys(tl["election"]))
        fig, axes = plt.subplots(
            len(elections), 1, figsize=(10, 1.2 + 1.1 * len(elections)), squeeze=False
        )
        for ax, name in zip(axes[:, 0], elections, strict=True):
            rows = tl[tl["election"] == name]
            idents = sorted(rows["identity"].unique())
            t0 = rows["start"].min()
            for y, ident in enumerate(idents):
                mine = rows[rows["identity"] == ident]
                bars = list(zip(mine["start"] - t0, mine["end"] - mine["start"], strict=True))
                colors = ["#d62728" if k == "overlap" else "#1f77b4" for k in mine["kind"]]
                ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=colors)
            ax.set_yticks(range(len(idents)), idents)
            ax.set_title(f"{name}: first {len(rows)} leadership intervals", fontsize=9)
            ax.set_xlabel("seconds since first interval", fontsize=8)
        fig.tight_layout()
        out.append(("Who was active (red: overlapping leadership)", _png(fig)))

    gaps = report.gaps
    if len(gaps):
        fig, ax = plt.subplots(figsize=(10, 3.5))
        positive = gaps["gap"].clip(lower=1e-6)
        bins = np.logspace(np.log10(positive.min()), np.log10(positive.max()) + 1e-9, 60).tolist()
        for name, group in gaps.groupby("election"):
            ax.hist(group["gap"].clip(lower=1e-6), bins=bins, histtype="step", label=str(name))
        ax.set_xscale("log")
        ax.set_xlabel("failover gap (s, no active to new active)")
        ax.set_ylabel("failovers")
        if gaps["election"].nunique() <= 12:
            ax.legend(fontsize=7)
        out.append(("Failover gaps", _png(fig)))

    hourly = report.hourly
    if len(hourly):
        # Hundreds of bins at most: one line per hour over months is only noise.
        t0 = hourly["hour"].min()
        width = max(3600.0, float(hourly["hour"].max() - t0 + 3600) / 200)
        binned = hourly.assign(bin=((hourly["hour"] - t0) // width) * width)
        rates = binned.groupby(["election", "bin"])["transitions"].sum() / (width / 3600)
        fig, ax = plt.subplots(figsize=(10, 3.5))
        for name, series in rates.groupby(level="election"):
            x = series.index.get_level_values("bin") / 3600
            ax.plot(x, series.to_numpy(), lw=0.9, label=str(name))
        ax.set_xlabel("hours since the first record")
        ax.set_ylabel("transitions per hour")
        ax.set_ylim(bottom=0)
        if hourly["election"].nunique() <= 12:
            ax.legend(fontsize=7)
        out.append(("Transitions per hour, per election", _png(fig)))

    close = report.closeups
    if len(close):
        shots = list(dict.fromkeys(close["closeup"]))
        fig, axes = plt.subplots(len(shots), 1, figsize=(10, 0.6 + 1.3 * len(shots)), squeeze=False)
        for ax, shot in zip(axes[:, 0], shots, strict=True):
            rows = close[close["closeup"] == shot]
            lo, hi = float(rows["lo"].iloc[0]), float(rows["hi"].iloc[0])
            idents = sorted(rows["identity"].unique())
            for y, ident in enumerate(idents):
                mine = rows[rows["identity"] == ident]
                starts = mine["start"].clip(lower=lo) - lo
                ends = mine["end"].clip(upper=hi) - lo
                bars = list(zip(starts, ends - starts, strict=True))
                colors = ["#d62728" if k == "overlap" else "#1f77b4" for k in mine["kind"]]
                ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=colors)
            first = rows.iloc[0]
            ax.axvspan(first["ov_start"] - lo, first["ov_end"] - lo, color="#d62728", alpha=0.15)
            ax.set_xlim(0, hi - lo)
            ax.set_yticks(range(len(idents)), idents)
            ax.set_title(f"{rows['election'].iloc[0]} from unix {lo:.3f}", fontsize=9)
        axes[-1, 0].set_xlabel("seconds")
        fig.tight_layout()
        out.append(("Overlapping leadership up close (red: the later interval)", _png(fig)))

    ep = report.epochs
    if len(ep):
        fig, ax = plt.subplots(figsize=(10, 3.5))
        for _name, group in ep.groupby("election"):
            ax.step((group["start"] - ep["start"].min()) / 3600, group["epoch"], where="post")
        ax.set_xlabel("hours since the first interval")
        ax.set_ylabel("epoch")
        out.append(("Epochs of successive leaders", _png(fig)))
    return out


def _html_table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return "<p>none</p>"
    head = "".join(f"<th>{html.escape(k)}</th>" for k in rows[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row.values()) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(report: JournalReport, title: str = "Election journal report") -> str:
    """A self-contained HTML page (plots embedded as base64 PNG)."""
    overlap_rows = [
        {
            "election": str(r["election"]),
            "first": str(r["first"]),
            "second": str(r["second"]),
            "epochs": f"{_fmt_int(r['first_epoch'])} / {_fmt_int(r['second_epoch'])}",
            "from (unix s)": f"{r['start']:.6f}",
            "to (unix s)": f"{r['end']:.6f}",
            "overlap": _fmt_s(r["overlap"]),
        }
        for r in report.overlaps.to_dict("records")
    ]
    if report.overlap_count:
        verdict = (
            f'<p class="bad">{report.overlap_count:,} overlapping leadership interval(s): '
            "two identities were active at the same time.</p>"
        )
    else:
        verdict = '<p class="good">No overlapping leadership.</p>'
    shown = (
        f" (first {len(overlap_rows):,} shown)" if report.overlap_count > len(overlap_rows) else ""
    )
    figures = "".join(
        f'<h2>{html.escape(caption)}</h2><img alt="{html.escape(caption)}" '
        f'src="data:image/png;base64,{data}">'
        for caption, data in _plots(report)
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; font-size: 0.85em; margin: 1em 0; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
th {{ background: #f3f3f3; }} td:first-child {{ text-align: left; }}
.bad {{ color: #b00; font-weight: bold; }} .good {{ color: #070; }}
img {{ max-width: 100%; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>{report.events:,} transitions, {report.malformed:,} malformed records,
analyzed in {report.seconds:.1f} s ({report.events_per_second:,.0f} events/s).</p>
{verdict}
<h2>Per election</h2>
{_html_table(_summary_rows(report))}
<h2>Overlapping leadership{shown}</h2>
{_html_table(overlap_rows)}
{figures}
</body></html>
"""


def run_report(
    paths: Sequence[str],
    out: Path | str | None = None,
    *,
    spark: SparkSession | None = None,
    master: str = "local[2]",
    driver_memory: str = "2g",
    console: Any = None,
) -> JournalReport:
    """What ``ha report JOURNALS... --out report.html`` does: analyze, write HTML, print table.

    Builds a SparkSession on ``master`` unless one is given (``driver_memory`` applies only
    when this process has no Spark JVM yet). ``console`` is a rich Console
    (default: stdout); pass ``False`` to print nothing.
    """
    from ..pipeline.spark import SparkSettings, build_session

    if not paths:
        raise ConfigurationError("no journal given")
    if spark is None:
        # Full JIT: C1-only code parses JSON about half as fast, which matters more here
        # than the second it saves at start-up.
        settings = SparkSettings(
            master=master,
            app_name="ha-report",
            fast_start=False,
            conf={"spark.driver.memory": driver_memory},
        )
        spark = build_session(settings)
    report = analyze(spark, paths)
    if out is not None:
        Path(out).write_text(render_html(report))
    if console is not False:
        from rich.console import Console

        (console or Console()).print(summary_table(report))
    return report
