"""The report reads the journal that electors write: same fields, same states (no Spark needed)."""

from __future__ import annotations

from ha.election.journal import Transition
from ha.election.machine import State
from ha.report.analysis import COLUMNS, STATES


def test_the_report_reads_the_fields_a_transition_writes() -> None:
    record = Transition(1.5, 0.0, "/e", "a", State.STANDBY, State.ACTIVE, 7, "won").to_json()
    assert list(COLUMNS) == list(record)


def test_the_report_knows_every_public_state() -> None:
    assert set(STATES) == {state.value for state in State}


def test_the_command_and_the_analysis_assume_the_same_session_timeout() -> None:
    from ha.cli.report import DEFAULT_SESSION_TIMEOUT as command_default
    from ha.report.analysis import DEFAULT_SESSION_TIMEOUT

    assert command_default == DEFAULT_SESSION_TIMEOUT
