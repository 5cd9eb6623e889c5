"""`ha run`'s policies as real processes on the sqlite backend: a required fencer
(``--require-fence``) and a preferred leader (``--priority``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.cli import ABSENT, Hosts, ha, ha_env, one_error_line, sqlite_url, wait_until


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


def test_a_bad_priority_is_one_line(tmp_path: Path) -> None:
    env = ha_env(tmp_path, HA_URL=sqlite_url(tmp_path))
    result = ha("run", "/svc", "--id", "a", "--priority", "-1", "--", "true", env=env)
    assert result.returncode == 2
    assert one_error_line(result) == (
        "ha: error: --priority must be from 0 (no preference) to 1000000"
    )
    assert not (tmp_path / "ha.db").exists()


def test_the_active_hands_the_lead_to_a_preferred_standby(tmp_path: Path) -> None:
    with Hosts(tmp_path) as hosts:
        hosts.start("a", "--settle", "0.2")
        first = hosts.settled()
        assert first["active"] == "a"
        hosts.start("b", "--priority", "5", "--settle", "0.2")

        def handed() -> dict[str, Any] | None:
            doc = hosts.status()
            states = {m["identity"]: m["state"] for m in doc["members"]}
            child = hosts.child("b")
            ok = doc["active"] == "b" and states.get("a") == "standby"
            return doc if ok and child is not None and child[1] == doc["epoch"] else None

        doc = wait_until(handed, "b to lead and a to join again behind it")
        assert doc["epoch"] > first["epoch"]
        assert [(c["identity"], c["priority"]) for c in doc["contenders"]] == [("b", 5), ("a", 0)]
        assert (tmp_path / "a.term").exists()  # a stopped its COMMAND with SIGTERM: gracefully
        assert "'b' (priority 5) is preferred and healthy: handing the lead to it" in hosts.log("a")
        assert "fencing" not in hosts.log("b")
        shown = ha("status", "/svc", env=hosts.env)
        assert shown.returncode == 0, shown.stderr
        leader = next(line for line in shown.stdout.splitlines() if "1. leader" in line)
        assert leader.split()[:3] == ["1.", "leader", "b"] and "priority 5" in leader
