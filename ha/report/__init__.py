"""The election journal report (``ha report``): what the journals say about each election.

``analysis`` computes it in Spark (its docstring defines intervals, failovers, gaps, overlaps
and availability), ``summary`` brings its small results to pandas, ``local`` computes the
same in this process for journals that fit in memory (``engine`` chooses), ``render`` prints
the summary table and writes the HTML page, ``synthetic`` generates journals with a known
truth. Importing this package registers the
``journal.intervals`` pipeline, so the job manager can run the analysis as a job too; it does
not import pyspark.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ..pipeline.api.registry import Param, pipeline
from .analysis import (
    DEFAULT_SESSION_TIMEOUT,
    JournalReport,
    analyze,
    leadership_intervals,
    read_journals,
    sweep,
)
from .engine import ENGINES, choose
from .render import render_html, summary_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ("WRITING", "journal_intervals", "run_report")

WRITING = "writing the HTML report"  # run_report's stage after analysis.STAGES


def _journal_batches(params: Any) -> list[str]:
    # One batch: an election's intervals need all of its records, from every file.
    journals = [p.strip() for p in params["journals"].split(",") if p.strip()]
    if not journals:
        raise ValueError("journals: give at least one path, directory or glob")
    return [",".join(journals)]


@pipeline(
    "journal.intervals",
    batches=_journal_batches,
    params={
        "journals": Param(str, help="comma-separated journal paths, directories or globs"),
        "session_timeout": Param(
            float,
            DEFAULT_SESSION_TIMEOUT,
            help="the backend's session timeout (s): dates the end of a killed active",
        ),
    },
    sort_by=("election", "start", "identity"),
)
def journal_intervals(spark: SparkSession, params: Any, batch: Any) -> DataFrame:
    """Leadership intervals of election journals, swept: failovers, gaps and overlaps."""
    events = read_journals(spark, str(batch).split(",")).where("valid").drop("valid")
    return sweep(leadership_intervals(events, float(params["session_timeout"])))


def run_report(
    paths: Sequence[str],
    out: Path | str | None = None,
    *,
    spark: SparkSession | None = None,
    master: str = "local[2]",
    driver_memory: str = "2g",
    console: Any = None,
    session_timeout: float = DEFAULT_SESSION_TIMEOUT,
    quiet: bool = True,
    on_stage: Callable[[str], None] | None = None,
    engine: str = "auto",
) -> JournalReport:
    """What ``ha report JOURNALS... --out report.html`` does: analyze, write HTML, print table.

    Builds a SparkSession on ``master`` unless one is given (``driver_memory`` applies only
    when this process has no Spark JVM yet; ``quiet`` sends that JVM's output to a log file,
    see ``session``). ``console`` is a rich Console (default: stdout); pass ``False`` to print
    nothing. ``session_timeout`` is the backend's: it dates the end of a killed active.
    ``on_stage(name)`` hears each stage start: ``analysis.STAGES``, then ``WRITING`` when
    ``out`` is given (``progress.stage_progress`` shows them). ``engine``: ``local``, ``spark``
    or ``auto`` (``engine.choose``; Spark when a session is given).
    """
    if not paths:
        raise ConfigurationError("no journal given")
    if engine not in ENGINES:
        raise ConfigurationError(f"engine {engine!r}: choose one of {', '.join(ENGINES)}")
    if spark is None and choose(engine, paths, master) == "local":
        from .local import analyze_local

        report = analyze_local(paths, session_timeout=session_timeout, on_stage=on_stage)
    else:
        from .session import report_session, report_settings

        if spark is None:
            spark = report_session(report_settings(master, driver_memory), quiet=quiet)
        report = analyze(spark, paths, session_timeout=session_timeout, on_stage=on_stage)
    if out is not None:
        if on_stage is not None:
            on_stage(WRITING)
        Path(out).write_text(render_html(report))
    if console is not False:
        from rich.console import Console

        (console or Console()).print(summary_table(report))
    return report
