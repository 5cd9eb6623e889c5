"""`ha demo` end to end: real processes on a fresh embedded file, and the in-process variant."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import ha, ha_env


@pytest.mark.parametrize("url", [None, "memory://demo"])
def test_demo_runs_and_summarizes(tmp_path: Path, url: str | None) -> None:
    args = ["demo"] if url is None else ["demo", "--url", url]
    result = ha(*args, env=ha_env(tmp_path), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "ok: 2 failovers, epochs always increased" in out
    if url is None:
        assert "SIGKILL" in out and "SIGSTOP" in out and "SIGCONT" in out
        assert "as processes on sqlite:///" in out
    else:
        assert "crash" in out and "partition" in out and "in this process" in out
    assert "fenced" in out  # the new active fenced the hung one before taking over
    assert "work of epoch" in out and "cancelled" in out
    assert result.stderr == ""
    # a fresh temporary file each time: nothing is left in the user's state directory
    assert not (tmp_path / "state" / "ha" / "ha.db").exists()


def test_demo_refuses_a_backend_it_cannot_share(tmp_path: Path) -> None:
    result = ha("demo", "--url", "bogus", env=ha_env(tmp_path))
    assert result.returncode == 1 and result.stderr.startswith("ha: error: not a backend URL")
