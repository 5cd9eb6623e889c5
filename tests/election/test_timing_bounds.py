"""Timings validation accepts never flap (issue 26, item 4): the local deadline counted from
the last contact must outlast the driver's renewal interval, or an active with no fault at
all is stopped and started again at every renewal (``--grace 1.2`` on a 2 s sqlite session:
34-136 COMMAND starts in 8-12 s)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ha
from ha.drivers.sqlite import SqliteDriver
from ha.election.timing import Timing, renewal_slack
from ha.errors import ConfigurationError
from ha.supervisor import timing_for
from tests.support.cli import ha_env, one_error_line, sqlite_url


@given(
    session=st.floats(0.2, 120),
    grace_share=st.floats(0, 1),
    renewal_share=st.floats(0.05, 0.9),
    hold_share=st.sampled_from([0.0, 0.5, 0.55, 0.6, 0.66]),
)
def test_every_accepted_timing_outlasts_a_renewal_and_stops_in_time(
    session: float, grace_share: float, renewal_share: float, hold_share: float
) -> None:
    grace, renewal = grace_share * session, renewal_share * session
    try:
        timing = timing_for(session, grace, hold_share * session, renewal)
    except ConfigurationError:
        return
    span = timing.deadline_ratio * session
    assert span >= renewal + renewal_slack(session)  # no stop at every renewal
    assert span + grace < session  # COMMAND stopped before the session can expire


def test_the_grace_that_flapped_is_refused_in_one_line(tmp_path: Path) -> None:
    url = f"{sqlite_url(tmp_path)}?session_timeout=2"
    try:
        result = subprocess.run(
            [sys.executable, "-m", "ha", "--url", url, "run", "/svc", "--id", "a"]
            + ["--grace", "1.2", "--", "sleep", "60"],
            capture_output=True,
            text=True,
            env=ha_env(tmp_path),
            timeout=30,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("--grace 1.2 with a 2 s session was accepted: the supervisor ran")
    line = one_error_line(result)
    assert "--grace 1.2s leaves no time" in line and "renew" in line
    assert "?session_timeout=" in line  # says how to mend it


@pytest.mark.anyio
async def test_an_elector_whose_deadline_comes_before_a_renewal_is_refused(
    tmp_path: Path,
) -> None:
    async with SqliteDriver(str(tmp_path / "ha.db"), session_timeout=2.0) as driver:
        assert driver.renewal_interval == pytest.approx(2 / 3)
        with pytest.raises(ConfigurationError, match="before the driver renews"):
            ha.Elector(driver, "/svc", "a", timing=Timing(deadline_ratio=0.3))
        ha.Elector(driver, "/svc", "a", timing=Timing(deadline_ratio=0.45))
        await anyio.lowlevel.checkpoint()
