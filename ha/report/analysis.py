"""The report's analysis, in Spark: leadership intervals, failover gaps, overlaps, availability.

Definitions (per election):

- A **leadership interval** of an identity runs from its transition to ``active`` until its
  next record, which normally leaves ``active`` (``end_kind`` "left"); a record leaving
  ``active`` after the term's local deadline had passed (a frozen process, thawed) gives that
  deadline (``until``): the term's work had stopped then.
- A process killed while active (kill -9, a power cut) writes nothing more: when it stopped
  acting is not in the journal. What is: its last record (its ``active`` one), the ``active``
  record of the next leader, and, when the same identity is started again, the first record of
  the new process. The next leader got the lock only once the backend had given up the old
  session, and a killed process stops acting when it stops talking to the backend. The next
  leader records when it found the lock free (``vacant_since``, on its ``active`` record) and
  how long the backend takes, at most, to end a dead process's session (``detection``: the
  session timeout, or less where the backend sees a process die): a killed active's interval
  ends at ``max(its start, vacant_since - detection)`` ("superseded", dated by the journal).
  A journal without those fields (older electors) gives only the next leader's start: the end
  is then ``max(its start, next start - session_timeout)`` ("assumed"; the timeout the killed
  active recorded, else the ``session_timeout`` argument, ``ha report --session-timeout``).
  Either way the end is an estimate, not a record, and the report says so. A killed active's
  interval ends at the first record of its restarted process if that comes sooner
  ("restarted"); an interval with no later evidence is still active when the journal ends
  ("open").
- Intervals are swept in start order, keeping the latest end seen so far. An interval that
  starts before that end **overlaps** the interval holding it (two actives at once: a safety
  violation, which must never appear). One that starts at or after it is a **failover**, a
  **crash** when the previous holder did not record its leaving; its **gap** is the time with
  no active in between.
- **Availability** is the share of the election's observed span (first to last record)
  covered by at least one interval; **transitions per hour** counts every record over that
  span.
- **Epochs** must strictly increase from one interval to the next; a violation is counted.

All of it runs in Spark (windows partitioned by election), so journals of tens of millions of
records are fine; only small results (per-election rows, samples for the plots) reach the
driver.
"""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..election.machine import State
from ..errors import ConfigurationError
from .summary import INFERRED_ENDS, election_summary, timeline_and_epochs, to_pandas
from .summary import closeups as closeups_of

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

__all__ = (
    "COLUMNS",
    "DEFAULT_SESSION_TIMEOUT",
    "INFERRED_ENDS",
    "STAGES",
    "STATES",
    "JournalReport",
    "analyze",
    "journal_schema",
    "leadership_intervals",
    "read_journals",
    "sweep",
)

# The states a record may name: the elector's public states.
STATES = tuple(state.value for state in State)
# The journal's fields, as ``ha.election.journal.Transition.to_json`` writes them, with the
# Spark type each is read as.
COLUMNS = {
    "ts": "double",
    "election": "string",
    "identity": "string",
    "from": "string",
    "to": "string",
    "epoch": "long",
    "cause": "string",
    "session_timeout": "double",
    "detection": "double",
    "vacant_since": "double",
    "until": "double",
}

# What analyze does, in order, as on_stage hears it.
STAGES = (
    "reading the journals",
    "leadership intervals and summary",
    "overlaps and failover gaps",
    "data for the plots",
)
# ha's default for ZooKeeper, etcd and Kubernetes sessions: what a crash costs there.
DEFAULT_SESSION_TIMEOUT = 10.0
MAX_OVERLAP_ROWS = 1_000
GAP_SAMPLE = 200_000


def journal_schema() -> Any:
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    types = {"double": DoubleType, "long": LongType, "string": StringType}
    return StructType([StructField(name, types[kind]()) for name, kind in COLUMNS.items()])


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


def flag_states(events: DataFrame) -> DataFrame:
    """The columns the intervals need, the states as two flags: ``departs`` (1 when the record
    leaves ``active``) and ``enters`` (it enters ``active``). Narrower rows than two strings
    for the shuffles and sorts; ``cause`` and ``valid`` are kept when present. Of the
    timing fields, ``session_timeout`` and ``prior_end`` (``vacant_since - detection``: when
    the active this record's writer took over from stopped, at the latest)."""
    from pyspark.sql import functions as F

    def column(name: str) -> Any:
        return F.col(name) if name in events.columns else F.lit(None).cast("double")

    return events.select(
        "election", "identity", "ts", "epoch",
        (F.col("from") == "active").cast("int").alias("departs"),
        (F.col("to") == "active").alias("enters"),
        column("session_timeout").alias("session_timeout"),
        column("until").alias("until"),
        (column("vacant_since") - column("detection")).alias("prior_end"),
        *[name for name in ("cause", "valid") if name in events.columns],
    )  # fmt: skip


