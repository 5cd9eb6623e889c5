"""Read-only commands never create files (issue 14): `ha jobs list`, `ha jobs status` and
`ha status` on a missing sqlite file or an empty one say there is no database, in one line,
and leave the directory as it was (the sqlite driver makes an empty file a database)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import ha, ha_env, one_error_line, sqlite_url

COMMANDS = {
    "jobs list": ("jobs", "list"),
    "jobs status": ("jobs", "status", "job-1"),
    "status": ("status", "/a"),
}


@pytest.mark.parametrize("command", ["jobs list", "jobs status"])  # status: test_rough_edges
def test_a_missing_file_stays_missing(tmp_path: Path, command: str) -> None:
    env = ha_env(tmp_path, HA_URL=sqlite_url(tmp_path))
    result = ha(*COMMANDS[command], env=env)
    assert one_error_line(result).startswith(f"ha: error: no ha database at {tmp_path / 'ha.db'} ")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_empty_file_stays_empty(tmp_path: Path, command: str) -> None:
    env = ha_env(tmp_path, HA_URL=sqlite_url(tmp_path))
    (tmp_path / "ha.db").touch()
    result = ha(*COMMANDS[command], env=env)
    assert one_error_line(result) == (
        f"ha: error: no ha database at {tmp_path / 'ha.db'}: the file is empty"
        " (`ha run` or `ha format` makes it one)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ha.db"]
    assert (tmp_path / "ha.db").stat().st_size == 0
