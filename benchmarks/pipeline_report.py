"""Journal report throughput: ``ha report``'s engines beside DuckDB on the same files.

    .venv/bin/python benchmarks/pipeline_report.py [--events 10000000] [--elections 8]
        [--master local[2]] [--threads 2] [--session-timeout 10] [--keep DIR] [--no-duckdb]
        [--no-floor] [--no-local]

Generates a synthetic journal (JSON lines, about 140 bytes per event, 5 injected overlaps),
then times, on the same files:

- **ha (local engine)**: ``ha.report.local.analyze_local``, the same analysis in this process
  (Arrow's JSON reader, numpy), which ``ha report`` runs when the files fit in memory
  (``ha.report.engine.choose``: the line "ha report chooses" says which it takes here), and
  the figures it must agree on with Spark's;
- **ha (Spark)**: ``ha.report.analysis.analyze`` in a fresh SparkSession built as ``ha report``
  builds it (``report_settings``: full JIT, the parallel GC, 2 GB driver, the JVM's output in
  a log file): read, intervals, sweep, the per-election summary and every plot's data; then
  the HTML rendering, apart.
- **DuckDB** (the single-machine reference, ``--threads`` threads, as many as ``local[N]``'s
  cores): the same definitions (``ha.report.analysis``'s docstring) in SQL, read, intervals,
  sweep and the per-election summary, without the plots' data.

- **Spark floor** (in a fresh JVM of its own, built the same way): the least any Spark
  analysis of these definitions does before it can date a single interval: parse every record
  with the explicit schema, put each holder's records in order (one shuffle by election, one
  sort) and read each record's next (one ``lead`` window), then sum that. No cache, no
  aggregate, no second sort, no result beyond one row: ``ha``'s report does all of this and
  more, so its time cannot go below this one on the same machine.

Both must agree (failovers, crashes, overlaps, epoch errors, largest gap, availability) and
find exactly the injected overlaps. Prints a table with the ratio of each time to DuckDB's,
and the load average, since the machine is shared; beside the wall times, the CPU seconds of
Spark's JVM and of DuckDB's process, which a busy machine disturbs less, and ha's time per
stage (``analysis.STAGES``). ``pip install duckdb`` (extra ``bench``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ha.report.analysis import DEFAULT_SESSION_TIMEOUT, STATES, analyze
from ha.report.engine import choose
from ha.report.local import analyze_local
from ha.report.render import render_html
from ha.report.session import report_session, report_settings
from ha.report.synthetic import generate_journal

# The journal's intervals, swept, per election: leadership_intervals and sweep in SQL.
SUMMARY_SQL = """
WITH held AS (
    SELECT *, lead(ts) OVER w AS next_ts, lead("from") OVER w AS next_from
    FROM ev WINDOW w AS (PARTITION BY election, identity ORDER BY ts, ("from" = 'active') DESC)
), entries AS (
    SELECT *, lead(ts) OVER w AS succ_ts, lead(epoch) OVER w AS succ_epoch
    FROM held WHERE "to" = 'active' WINDOW w AS (PARTITION BY election ORDER BY ts, identity)
), span AS (
    SELECT election, count(*) AS events, min(ts) AS first_ts, max(ts) AS last_ts
    FROM ev GROUP BY election
), dated AS (
    SELECT e.*, span.last_ts,
        CASE WHEN succ_ts IS NOT NULL
            AND (succ_epoch IS NULL OR epoch IS NULL OR succ_epoch > epoch)
            THEN greatest(ts, succ_ts - $timeout) END AS superseded_at
    FROM entries e JOIN span USING (election)
), intervals AS (
    SELECT election, identity, ts AS start, epoch,
        CASE WHEN next_from = 'active' THEN next_ts
            ELSE least(next_ts, superseded_at, last_ts) END AS stop,
        CASE WHEN next_from = 'active' THEN 'left'
            WHEN next_ts IS NOT NULL AND (superseded_at IS NULL OR next_ts <= superseded_at)
                THEN 'restarted'
            WHEN superseded_at IS NOT NULL THEN 'superseded'
            ELSE 'open' END AS end_kind
    FROM dated
), swept AS (
    SELECT *,
        max({'stop': stop, 'identity': identity, 'kind': end_kind}) OVER (
            PARTITION BY election ORDER BY start, stop, identity
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev,
        lag(epoch) OVER (PARTITION BY election ORDER BY start, stop, identity) AS lag_epoch
    FROM intervals
), judged AS (
    SELECT *, prev IS NULL AS first, coalesce(start < prev.stop, false) AS overlapping
    FROM swept
), per_interval AS (
    SELECT election,
        count(*) FILTER (WHERE NOT first AND NOT overlapping) AS failovers,
        count(*) FILTER (WHERE NOT first AND NOT overlapping AND prev.kind <> 'left')
            AS crashes,
        max(start - prev.stop) FILTER (WHERE NOT first AND NOT overlapping) AS gap_max,
        count(*) FILTER (WHERE overlapping) AS "overlaps",
        sum(greatest(0, stop - greatest(start, coalesce(prev.stop, start)))) AS covered_s,
        count(*) FILTER (WHERE lag_epoch IS NOT NULL AND NOT epoch > lag_epoch)
            AS epoch_violations
    FROM judged GROUP BY election
)
SELECT span.election, events, failovers, crashes, gap_max, "overlaps", epoch_violations,
    CASE WHEN last_ts > first_ts THEN covered_s / (last_ts - first_ts) END AS availability
FROM span LEFT JOIN per_interval USING (election) ORDER BY election
"""


def duckdb_summary(files: list[Path], threads: int, session_timeout: float) -> Any:
    """The per-election summary in DuckDB, as a pandas frame."""
    import duckdb

    con = duckdb.connect(config={"threads": threads, "memory_limit": "2GB"})
    columns = {
        "ts": "DOUBLE", "election": "VARCHAR", "identity": "VARCHAR", "from": "VARCHAR",
        "to": "VARCHAR", "epoch": "BIGINT", "cause": "VARCHAR",
    }  # fmt: skip
    states = ", ".join(f"'{s}'" for s in STATES)
    con.execute(
        f"""CREATE TEMP TABLE ev AS SELECT ts, election, identity, "from", "to", epoch
        FROM read_json($files, format = 'newline_delimited', columns = $columns,
                       ignore_errors = true)
        WHERE ts IS NOT NULL AND election IS NOT NULL AND identity IS NOT NULL
            AND "from" IN ({states}) AND "to" IN ({states})""",
        {"files": [str(f) for f in files], "columns": columns},
    )
    return con.execute(SUMMARY_SQL, {"timeout": session_timeout}).df()


def agree(spark_summary: Any, duck: Any) -> None:
    """Spark's and DuckDB's summaries tell the same story."""
    ours = spark_summary.set_index("election")
    for row in duck.to_dict("records"):
        mine = ours.loc[row["election"]]
        for key in ("events", "failovers", "crashes", "overlaps", "epoch_violations"):
            assert int(mine[key]) == int(row[key]), (row["election"], key, mine[key], row[key])
        assert abs(float(mine["gap_max"]) - float(row["gap_max"])) < 1e-6, row["election"]
        assert abs(float(mine["availability"]) - float(row["availability"])) < 1e-9


def jvm_cpu_seconds(spark: Any) -> Any:
    """A function reading the CPU time the session's JVM has used (all its threads), from
    /proc: with other work on the machine, CPU time moves less than wall time."""
    from pyspark import SparkContext

    pid = SparkContext._gateway.proc.pid  # type: ignore[union-attr]
    tick = os.sysconf("SC_CLK_TCK")

    def read() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick  # utime + stime

    return read


def floor_job(spark: Any, paths: list[str]) -> None:
    """The Spark floor (module docstring): parse, each holder's records in order, the next."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from ha.report.analysis import _partitions, flag_states, holder_order, read_journals

    events = flag_states(read_journals(spark, paths).drop("cause"))
    by_holder = Window.partitionBy("valid", *holder_order()[:2]).orderBy(*holder_order()[2:])
    ordered = events.repartition(_partitions(spark), "election")
    nexts = ordered.select(F.lead("ts").over(by_holder).alias("next_ts"))
    nexts.select(F.sum("next_ts")).collect()


def run_floor(master: str, journal: Path) -> tuple[float, float]:
    """The floor's wall and JVM CPU seconds, in a fresh process (so a fresh JVM), after its
    session is up, as ha's row is timed."""
    out = subprocess.run(
        [sys.executable, __file__, "--floor-only", str(journal), "--master", master],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    wall, cpu = json.loads(out.strip().splitlines()[-1])
    return float(wall), float(cpu)


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--elections", type=int, default=8)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--threads", type=int, default=2, help="DuckDB's threads")
    parser.add_argument("--session-timeout", type=float, default=DEFAULT_SESSION_TIMEOUT)
    parser.add_argument("--keep", help="generate into (or reuse) this directory")
    parser.add_argument("--no-duckdb", action="store_true", help="time Spark only")
    parser.add_argument("--no-floor", action="store_true", help="skip the Spark floor")
    parser.add_argument("--no-local", action="store_true", help="skip the local engine")
    parser.add_argument("--floor-only", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_only:  # run_floor's child: one line of JSON
        spark = report_session(report_settings(args.master, "2g", app_name="ha-report-floor"))
        jvm = jvm_cpu_seconds(spark)
        started, cpu = time.perf_counter(), jvm()
        floor_job(spark, [args.floor_only])
        print(json.dumps([time.perf_counter() - started, jvm() - cpu]))
        spark.stop()
        return
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="ha-pipeline-report-"))
    try:
        journal = workdir / "journal"
        started = time.perf_counter()
        truth = generate_journal(
            journal, events=args.events, elections=args.elections, overlaps=5, seed=3
        )
        generated = time.perf_counter() - started
        size = sum(f.stat().st_size for f in truth.files)
        print(f"generated {truth.events:,} events ({size / 1e9:.2f} GB) in {generated:.1f} s")
        load_before = os.getloadavg()
        chosen = choose("auto", [str(journal)], args.master)
        local = None
        if not args.no_local:  # first: before a JVM takes memory
            cpu = own_cpu_seconds()
            local = analyze_local([str(journal)], session_timeout=args.session_timeout)
            local_cpu = own_cpu_seconds() - cpu

        started = time.perf_counter()
        spark = report_session(report_settings(args.master, "2g", app_name="ha-report-bench"))
        session_s = time.perf_counter() - started
        stages: list[tuple[str, float, float]] = []  # name, wall and JVM CPU at its start
        jvm = jvm_cpu_seconds(spark)

        def on_stage(name: str) -> None:
            stages.append((name, time.perf_counter(), jvm()))

        report = analyze(
            spark, [str(journal)], session_timeout=args.session_timeout, on_stage=on_stage
        )
        stages.append(("", time.perf_counter(), jvm()))
        started = time.perf_counter()
        html = render_html(report)
        rendered = time.perf_counter() - started
        spark.stop()
        found = sorted(
            (o["election"], o["first"], o["second"]) for o in report.overlaps.to_dict("records")
        )
        expected = sorted((o.election, o.first, o.second) for o in truth.overlaps)
        assert report.events == truth.events and found == expected, (found, expected)

        spark_cpu = stages[-1][2] - stages[0][2]
        rows = [("ha (Spark " + args.master + ")", report.seconds, spark_cpu)]
        if local is not None:
            agree(report.summary, local.summary)
            assert local.overlap_count == report.overlap_count == len(truth.overlaps)
            rows.insert(0, ("ha (local engine)", local.seconds, local_cpu))
        if not args.no_duckdb:
            started, cpu = time.perf_counter(), own_cpu_seconds()
            duck = duckdb_summary(truth.files, args.threads, args.session_timeout)
            rows.append(
                (
                    f"DuckDB ({args.threads} threads)",
                    time.perf_counter() - started,
                    own_cpu_seconds() - cpu,
                )
            )
            agree(report.summary, duck)
            assert int(duck["overlaps"].sum()) == len(truth.overlaps)
        if not args.no_floor:
            rows.insert(1, ("Spark floor (fresh JVM)", *run_floor(args.master, journal)))
        load_after = os.getloadavg()

        reference = rows[-1][1]
        print(
            f"\n{truth.events:,} events, {size / 1e9:.2f} GB of JSON lines, {os.cpu_count()} CPUs"
        )
        print(
            f"{'engine':<24} {'seconds':>8} {'events/s':>12} {'vs DuckDB':>10}"
            f" {'CPU s':>8} {'CPU vs DuckDB':>14}"
        )
        for name, seconds, cpu in rows:
            ratio = f"{seconds / reference:.1f}x" if not args.no_duckdb else "-"
            cpu_ratio = f"{cpu / rows[-1][2]:.1f}x" if not args.no_duckdb else "-"
            print(
                f"{name:<24} {seconds:8.1f} {truth.events / seconds:12,.0f} {ratio:>10}"
                f" {cpu:8.1f} {cpu_ratio:>14}"
            )
        floor = [row for row in rows if row[0].startswith("Spark floor")]
        if floor:
            for name, seconds, cpu in rows:
                if name.startswith("ha "):
                    print(
                        f"{name} / Spark floor: {seconds / floor[0][1]:.2f}x wall,"
                        f" {cpu / floor[0][2]:.2f}x CPU"
                    )
        print(f"ha report chooses the {chosen} engine for these files (--engine auto)")
        print("\nha's stages (wall s, JVM CPU s):")
        for (name, wall, cpu), (_, next_wall, next_cpu) in zip(stages, stages[1:], strict=False):
            print(f"  {name:<36} {next_wall - wall:8.1f} {next_cpu - cpu:8.1f}")
        print(
            f"\nSpark session start {session_s:.1f} s (not counted); HTML {len(html) / 1e3:.0f} kB"
            f" in {rendered:.1f} s; overlaps found: {report.overlap_count} of"
            f" {len(truth.overlaps)}; the summaries agree"
            + ("" if args.no_duckdb else " with DuckDB's")
        )
        print(
            "load average (1, 5, 15 min): before "
            + " ".join(f"{x:.1f}" for x in load_before)
            + ", after "
            + " ".join(f"{x:.1f}" for x in load_after)
        )
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
