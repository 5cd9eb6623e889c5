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


def test_steps_told_when_done_carry_the_commands_label() -> None:
    # ha demo --pipeline tells each batch once it is committed, as ha demo.
    out = io.StringIO()
    with stage_progress(2, terminal=False, stream=out, label="ha demo", finished=True) as done:
        done("demo: batch 0 committed on jm-1")
        done("demo: batch 1 committed on jm-2")
    assert out.getvalue().splitlines() == [
        "ha demo: [1/2] demo: batch 0 committed on jm-1",
        "ha demo: [2/2] demo: batch 1 committed on jm-2",
    ]
