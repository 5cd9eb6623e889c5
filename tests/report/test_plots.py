"""The report's charts say what the analysis found, and how it knows (no Spark: the local
engine's report of journals with a known answer).

Gaps on a plain axis in ms or s, counted in whole failovers, by how the old active's end is
known; epochs with whole-number ticks over each election's whole run; estimated ends hatched;
no rate of "0 events/s" on the page.
"""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

import pytest

pytest.importorskip("pandas")

from ha.report import run_report  # noqa: E402
from ha.report.local import analyze_local  # noqa: E402
from ha.report.plots import charts  # noqa: E402
from ha.report.svg import Chart  # noqa: E402
from ha.report.synthetic import generate_journal  # noqa: E402
from tests.support.journals import T, write_every_case  # noqa: E402


def _charts(paths: list[str]) -> dict[str, Chart]:
    drawn = charts(analyze_local(paths))
    for chart in drawn:  # each one written out (well-formed), with its data and a legend
        assert ElementTree.fromstring(chart.svg()).tag == "{http://www.w3.org/2000/svg}svg"
        assert all(panel.has_data() and panel.keys for panel in chart.panels), chart.caption
    return {chart.caption.split(",")[0].split(" (")[0]: chart for chart in drawn}


def test_the_charts_of_a_journal_with_every_case(tmp_path: Path) -> None:
    drawn = _charts([str(write_every_case(tmp_path / "j.jsonl"))])
    assert list(drawn) == [
        "Who was active",
        "Failover gaps",
        "Transitions per hour",
        "Overlapping leadership up close",
        "Epochs of successive leaders",
    ]
    [gaps] = drawn["Failover gaps"].panels
    # four gaps from 150 ms to 4 s: a plain axis, labelled as durations
    assert not gaps.x.log
    assert {"0", "1 s", "2 s", "4 s"} <= set(gaps.x.labels())
    assert all(label.isdigit() for label in gaps.y.labels())  # whole failovers
    assert [key.label for key in gaps.keys] == [
        "handover: both ends on record (2)",
        "crash: end estimated from the new active's record (1)",
        "crash: end assumed a session timeout before the takeover (1)",
    ]
    [epochs] = drawn["Epochs of successive leaders"].panels
    assert (epochs.x.lo, epochs.x.hi) == (0.0, 115.0)  # from /a's first record to /b's last
    assert all(label.isdigit() for label in epochs.y.labels())
    [a] = [line for line in epochs.lines if line.label == "/a"]
    assert a.xs[-1] == 51.0 and a.ys[-1] == 4  # held to /a's last record
    # x's and z's ends are estimates: drawn hatched, the others solid
    timeline = drawn["Who was active"].panels[0]
    assert sum(bar.hatched for bar in timeline.bars) == 2
    assert 'fill="url(#hatch0)"' in drawn["Who was active"].svg()


def test_gaps_over_decades_get_a_log_axis_with_durations(tmp_path: Path) -> None:
    generate_journal(tmp_path / "g", events=4_000, elections=2, seed=5)
    [gaps] = _charts([str(tmp_path / "g")])["Failover gaps"].panels
    assert gaps.x.log
    labels = gaps.x.labels()
    assert "1 ms" in labels and "1 s" in labels
    assert not [label for label in labels if "10^" in label or "$" in label]


def test_the_page_says_what_is_estimated_and_no_rate(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    journal = write_every_case(tmp_path / "j.jsonl")
    report = run_report([str(journal)], out, console=False, engine="local")
    assert report.engine == "local" and report.summary["first_ts"].min() == T
    page = " ".join(out.read_text().split())
    assert "events/s" not in page
    assert "Estimated, not recorded: 1 end(s) of killed actives dated from" in page
    assert page.count("data:image/svg+xml;base64,") == 5
