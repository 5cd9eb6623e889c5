"""The two engines of `ha report` give the same numbers on the same journals.

``--engine local`` (this process: Arrow and numpy) and ``--engine spark`` through the real
command, on a journal with every case the definitions name (handovers, kills dated by the
new active's record or assumed, a thawed active's deadline, restarts, an overlap, an epoch
error, malformed lines, two elections); then every frame of the report, engine by engine,
on a generated journal of thousands of events. And a journal of 10,000 events is analyzed
without a JVM when nothing asks for Spark.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from ha.report.analysis import analyze  # noqa: E402
from ha.report.local import analyze_local  # noqa: E402
from ha.report.synthetic import generate_journal  # noqa: E402
from tests.support.cli import ha, ha_env  # noqa: E402
from tests.support.journals import write_every_case  # noqa: E402
from tests.support.spark_session import spark  # noqa: E402

__all__ = ("spark",)  # the fixture

pytestmark = pytest.mark.spark


def _report(path: Path, engine: str, tmp_path: Path) -> list[str]:
    result = ha(
        "report", str(path), "--out", str(tmp_path / f"{engine}.html"), "--engine", engine,
        env=ha_env(tmp_path), timeout=600,
    )  # fmt: skip
    assert result.returncode == 4, result.stderr  # the overlap of /b
    lines = result.stdout.splitlines()
    [wrote] = [line for line in lines if line.startswith("wrote ")]
    assert wrote.endswith(f"{engine} engine)")
    return [line for line in lines if line != wrote]


@pytest.mark.timeout(900)
def test_both_engines_print_the_same_report(tmp_path: Path) -> None:
    journal = write_every_case(tmp_path / "j.jsonl")
    local = _report(journal, "local", tmp_path)
    assert _report(journal, "spark", tmp_path) == local
    [a] = [line.split() for line in local if line.startswith("/a")]
    # failovers, crashes, gap p50, gap max, overlaps, available: x's end dated at 5.9 (gap
    # 150 ms), y's deadline 20.0 (gap 1 s), z's end assumed at 36.0 (gap 4 s), x to y 0.5 s;
    # 45.35 s of 51 s with an active
    assert a[1:] == ["4", "2", "500.0", "ms", "4.00", "s", "0", "88.922%"]
    said = " ".join(" ".join(local).split())
    assert "1 end(s) of killed actives dated from the new active's record" in said
    assert "1 end(s) of killed actives assumed a session timeout" in said
    assert "1 end(s) taken as the restarted process's first record" in said


SPARK_SESSION = "report"  # the session `ha report` builds (tests/support/spark_session.py)


@pytest.mark.timeout(900)
def test_every_frame_of_the_report_is_the_same(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import pandas as pd

    generate_journal(tmp_path / "g", events=6_000, elections=14, overlaps=5, seed=11)
    paths = [str(tmp_path / "g"), str(write_every_case(tmp_path / "every.jsonl"))]
    ours, theirs = analyze_local(paths), analyze(spark, paths)
    assert (ours.events, ours.malformed, ours.overlap_count) == (
        theirs.events,
        theirs.malformed,
        theirs.overlap_count,
    )
    assert ours.overlap_count == 6 and ours.malformed == 2
    for name in ("summary", "overlaps", "rates", "timeline", "epochs", "closeups"):
        pd.testing.assert_frame_equal(
            getattr(ours, name), getattr(theirs, name), check_dtype=False, obj=name
        )
    by = ["election", "gap", "after"]
    pd.testing.assert_frame_equal(
        ours.gaps.sort_values(by, ignore_index=True),
        theirs.gaps.sort_values(by, ignore_index=True),
        check_dtype=False,
    )