def holder_order() -> list[Any]:
    """Each holder's records in order: election, identity, ts, and at equal times a departure
    first (it closes the interval it belongs to)."""
    from pyspark.sql import functions as F

    return [F.col("election"), F.col("identity"), F.col("ts"), F.desc("departs")]


def leadership_intervals(
    events: DataFrame,
    session_timeout: float = DEFAULT_SESSION_TIMEOUT,
    *,
    span: DataFrame | None = None,
) -> DataFrame:
    """One row per leadership interval: election, identity, start, end, epoch, end_kind.

    ``events`` are records (``from``/``to``) or already ``flag_states``'d. ``session_timeout``
    (seconds) dates the end of an active that recorded no leaving (see the module's
    docstring). ``span``, when the caller knows it: election, election_end (its last record).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if session_timeout < 0:
        raise ConfigurationError(f"session_timeout must be >= 0 seconds, got {session_timeout}")
    flagged = events if "enters" in events.columns else flag_states(events)
    if span is None:
        span = flagged.groupBy("election").agg(F.max("ts").alias("election_end"))
    order = holder_order()
    by_holder = Window.partitionBy(*order[:2]).orderBy(*order[2:])
    entries = flagged.select("*", *_next_record(flagged, by_holder)).where("enters")
    return _intervals(entries, span, session_timeout)


def _next_record(flagged: DataFrame, by_holder: Any) -> list[Any]:
    """The holder's next record, as columns: its ``next_ts``, ``next_departs``, ``next_until``,
    ``next_cause``."""
    from pyspark.sql import functions as F

    return [
        F.lead("ts").over(by_holder).alias("next_ts"),
        F.lead("departs").over(by_holder).alias("next_departs"),
        F.lead("until").over(by_holder).alias("next_until"),
        # the cause only when given: the report drops it, as it shows none
        (F.lead("cause").over(by_holder) if "cause" in flagged.columns else F.lit(None))
        .cast("string")
        .alias("next_cause"),
    ]


def _intervals(entries: DataFrame, span: DataFrame, session_timeout: float) -> DataFrame:
    """``leadership_intervals`` from the records entering ``active`` with their holder's
    next record (``_next_record``)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_start = Window.partitionBy("election").orderBy("ts", "identity")
    entries = entries.select(
        "*",
        F.lead("ts").over(by_start).alias("succ_ts"),
        F.lead("epoch").over(by_start).alias("succ_epoch"),
        F.lead("prior_end").over(by_start).alias("succ_prior_end"),
    ).join(F.broadcast(span), "election")  # a row per election
    left = F.col("next_departs") == 1
    higher = (
        F.col("succ_epoch").isNull()
        | F.col("epoch").isNull()
        | (F.col("succ_epoch") > F.col("epoch"))
    )
    # The successor recorded when it found the lock free and the backend's detection bound;
    # without them, it got the lock a session timeout after the old active's last contact.
    # (greatest() skips nulls: without a successor there is nothing to date by.)
    timeout = F.coalesce(F.col("session_timeout"), F.lit(float(session_timeout)))
    superseded_at = F.when(
        higher & F.col("succ_ts").isNotNull(),
        F.greatest(F.col("ts"), F.coalesce(F.col("succ_prior_end"), F.col("succ_ts") - timeout)),
    )
    # least() skips nulls: the earliest of the candidates that exist.
    end = F.when(left, F.least("next_ts", "next_until")).otherwise(
        F.least("next_ts", superseded_at, "election_end")
    )
    kind = (
        F.when(left, "left")
        .when(
            F.col("next_ts").isNotNull()
            & (superseded_at.isNull() | (F.col("next_ts") <= superseded_at)),
            "restarted",
        )
        .when(superseded_at.isNotNull() & F.col("succ_prior_end").isNotNull(), "superseded")
        .when(superseded_at.isNotNull(), "assumed")
        .otherwise("open")
    )
    return entries.select(
        "election",
        "identity",
        F.col("ts").alias("start"),
        end.alias("end"),
        "epoch",
        kind.alias("end_kind"),
        # (analyze's entries come without causes: the report shows none)
        F.when(left, F.col("next_cause") if "next_cause" in entries.columns else F.lit(None))
        .cast("string")
        .alias("end_cause"),
    )


