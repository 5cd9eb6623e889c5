"""The `ha` command in subprocesses: help, errors as one line, status, format.

The helpers here (``ha``, ``popen_ha``, ``wait_until``...) serve the other test_cli_* files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest


def sqlite_url(directory: Path) -> str:
    return "sqlite://" + quote(str(directory / "ha.db"))


def ha_env(directory: Path, **extra: str) -> dict[str, str]:
    """The environment of a test's commands: its own state directory, no inherited HA_URL."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HA_")}
    env["XDG_STATE_HOME"] = str(directory / "state")
    env["COLUMNS"] = "200"  # rich wraps long lines at 80 columns otherwise
    env.update(extra)
    return env


def ha(
    *args: str, env: dict[str, str], timeout: float = 60, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ha", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        input=stdin if stdin is not None else "",
    )


def popen_ha(*args: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A long-running `ha` command, its stdout and stderr in ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "ha", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )


def stop_procs(procs: Iterable[subprocess.Popen[bytes]], timeout: float = 10) -> None:
    """SIGTERM every process still running, then wait; SIGKILL what outlives ``timeout``."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, which nobody may reap in a container, counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_until(check: Callable[[], Any], what: str, within: float = 30.0) -> Any:
    """Poll ``check`` until truthy. The bound only turns a hang into a failure."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# --- tests --------------------------------------------------------------------------------------

COMMANDS = ["demo", "run", "status", "watch", "failover", "format"]


@pytest.mark.parametrize("command", [*COMMANDS, None])
def test_every_help_has_an_example(tmp_path: Path, command: str | None) -> None:
    args = [command, "--help"] if command else ["--help"]
    result = ha(*args, env=ha_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "Example" in result.stdout
    assert "ha " in result.stdout.split("Example", 1)[1]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--url", "bogus", "status", "/x"], "not a backend URL"),
        (["--url", "etcd9://h/x", "status", "/x"], "unknown backend scheme 'etcd9'"),
        (["--url", "sqlite:///no/such/dir/ha.db", "status", "/x"], "does not exist"),
        (["--url", "zk://127.0.0.1:1/x?connect_timeout=0.3", "status", "/x"], "could not reach"),
        (["status", "relative/path"], "must be absolute"),
        (["format", "/"], "root"),
        (["run", "/x", "--id", "a", "--", "no-such-command-xyz"], "command not found"),
        (["run", "/x", "--id", "a", "--grace", "10", "--", "true"], "--grace 10s"),
        (["run", "/x", "--id", "a", "--fence", "'unterminated", "--", "true"], "--fence"),
        (["failover", "/x"], "no active"),
    ],
)
def test_errors_are_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    result = ha(*args, env=ha_env(tmp_path))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ha: error: ")
    assert expected in lines[0]


def test_a_file_that_is_not_an_ha_database(tmp_path: Path) -> None:
    (tmp_path / "ha.db").write_bytes(b"not sqlite at all" * 100)
    result = ha("--url", sqlite_url(tmp_path), "status", "/x", env=ha_env(tmp_path))
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        == f"ha: error: {tmp_path / 'ha.db'} is not an ha database (not an SQLite file)"
    )


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = ha("--debug", "--url", "bogus", "status", "/x", env=ha_env(tmp_path))
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "ConfigurationError" in result.stderr


def test_no_active_is_exit_code_3(tmp_path: Path) -> None:
    env = ha_env(tmp_path)  # no --url: the default file under the state directory
    result = ha("status", "/x", env=env)
    assert result.returncode == 3
    assert "does not exist" in result.stdout
    assert (tmp_path / "state" / "ha" / "ha.db").exists()
    result = ha("status", "/x", "--json", env=env)
    assert result.returncode == 3
    assert json.loads(result.stdout)["exists"] is False


def test_url_from_the_environment(tmp_path: Path) -> None:
    env = ha_env(tmp_path, HA_URL=sqlite_url(tmp_path))
    assert ha("format", "/x", env=env).returncode == 0
    assert (tmp_path / "ha.db").exists()
    assert not (tmp_path / "state" / "ha" / "ha.db").exists()
    assert ha("status", "/x", env=env).returncode == 3
    memory = ha("--url", "memory://here", "status", "/x", env=env)
    assert memory.returncode == 3 and "does not exist" in memory.stdout


def test_format(tmp_path: Path) -> None:
    env = ha_env(tmp_path, HA_URL=sqlite_url(tmp_path))
    first = ha("format", "/app/svc", env=env)
    assert first.returncode == 0 and first.stdout.strip() == "/app/svc: created"
    again = ha("format", "/app/svc", env=env)
    assert again.returncode == 0 and again.stdout.strip() == "/app/svc: exists"
    status = json.loads(ha("status", "/app/svc", "--json", env=env).stdout)
    assert status["exists"] and status["active"] is None
    # --force asks first; without a terminal and without --yes it refuses
    refused = ha("format", "/app/svc", "--force", env=env)
    assert refused.returncode == 1 and "add --yes" in refused.stderr
    forced = ha("format", "/app/svc", "--force", "--yes", env=env)
    assert forced.returncode == 0 and forced.stdout.startswith("/app/svc: exists")
