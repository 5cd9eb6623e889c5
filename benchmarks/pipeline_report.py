"""Journal report throughput on local[2]: events per second of ``analyze``.

    .venv/bin/python benchmarks/pipeline_report.py [--events 10000000] [--elections 8]
        [--master local[2]] [--keep DIR]

Generates a synthetic journal (JSON lines, about 140 bytes per event, 5 injected overlaps),
then times the report's Spark job (read, intervals, sweep, aggregates, plot data) in a fresh
SparkSession built as ``ha report`` builds it (full JIT, 2 GB driver), and the HTML rendering.
Checks that the injected overlaps are exactly the ones found.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from ha.pipeline.spark import SparkSettings, build_session
from ha.report.analysis import analyze
from ha.report.render import render_html
from ha.report.synthetic import generate_journal


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--elections", type=int, default=8)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--keep", help="generate into (or reuse) this directory")
    args = parser.parse_args()
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
        started = time.perf_counter()
        spark = build_session(
            SparkSettings(
                master=args.master,
                app_name="ha-report-bench",
                fast_start=False,
                conf={"spark.driver.memory": "2g"},
            )
        )
        print(f"SparkSession in {time.perf_counter() - started:.1f} s")
        report = analyze(spark, [str(journal)])
        started = time.perf_counter()
        html = render_html(report)
        rendered = time.perf_counter() - started
        found = sorted(
            (o["election"], o["first"], o["second"]) for o in report.overlaps.to_dict("records")
        )
        expected = sorted((o.election, o.first, o.second) for o in truth.overlaps)
        assert report.events == truth.events and found == expected, (found, expected)
        print(
            f"analyze: {report.seconds:.1f} s, {report.events_per_second:,.0f} events/s "
            f"({size / report.seconds / 1e6:.1f} MB/s); HTML {len(html) / 1e3:.0f} kB in "
            f"{rendered:.1f} s; overlaps found: {report.overlap_count} of {len(truth.overlaps)}"
        )
        spark.stop()
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
