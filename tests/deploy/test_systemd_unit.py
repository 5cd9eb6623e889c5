"""deploy/systemd/ha-run@.service: systemd's own parser accepts it, it says what `ha run`
needs (Type=notify, the watchdog, KillMode=mixed), and its ExecStart, run as systemd runs it
(the instance and $COMMAND expanded, NOTIFY_SOCKET and WATCHDOG_USEC set, SIGTERM to the main
process alone), joins, says READY=1, and stops COMMAND before it exits.

No systemd runs as PID 1 here to start the unit itself; `systemd-analyze verify` is systemd's
unit loader without a manager. tests/cli/test_run_systemd.py covers the protocol in depth.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ha._process import GUARD_MARGIN
from ha.supervisor.systemd import PINGS_PER_INTERVAL
from tests.support.cli import alive, ha_env, sqlite_url, stop_procs, wait_until

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "ha-run@.service"


def sections(text: str) -> dict[str, dict[str, list[str]]]:
    """The unit's sections: each key's values, in order (a key may repeat)."""
    found: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        assert not line.endswith("\\"), f"line {number}: keep each setting on one line"
        if line.startswith("[") and line.endswith("]"):
            current = found.setdefault(line[1:-1], {})
            continue
        key, equals, value = line.partition("=")
        assert equals and current is not None, f"line {number}: not KEY=VALUE: {raw!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return found


def seconds(span: str) -> float:
    """A systemd time span of one unit: 60, 60s, 2min, 500ms."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s|min|)", span)
    assert match, span
    return float(match.group(1)) * {"ms": 0.001, "s": 1.0, "": 1.0, "min": 60.0}[match.group(2)]


def section(name: str) -> dict[str, str]:
    found = sections(UNIT.read_text())
    assert set(found) == {"Unit", "Service"}
    assert all(len(v) == 1 for v in found[name].values())
    return {key: values[0] for key, values in found[name].items()}


def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian's systemd package)")
    # verify loads an instance of the template; it also checks that ExecStart's program
    # exists, so the unit points at a stand-in for /opt/ha/bin/ha
    program = tmp_path / "ha"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    text = UNIT.read_text()
    assert "ExecStart=/opt/ha/bin/ha " in text
    (tmp_path / UNIT.name).write_text(text.replace("/opt/ha/bin/ha ", f"{program} "))
    (tmp_path / "ha-run@myapp.service").symlink_to(UNIT.name)
    done = subprocess.run(
        [analyze, "verify", "--man=no", str(tmp_path / "ha-run@myapp.service")],
        capture_output=True,
        text=True,
    )
    # unknown keys and values it cannot parse are only warnings: any output is a failure
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_the_verify_check_catches_a_bad_key(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian's systemd package)")
    bad = tmp_path / "bad@.service"
    bad.write_text("[Service]\nType=notify\nExecStart=/bin/true\nKillMode=whatever\nWatchdog=5\n")
    (tmp_path / "bad@x.service").symlink_to(bad.name)
    done = subprocess.run(
        [analyze, "verify", "--man=no", str(tmp_path / "bad@x.service")],
        capture_output=True,
        text=True,
    )
    said = done.stdout + done.stderr
    assert "kill mode" in said and "Unknown key" in said


def test_the_unit_asks_for_what_ha_run_does() -> None:
    unit = section("Service")
    assert unit["Type"] == "notify"  # READY=1 once joined
    assert unit["NotifyAccess"] == "main"  # COMMAND cannot speak for the supervisor
    assert unit["Restart"] == "on-failure"
    # restarted for ever: a backend down for long must not leave the host out for good
    assert section("Unit")["StartLimitIntervalSec"] == "0"
    # the supervisor's keep-alives come a few times per interval; a real interval, not 0
    assert seconds(unit["WatchdogSec"]) / PINGS_PER_INTERVAL >= 1.0
    # SIGTERM to the supervisor alone: it stops COMMAND's tree, then leaves the election
    assert unit["KillMode"] == "mixed"
    # the stop (the default --grace of 0.5 s, the guard's margin, leaving) fits, with room
    assert seconds(unit["TimeoutStopSec"]) > 10 * (0.5 + GUARD_MARGIN + 1.0)
    assert unit["ExecStart"] == "/opt/ha/bin/ha run /%I -- $COMMAND"
    assert unit["EnvironmentFile"] == "/etc/ha/%i.env"


def test_execstart_as_systemd_runs_it_joins_and_stops_command(tmp_path: Path) -> None:
    unit = section("Service")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    address = f"@ha-test-unit-{os.getpid()}"
    listener.bind("\0" + address[1:])
    listener.settimeout(30)
    # the instance ha-run@myapp, its environment file, and the config file it points to
    config = tmp_path / "myapp.toml"
    config.write_text(f'url = "{sqlite_url(tmp_path)}"\n[run]\nid = "host-a"\n')
    env = ha_env(tmp_path, HA_CONFIG=str(config), COMMAND="sleep 600")
    env.update(NOTIFY_SOCKET=address, WATCHDOG_USEC="3000000")
    argv = unit["ExecStart"].replace("%I", "myapp").split()
    at = argv.index("$COMMAND")
    argv[at : at + 1] = env["COMMAND"].split()  # systemd splits an unbraced $VAR at spaces
    assert argv[0] == "/opt/ha/bin/ha"
    argv[:1] = [sys.executable, "-m", "ha"]  # this checkout's ha
    with open(tmp_path / "log", "wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        said = []
        while not any("READY=1" in m for m in said):
            said.append(listener.recv(4096).decode())
        assert "STATUS=active in /myapp (epoch " in said[-1]
        status = subprocess.run(
            [sys.executable, "-m", "ha", "status", "/myapp", "--json"],
            env=env,
            capture_output=True,
            text=True,
        )
        assert json.loads(status.stdout)["active"] == "host-a"
        started = wait_until(
            lambda: re.search(r"started sleep \(pid (\d+)", (tmp_path / "log").read_text()),
            "COMMAND to start",
        )
        pid = int(started.group(1))
        # systemctl stop under KillMode=mixed: SIGTERM to the main process only
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert not alive(pid)  # stopped by ha run before it exited: nothing left to SIGKILL
    finally:
        listener.close()
        stop_procs([proc])
