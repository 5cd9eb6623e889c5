"""Running the `ha` command in tests: its environment, one-shot and long-running commands,
their one-line errors, `ha run` supervisors of one election (``Hosts``: their COMMAND a child
that records its pid, epoch and SIGTERM), and a port that never answers (``Silent``).

Every command runs in a subprocess (``python -m ha``), as a user runs it: what is checked is
what they see (stdout, stderr, exit code), and a supervisor can be killed for real.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

# `ha status --json` of an election that does not exist
ABSENT: dict[str, Any] = {
    "exists": False,
    "active": None,
    "epoch": None,
    "since": None,
    "holder": None,
    "breadcrumb": None,
    "contenders": [],
    "leftovers": [],
    "members": [],
    "failover": None,
    "failover_pending": False,
    "problems": [],
}


def sqlite_url(directory: Path) -> str:
    return "sqlite://" + quote(str(directory / "ha.db"))


def ha_env(directory: Path, **extra: str) -> dict[str, str]:
    """The environment of a test's commands: its own state and config directories (a config
    file of the developer's own cannot leak in), no inherited HA_URL."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HA_")}
    env["XDG_STATE_HOME"] = str(directory / "state")
    env["XDG_CONFIG_HOME"] = str(directory / "config")
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


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single ``ha: error: ...`` line of a failed command (and no traceback)."""
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ha: error: ")
    return lines[0]


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
    """Whether ``pid`` runs (a zombie, which nobody may reap in a container, counts as dead;
    a process may vanish while being read)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
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


class Supervisors:
    """`ha run` supervisors of the election /svc, each a process, by identity in ``procs``.

    The backend is ``url`` (default: the sqlite file ``ha.db`` in ``directory``); ``env`` adds
    to the commands' environment. Leaving the ``with`` block stops every supervisor.
    """

    stop_timeout = 10.0

    def __init__(self, directory: Path, url: str | None = None, **env: str) -> None:
        self.directory = directory
        self.env = ha_env(directory, HA_URL=url or sqlite_url(directory), **env)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_all()

    def status(self) -> dict[str, Any]:
        """`ha status /svc --json`: the election as the command shows it."""
        result = ha("status", "/svc", "--json", env=self.env)
        if result.returncode == 1 and (
            "no ha database at" in result.stderr or "does not exist on ZooKeeper" in result.stderr
        ):  # no supervisor has opened the backend yet: `ha status` creates nothing
            return ABSENT | {"path": "/svc"}
        assert result.returncode in (0, 3), result.stderr
        doc: dict[str, Any] = json.loads(result.stdout)
        return doc

    def stop_all(self) -> None:
        stop_procs(self.procs.values(), timeout=self.stop_timeout)


CHILD = r"""
import os, signal, sys, time
directory, ident = sys.argv[1], os.environ["HA_IDENTITY"]
def on_term(*_):
    with open(os.path.join(directory, ident + ".term"), "a") as f:
        f.write(f"{os.getpid()}\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
tmp = os.path.join(directory, ident + ".pid.tmp")
with open(tmp, "w") as f:
    f.write(f"{os.getpid()} {os.environ['HA_EPOCH']}")
os.replace(tmp, os.path.join(directory, ident + ".pid"))
while True:
    time.sleep(0.05)
"""


class Hosts(Supervisors):
    """`ha run` supervisors whose COMMAND is ``CHILD``."""

    def __init__(self, directory: Path, url: str | None = None, **env: str) -> None:
        super().__init__(directory, url, **env)
        self.script = directory / "child.py"
        self.script.write_text(CHILD)

    def start(self, identity: str, *extra: str, wrap: bool = False) -> subprocess.Popen[bytes]:
        """``wrap``: COMMAND is a shell that forks the child and waits (a service wrapper)."""
        argv = ["run", "/svc", "--id", identity, *extra, "--"]
        if wrap:
            argv += ["sh", "-c", '"$0" "$@" & wait']
        argv += [sys.executable, str(self.script), str(self.directory)]
        proc = popen_ha(*argv, env=self.env, log=self.directory / f"{identity}.log")
        self.procs[identity] = proc
        return proc

    def child(self, identity: str) -> tuple[int, int] | None:
        """(pid, epoch) of the identity's COMMAND as last started, or None."""
        try:
            pid, epoch = (self.directory / f"{identity}.pid").read_text().split()
        except FileNotFoundError:
            return None
        return int(pid), int(epoch)

    def settled(self) -> dict[str, Any]:
        """Wait for one active running its COMMAND and every other supervisor standby."""

        def check() -> dict[str, Any] | None:
            doc = self.status()
            states = {m["identity"]: m["state"] for m in doc["members"]}
            live = {i for i, p in self.procs.items() if p.poll() is None}
            if doc["active"] is None or set(states) != live:
                return None
            if sorted(states.values()) != ["active"] + ["standby"] * (len(live) - 1):
                return None
            child = self.child(doc["active"])
            return doc if child is not None and child[1] == doc["epoch"] else None

        found: dict[str, Any] = wait_until(check, "one active and the others standby")
        return found

    def log(self, identity: str) -> str:
        return (self.directory / f"{identity}.log").read_text()


class Silent:
    """A port that accepts connections and never answers: a try that hangs until its end."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []

    def wait_for_a_client(self) -> None:
        self.sock.settimeout(60)
        conn, _ = self.sock.accept()
        self.accepted.append(conn)

    def close(self) -> None:
        for conn in self.accepted:
            conn.close()
        self.sock.close()
