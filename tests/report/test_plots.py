"""The report's charts say what the analysis found, and how it knows (no Spark: the local
engine's report of journals with a known answer).

Gaps on a plain axis in ms or s, counted in whole failovers, by how the old active's end is
known; epochs with whole-number ticks over each election's whole run; estimated ends hatched;
no rate of "0 events/s" on the page.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("matplotlib")

import matplotlib.pyplot as plt  # noqa: E402

from ha.report import run_report  # noqa: E402
from ha.report.local import analyze_local  # noqa: E402
from ha.report.plots import figures  # noqa: E402
from ha.report.synthetic import generate_journal  # noqa: E402
from tests.support.journals import T, write_every_case  # noqa: E402


def _charts(paths: list[str]) -> dict[str, object]:
    drawn = figures(analyze_local(paths))
    return {caption.split(",")[0].split(" (")[0]: fig for caption, fig in drawn}


def _labels(axis: object) -> list[str]:
    return [t.get_text() for t in axis.get_ticklabels() if t.get_text()]  # type: ignore[attr-defined]


def test_the_charts_of_a_journal_with_every_case(tmp_path: Path) -> None:
    charts = _charts([str(write_every_case(tmp_path / "j.jsonl"))])
    try:
        assert list(charts) == [
            "Who was active",
            "Failover gaps",
            "Transitions per hour",
            "Overlapping leadership up close",
            "Epochs of successive leaders",
        ]
        gaps = charts["Failover gaps"].axes[0]  # type: ignore[attr-defined]
        # four gaps from 150 ms to 4 s: a plain axis, labelled as durations
        assert gaps.get_xscale() == "linear"
        assert {"0", "1 s", "2 s", "4 s"} <= set(_labels(gaps.xaxis))
        assert all(label.isdigit() for label in _labels(gaps.yaxis))  # whole failovers
        legend = [t.get_text() for t in gaps.get_legend().get_texts()]
        assert legend == [
            "handover: both ends on record (2)",
            "crash: end estimated from the new active's record (1)",
            "crash: end assumed a session timeout before the takeover (1)",
        ]
        epochs = charts["Epochs of successive leaders"].axes[0]  # type: ignore[attr-defined]
        assert epochs.get_xlim() == (0.0, 115.0)  # from /a's first record to /b's last
        assert all(label.isdigit() for label in _labels(epochs.yaxis))
        [a] = [line for line in epochs.get_lines() if line.get_label() == "/a"]
        assert a.get_xdata()[-1] == 51.0 and a.get_ydata()[-1] == 4  # held to /a's last record
        # x's and z's ends are estimates: drawn hatched, the others solid
        timeline = charts["Who was active"].axes[0]  # type: ignore[attr-defined]
        hatched = [c for c in timeline.collections if c.get_hatch()]
        assert sum(len(c.get_paths()) for c in hatched) == 2
    finally:
        plt.close("all")


def test_gaps_over_decades_get_a_log_axis_with_durations(tmp_path: Path) -> None:
    generate_journal(tmp_path / "g", events=4_000, elections=2, seed=5)
    charts = _charts([str(tmp_path / "g")])
    try:
        gaps = charts["Failover gaps"].axes[0]  # type: ignore[attr-defined]
        assert gaps.get_xscale() == "log"
        labels = _labels(gaps.xaxis)
        assert "1 ms" in labels and "1 s" in labels
        assert not [label for label in labels if "10^" in label or "$" in label]
    finally:
        plt.close("all")


def test_the_page_says_what_is_estimated_and_no_rate(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    journal = write_every_case(tmp_path / "j.jsonl")
    report = run_report([str(journal)], out, console=False, engine="local")
    assert report.engine == "local" and report.summary["first_ts"].min() == T
    page = " ".join(out.read_text().split())
    assert "events/s" not in page
    assert "Estimated, not recorded: 1 end(s) of killed actives dated from" in page
    assert page.count("data:image/png;base64,") == 5