def sweep(intervals: DataFrame, *, numbered: bool = False) -> DataFrame:
    """Intervals in start order with what came before: the latest earlier end and its holder.

    Adds ``prev_end``, ``prev_identity``, ``prev_epoch`` (of the interval with that end),
    ``kind`` (``first``, ``failover`` or ``overlap``), ``gap`` (failovers), ``crash``
    (failovers whose previous holder recorded no leaving), ``overlap``
    (seconds shared with ``prev_identity``), ``covered`` (seconds added to the union) and
    ``epoch_ok`` (strictly above the previous interval's epoch, in start order); when
    ``numbered``, ``n``: the interval's number in its election, in start order (from 1).
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
        # in the same pass over the same order
        *([F.row_number().over(order).alias("n")] if numbered else []),
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
        F.when(~first & ~overlapping, F.col("start") - F.col("prev_end")).alias("gap"),
        F.when(~first & ~overlapping, F.col("prev_end_kind") != "left").alias("crash"),
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
    # election, gap, after (the previous holder's end_kind): at most GAP_SAMPLE failovers
    gaps: pd.DataFrame
    rates: pd.DataFrame  # election, bucket (unix s), transitions: records per bucket
    rate_bucket_s: float  # the buckets' width: 60 s, or 3600 s for journals of 6 h or more
    timeline: pd.DataFrame  # the first intervals of the busiest elections
    closeups: pd.DataFrame  # intervals around the first overlaps, column ``closeup``: its number
    epochs: pd.DataFrame  # election, start, epoch: thinned to EPOCH_POINTS per election
    events: int
    malformed: int
    seconds: float  # time spent in Spark
    session_timeout: float = DEFAULT_SESSION_TIMEOUT  # dated ends the journal did not date
    engine: str = "spark"  # or "local" (``ha.report.local``)

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


def analyze(
    spark: SparkSession,
    paths: Sequence[str],
    *,
    session_timeout: float = DEFAULT_SESSION_TIMEOUT,
    on_stage: Callable[[str], None] | None = None,
) -> JournalReport:
    """Run the report's Spark job over the journals at ``paths``; ``session_timeout`` dates
    the end of a killed active (see the module's docstring). ``on_stage(name)`` is called as
    each of ``STAGES`` starts (``progress`` shows them)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    if session_timeout < 0:
        raise ConfigurationError(f"session_timeout must be >= 0 seconds, got {session_timeout}")
    stage = on_stage or (lambda name: None)
    started = time.perf_counter()
    stage(STAGES[0])
    # The JSON is parsed once, in one pass that also counts: partitioned by election (every
    # window and aggregation below is per election, so none shuffles again), each holder's
    # records in order with their next record. Only the rows the rest reads are kept (a
    # third of them): the entries into active, each holder's last record (its counts) and
    # the first and last record of each holder in each rate bucket (the rates). Caching
    # every record cost more than the parse.
    marks = _holder_marks(flag_states(read_journals(spark, paths).drop("cause"))).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    swept: DataFrame | None = None
    try:
        holders = to_pandas(
            marks.where("last").select(
                "valid",
                "election",
                "identity",
                F.col("n").alias("events"),
                "first_ts",
                F.col("ts").alias("last_ts"),
            )
        )
        read = int(holders["events"].sum())
        per_election = (
            holders[holders["valid"].astype(bool)]
            .groupby("election", as_index=False)
            .agg(
                events=("events", "sum"),
                identities=("identity", "nunique"),
                first_ts=("first_ts", "min"),
                last_ts=("last_ts", "max"),
            )
        )
        stage(STAGES[1])
        # From pandas: with Arrow (report_session) a table in the JVM, where a list of rows
        # is a Python RDD, which started Python workers for it (about a second).
        span = spark.createDataFrame(
            per_election[["election", "last_ts"]].astype({"last_ts": float}),
            "election string, election_end double",
        )
        events = marks.where("valid")
        intervals = _intervals(events.where("enters"), span, session_timeout)
        # Kept without the columns nothing below reads; in the sweep's order.
        swept = (
            sweep(intervals, numbered=True)
            .drop("end_cause", "lag_epoch", "prev_end")
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        summary = election_summary(per_election, swept)
        total = int(summary["events"].sum())
        stage(STAGES[2])
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
        overlaps = to_pandas(overlap_rows.orderBy("election", "start").limit(MAX_OVERLAP_ROWS))
        overlap_count = int(summary["overlaps"].fillna(0).sum())
        failovers = swept.where(F.col("gap").isNotNull())  # every failover
        total_failovers = int(summary["known_gaps"].fillna(0).sum())
        if total_failovers > GAP_SAMPLE:
            failovers = failovers.sample(fraction=GAP_SAMPLE / total_failovers, seed=1)
        gaps = to_pandas(failovers.select("election", "gap", F.col("prev_end_kind").alias("after")))
        stage(STAGES[3])
        # Minutes for a journal of a few hours, hours beyond: enough points for a line.
        observed = float(summary["last_ts"].max() - summary["first_ts"].min()) if total else 0.0
        bucket = 3600.0 if observed >= MINUTE_RATES_BELOW else 60.0
        # Each holder's first and last record in a bucket hold its count there, in parts.
        part = _BUCKET_PARTS[bucket]
        rates = to_pandas(
            events.where(F.col(part).isNotNull())
            .groupBy("election", (F.floor(F.col("ts") / bucket) * bucket).alias("bucket"))
            .agg(F.sum(part).alias("transitions"))
        ).sort_values(["election", "bucket"], ignore_index=True)
        timeline, epochs = timeline_and_epochs(swept, summary)
        closeups = closeups_of(swept, overlaps)
    finally:
        if swept is not None:
            swept.unpersist()
        marks.unpersist()
    return JournalReport(
        summary=summary,
        overlaps=overlaps,
        overlap_count=overlap_count,
        gaps=gaps,
        rates=rates,
        rate_bucket_s=bucket,
        timeline=timeline,
        closeups=closeups,
        epochs=epochs,
        events=total,
        malformed=read - total,  # every valid record is some election's event
        seconds=time.perf_counter() - started,
        session_timeout=session_timeout,
    )


# The rate buckets' widths (s), each with the column of the holders' parts of their counts
# (_holder_marks), and the span below which the report counts per minute.
_BUCKET_PARTS = {60.0: "minute_part", 3600.0: "hour_part"}
MINUTE_RATES_BELOW = 6 * 3600.0


def _holder_marks(flagged: DataFrame) -> DataFrame:
    """The records ``analyze`` reads, each holder's (valid or not) in order with its next
    record: ``n`` (its number in the holder's records), ``last`` (the holder's last, whose
    ``n`` is then the holder's count), ``first_ts`` (the holder's first time), and, at the
    holder's first and last record in each hour (``hour_part``) or minute
    (``minute_part``, only within MINUTE_RATES_BELOW of ``first_ts``: a journal with a
    longer span counts per hour), its part of the bucket's count: the last's ``n`` minus
    the first's ``n - 1``, so that their sum is the holder's records in the bucket. Rows:
    the valid entries into active, the last records, the bucket edges."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    holder = ["valid", "election", "identity"]
    by_holder = Window.partitionBy(*holder).orderBy(*holder_order()[2:])
    running = by_holder.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    steps = flagged.repartition(_partitions(flagged.sparkSession), "election").select(
        "*",
        *_next_record(flagged, by_holder),
        F.lag("ts").over(by_holder).alias("prev_ts"),
        F.row_number().over(by_holder).alias("n"),
        F.lead(F.lit(1)).over(by_holder).isNull().alias("last"),
        F.first("ts").over(running).alias("first_ts"),
    )

    def part(width: float, counted: Any) -> Any:
        bucket = F.floor(F.col("ts") / width)
        opens = F.col("prev_ts").isNull() | (F.floor(F.col("prev_ts") / width) != bucket)
        closes = F.col("next_ts").isNull() | (F.floor(F.col("next_ts") / width) != bucket)
        return F.when(
            counted & (opens | closes),
            F.when(closes, F.col("n")).otherwise(0) - F.when(opens, F.col("n") - 1).otherwise(0),
        )

    valid = F.col("valid")
    marks = steps.select(
        "valid", "election", "identity", "ts", "epoch", "enters", "next_ts", "next_departs", "next_until",
        "n", "last", "first_ts", "session_timeout", "prior_end",
        part(3600.0, valid).alias("hour_part"),
        part(60.0, valid & (F.col("ts") < F.col("first_ts") + MINUTE_RATES_BELOW))
        .alias("minute_part"),
    )  # fmt: skip
    keep = (
        (valid & F.col("enters"))
        | F.col("last")
        | F.col("hour_part").isNotNull()
        | F.col("minute_part").isNotNull()
    )
    return marks.where(F.coalesce(keep, F.lit(False)))


def _partitions(spark: SparkSession) -> int:
    """How many partitions the elections hash to: many per core, so that a few busy
    elections still spread over the cores (8 names in 16 partitions: 7 used, in 8: 5)."""
    configured = int(spark.conf.get("spark.sql.shuffle.partitions") or 1)
    return max(configured, 8 * spark.sparkContext.defaultParallelism)
