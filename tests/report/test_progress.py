"""The report's stage display: plain numbered lines off a terminal, a transient bar on one."""

from __future__ import annotations

import io

from ha.report.progress import stage_progress


def test_plain_lines_number_each_stage() -> None:
    out = io.StringIO()
    with stage_progress(3, terminal=False, stream=out) as on_stage:
        for name in ("read", "sweep", "plot"):
            on_stage(name)
    assert out.getvalue().splitlines() == [
        "ha report: [1/3] read",
        "ha report: [2/3] sweep",
        "ha report: [3/3] plot",
    ]


def test_the_terminal_bar_leaves_no_stage_lines_behind() -> None:
    out = io.StringIO()
    with stage_progress(2, terminal=True, stream=out) as on_stage:
        on_stage("read")
        on_stage("sweep")
    assert "ha report:" not in out.getvalue()  # transient: the table takes its place
