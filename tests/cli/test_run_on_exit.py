"""`ha run --on-exit restart|quit|fail` through the real command, on sqlite and ZooKeeper.

COMMAND notes the epoch it ran under in ``runs``, then exits 3.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ha.supervisor.exits import STARTED
from tests.support.backends.zookeeper import ZooKeeperBackend
from tests.support.cli import Hosts, ha, ha_env, popen_ha, sqlite_url, wait_until

RUN = "import os, sys; open(sys.argv[1], 'a').write(os.environ['HA_EPOCH'] + '\\n'); sys.exit(3)"
# the same, but the first run lasts long enough to count as started (exits.STARTED)
RUN_UP_FIRST = (
    "import os, sys, time; first = not os.path.exists(sys.argv[1]);"
    " open(sys.argv[1], 'a').write(os.environ['HA_EPOCH'] + '\\n');"
    f" first and time.sleep({STARTED} + 0.2); sys.exit(3)"
)


def run_once(
    tmp_path: Path, env: dict[str, str], *options: str
) -> subprocess.CompletedProcess[str]:
    """`ha run /svc --id a OPTIONS -- COMMAND` until it exits by itself."""
    command = [sys.executable, "-c", RUN, str(tmp_path / "runs")]
    return ha("run", "/svc", "--id", "a", *options, "--", *command, env=env, timeout=60)


def members(env: dict[str, str]) -> list[str]:
    doc = ha("status", "/svc", "--json", env=env)
    return [m["identity"] for m in json.loads(doc.stdout)["members"]]


def test_quit_from_the_config_file_exits_0_with_commands_status_logged(tmp_path: Path) -> None:
    config = tmp_path / "ha.toml"
    config.write_text('[run]\non-exit = "quit"\n')
    env = ha_env(tmp_path, HA_URL=sqlite_url(tmp_path), HA_CONFIG=str(config))
    result = run_once(tmp_path, env)
    assert result.returncode == 0, result.stderr
    assert "exited (exit status 3): leaving the election (--on-exit quit)" in result.stderr
    assert (tmp_path / "runs").read_text().count("\n") == 1
    assert members(env) == []  # it left


@pytest.mark.zookeeper
@pytest.mark.parametrize(
    "policy", ["fail", pytest.param("quit", marks=pytest.mark.slow)]
)  # slow: each policy is tested once by default, one on each backend
def test_fail_on_zookeeper_exits_with_commands_status(
    zookeeper_backend: ZooKeeperBackend, tmp_path: Path, policy: str
) -> None:
    env = ha_env(tmp_path, HA_URL=zookeeper_backend.url() + "?session_timeout=2")
    result = run_once(tmp_path, env, "--on-exit", policy)
    assert result.returncode == (3 if policy == "fail" else 0), result.stderr
    assert f"leaving the election (--on-exit {policy})" in result.stderr
    assert members(env) == []


@pytest.mark.slow  # two supervisors and a 2 s first run; tests/supervisor/test_on_exit.py in-process
def test_restart_runs_again_while_active_then_cedes_to_the_standby(tmp_path: Path) -> None:
    with Hosts(tmp_path) as hosts:
        command = [sys.executable, "-c", RUN_UP_FIRST, str(tmp_path / "runs")]
        argv = ["run", "/svc", "--id", "a", "--max-restarts", "2", "--", *command]
        hosts.procs["a"] = popen_ha(*argv, env=hosts.env, log=tmp_path / "a.log")
        wait_until((tmp_path / "runs").exists, "a to lead and run COMMAND")
        hosts.start("b")  # queued behind a before a cedes (or before it rejoins, at the back)
        doc = wait_until(
            lambda: (d := hosts.status())["active"] == "b" and d, "b to lead once a ceded"
        )
    epochs = (tmp_path / "runs").read_text().split()
    assert epochs[:3] == [epochs[0]] * 3  # restarted twice in the same term
    assert int(epochs[0]) < doc["epoch"]
    log = hosts.log("a")
    assert "exited (exit status 3): restart 1 of 2 in 0.5s" in log
    assert "restarted 2 times in a row: ceding" in log
