"""`ha run`'s policies as real processes on the sqlite backend: a required fencer
(``--require-fence``) and a preferred leader (``--priority``)."""

from __future__ import annotations

from pathlib import Path

from tests.cli.helpers import ABSENT, ha, ha_env, one_error_line, sqlite_url
from tests.cli.test_run import Hosts


def test_require_fence_without_a_fencer_refuses_to_start(tmp_path: Path) -> None:
    env = ha_env(tmp_path, HA_URL=sqlite_url(tmp_path))
    result = ha("run", "/svc", "--id", "a", "--require-fence", "--", "true", env=env)
    assert result.returncode == 2
    assert one_error_line(result) == (
        "ha: error: --require-fence: no --fence CMD given, refusing to start"
    )
    # nothing joined: the backend was never even opened
    assert not (tmp_path / "ha.db").exists()
    hosts = Hosts(tmp_path)
    assert hosts.status() == ABSENT | {"path": "/svc"}
    assert "--require-fence" in ha("run", "--help", env=env).stdout


def test_require_fence_with_a_fencer_runs(tmp_path: Path) -> None:
    with Hosts(tmp_path) as hosts:
        hosts.start("a", "--require-fence", "--fence", "true")
        doc = hosts.settled()
        assert doc["active"] == "a"
