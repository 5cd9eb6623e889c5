"""``timing_for``'s hold (``ha run --hold-on-disconnect``), with no event loop: the elector holds
the lead through a lost connection only when asked, and never past the deadline that lets
COMMAND stop (grace included) before the session can expire."""

from __future__ import annotations

import pytest

from ha.errors import ConfigurationError
from ha.supervisor.settings import timing_for


def test_no_hold_stops_at_once_on_a_disconnection() -> None:
    timing = timing_for(10.0, 0.5)
    assert not timing.hold_on_disconnect
    assert timing.deadline_ratio == pytest.approx(2 / 3)


@pytest.mark.parametrize("hold", [5.0, 6.0, 6.66])
def test_a_hold_in_range_is_the_deadline_after_the_last_contact(hold: float) -> None:
    timing = timing_for(10.0, 0.5, hold)
    assert timing.hold_on_disconnect
    assert timing.deadline_ratio * 10.0 == pytest.approx(hold)
    assert timing.deadline_ratio <= timing_for(10.0, 0.5).deadline_ratio  # never later


@pytest.mark.parametrize(
    ("hold", "grace", "why"),
    [
        (6.7, 0.5, "before the session can expire"),  # past the 2/3 deadline
        (6.0, 4.0, "before the session can expire"),  # a long grace leaves less
        (4.9, 0.5, "which may be that old while connected"),  # under half the session
    ],
)
def test_a_hold_out_of_range_is_refused(hold: float, grace: float, why: str) -> None:
    with pytest.raises(ConfigurationError, match=f"--hold-on-disconnect {hold:g}s: .*{why}"):
        timing_for(10.0, grace, hold)
