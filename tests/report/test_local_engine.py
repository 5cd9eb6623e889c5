"""`ha report` without Spark: a day's journal is analyzed in the process, no JVM to wait for
(``ha.report.engine.choose``), and an input the local engine cannot read goes to Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from ha.report.engine import choose  # noqa: E402
from ha.report.synthetic import generate_journal  # noqa: E402
from tests.support.cli import ha, ha_env  # noqa: E402


def test_ten_thousand_events_are_analyzed_without_a_jvm(tmp_path: Path) -> None:
    generate_journal(tmp_path / "j", events=10_000, elections=3, seed=1)
    result = ha(
        "report", str(tmp_path / "j"), "--out", str(tmp_path / "r.html"),
        env=ha_env(tmp_path), timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "events analyzed in" in result.stdout and result.stdout.count("local engine") == 1


def test_the_charts_import_no_plotting_library(tmp_path: Path) -> None:
    """The charts are SVG text (``ha.report.svg``): `ha report` imports neither matplotlib nor
    an imaging library, nor pyspark for the local engine (their import took a CPU-second)."""
    generate_journal(tmp_path / "j", events=10_000, elections=3, seed=1)
    out = tmp_path / "r.html"
    result = ha(
        "report", str(tmp_path / "j"), "--out", str(out),
        env=ha_env(tmp_path, PYTHONPROFILEIMPORTTIME="1"), timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert {"ha.cli", "ha.report.local", "pandas"} <= imported  # the list is the command's
    heavy = {name for name in imported if name.split(".")[0] in ("matplotlib", "PIL", "pyspark")}
    assert not heavy, sorted(heavy)[:5]
    assert out.read_text().count("data:image/svg+xml;base64,") == 4  # no overlap: no close-up


def test_what_goes_to_spark(tmp_path: Path) -> None:
    journal = tmp_path / "j.jsonl"
    journal.write_text("")
    assert choose("auto", [str(journal)], "local[2]") == "local"
    assert choose("auto", ["s3a://logs/ha/*.jsonl"], "local[2]") == "spark"  # not a local file
    assert choose("auto", [str(journal)], "spark://spark-master:7077") == "spark"  # a cluster
    assert choose("spark", [str(journal)], "local[2]") == "spark"
