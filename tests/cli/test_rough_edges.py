"""The rough edges a new operator hit (issue 14), through the real command: options after the
command's name, read-only commands that create nothing, `ha watch` of a missing election, and
why `ha failover --to X` refuses X."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.backends.zookeeper import ZooKeeperBackend, zookeeper_backend, zookeeper_server
from tests.support.cli import Hosts, ha, ha_env, one_error_line, popen_ha, sqlite_url, wait_until

__all__ = ("zookeeper_backend", "zookeeper_server")  # fixtures, until the plugin is registered


# --- global options in any position before the path / COMMAND ------------------------------------


@pytest.mark.parametrize("where", ["before the name", "after the name", "after the path"])
def test_url_after_the_command_name(tmp_path: Path, where: str) -> None:
    url = sqlite_url(tmp_path)
    env = ha_env(tmp_path, HA_URL="memory://elsewhere")  # the flag wins over HA_URL
    assert ha("--url", url, "format", "/p", env=env).returncode == 0
    args = {
        "before the name": ["--url", url, "status", "/p", "--json"],
        "after the name": ["status", "--url", url, "/p", "--json"],
        "after the path": ["status", "/p", "--url", url, "--json"],
    }[where]
    result = ha(*args, env=env)
    assert result.returncode == 3, result.stderr
    assert json.loads(result.stdout)["exists"] is True  # the file, not HA_URL's memory


def test_the_nearer_url_wins_and_debug_goes_anywhere(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    env = ha_env(tmp_path)
    assert ha("format", "/p", "--url", url, env=env).returncode == 0
    both = ha("--url", "memory://x", "status", "--url", url, "/p", "--json", env=env)
    assert json.loads(both.stdout)["exists"] is True
    debug = ha("status", "/x", "--debug", "--url", "bogus", env=env)
    assert "Traceback" in debug.stderr and "ConfigurationError" in debug.stderr
    jobs = ha("jobs", "list", "--url", "bogus", env=env)
    assert "not a backend URL: 'bogus'" in one_error_line(jobs)


def test_run_takes_url_before_the_path_and_leaves_command_its_options(tmp_path: Path) -> None:
    env = ha_env(tmp_path)
    url = sqlite_url(tmp_path)
    out = tmp_path / "argv.json"
    script = "import json, sys; json.dump(sys.argv[1:], open(sys.argv[1], 'w'))"
    proc = popen_ha(
        "run", "--url", url, "/p", "--debug", "--id", "a", "--",
        sys.executable, "-c", script, str(out), "--url", "x", "--debug",
        env=env, log=tmp_path / "run.log",
    )  # fmt: skip
    try:
        wait_until(out.exists, "COMMAND to run")
        assert json.loads(out.read_text()) == [str(out), "--url", "x", "--debug"]
        status = ha("status", "/p", "--url", url, "--json", env=env)
        assert status.returncode in (0, 3), status.stderr
        assert json.loads(status.stdout)["exists"] is True  # the path is /p, not "--url"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    log = (tmp_path / "run.log").read_text()
    # The elector logs its transitions at info, which only --debug shows (the default is warning).
    assert " ha.elector /p a: neutral -> active" in log, log


# --- read-only commands create nothing --------------------------------------------------------


@pytest.mark.parametrize("command", ["status", "watch"])
def test_read_only_commands_create_no_sqlite_file(tmp_path: Path, command: str) -> None:
    env = ha_env(tmp_path)
    missing = tmp_path / "relative.db"
    url = sqlite_url(tmp_path).replace("ha.db", "relative.db")
    result = ha("--url", url, command, "/a", env=env, timeout=20)
    assert result.returncode == 1
    assert one_error_line(result).startswith(f"ha: error: no ha database at {missing} ")
    assert not missing.exists()
    # the default file too: not even its directory
    default = ha(command, "/a", env=env, timeout=20)
    assert f"no ha database at {tmp_path / 'state' / 'ha' / 'ha.db'}" in one_error_line(default)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.zookeeper
def test_read_only_commands_create_no_chroot_on_zookeeper(
    zookeeper_backend: ZooKeeperBackend, tmp_path: Path
) -> None:
    env = ha_env(tmp_path)
    url = zookeeper_backend.url()
    for command in ("status", "watch"):
        result = ha(command, "/a", "--url", url, env=env, timeout=30)
        assert f"the chroot {zookeeper_backend.chroot} does not exist" in one_error_line(result)
    created = ha("format", "/a", "--url", url, env=env)  # a command that writes may create it
    assert created.returncode == 0, created.stderr
    status = ha("status", "--url", url, "/a", "--json", env=env)
    assert status.returncode == 3 and json.loads(status.stdout)["exists"] is True


# --- ha watch of an election that does not exist -----------------------------------------------


def test_watch_says_when_the_election_does_not_exist(tmp_path: Path) -> None:
    env = ha_env(tmp_path, HA_URL=sqlite_url(tmp_path))
    assert ha("format", "/real", env=env).returncode == 0
    typo = subprocess.run(
        [sys.executable, "-m", "ha", "watch", "/typo", "--count", "1"],
        capture_output=True, text=True, env=env, timeout=30,
    )  # fmt: skip
    assert typo.returncode == 0
    assert typo.stdout.strip().endswith("/typo no active")
    assert typo.stderr.strip() == (
        "ha: warning: no election at /typo (nothing has run there yet): watching for one to start"
    )
    real = ha("watch", "/real", "--count", "1", env=env, timeout=30)
    assert real.returncode == 0 and real.stderr == ""


# --- ha failover --to X: what X is, and when to retry -------------------------------------------


def test_failover_to_a_member_that_cannot_take_over_says_what_it_is(tmp_path: Path) -> None:
    with Hosts(tmp_path) as hosts:
        hosts.start("a")
        hosts.settled()
        asked = time.monotonic()  # a cedes after this: its cooling period ends 30 s after
        # alone, forced: a cedes and stays out for the cooling period (with a standby it
        # would stand by at once); b then takes the lead
        forced = ha("failover", "/svc", "--force", "--cooldown", "30", "--no-wait", env=hosts.env)
        assert forced.returncode == 0, forced.stderr
        states = lambda: {m["identity"]: m["state"] for m in hosts.status()["members"]}  # noqa: E731
        wait_until(lambda: states().get("a") == "out", "a out")
        hosts.start("b")
        wait_until(lambda: states() == {"a": "out", "b": "active"}, "b active, a out")
        # a ceded and cools down for 30 s: it is out, and is not listed as a standby
        out = one_error_line(ha("failover", "/svc", "--to", "a", env=hosts.env))
        # what is left of the cooling period: no less than 30 s minus the time since it was
        # asked for (two commands, the first waiting --confirm's 2 s: 12 s on a loaded machine)
        least = 30 - (time.monotonic() - asked) - 1
        assert out.startswith("ha: error: 'a' cannot take over /svc now: it is out (ceded the lead")
        found = re.search(r"; retry in (\d+)s; no other standby now$", out)
        assert found is not None, out
        assert least <= int(found.group(1)) <= 30, (least, out)
        # a name no supervisor runs under
        absent = one_error_line(ha("failover", "/svc", "--to", "zz", env=hosts.env))
        assert absent == (
            "ha: error: 'zz' cannot take over /svc: it is not a member"
            " (no `ha run --id zz` is connected to /svc); no other standby now"
        )
