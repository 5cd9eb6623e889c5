"""`ha run` as a systemd ``Type=notify`` service: what it sends to ``$NOTIFY_SOCKET``.

A real datagram socket plays systemd's end (bound at a path, or in the abstract namespace as
``@name``) and real `ha run` processes (sqlite) talk to it: ``READY=1`` only once joined,
``WATCHDOG=1`` a few times per ``$WATCHDOG_USEC`` while the supervisor's loop runs and none
while it is stopped, ``STOPPING=1`` on SIGTERM; and what systemd then does to a silent one
(SIGABRT and SIGCONT to the main process alone, as ``KillMode=mixed`` makes it) leaves no
COMMAND behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.cli import alive, ha, ha_env, popen_ha, sqlite_url, stop_procs, wait_until

WATCHDOG = 2.0  # seconds: WatchdogSec= as systemd hands it over, in WATCHDOG_USEC

# COMMAND: writes its pid and environment, then runs until stopped
COMMAND = [
    sys.executable,
    "-c",
    "import json, os, sys, time\n"
    "json.dump({'pid': os.getpid(), 'env': dict(os.environ)}, open(sys.argv[1] + '.tmp', 'w'))\n"
    "os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
    "time.sleep(600)\n",
]


class NotifySocket:
    """systemd's end of sd_notify: the datagrams received, in order, with their arrival."""

    def __init__(self, abstract: bool) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.dir = tempfile.mkdtemp(prefix="ha-sd-")  # a socket path is at most 107 bytes
        if abstract:
            name = f"ha-test-{os.getpid()}-{os.path.basename(self.dir)}"
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            self.address = os.path.join(self.dir, "notify")
            self.sock.bind(self.address)
        self.received: list[tuple[float, str]] = []

    def close(self) -> None:
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _next(self, timeout: float) -> str | None:
        """The next message, or None if none came within ``timeout`` seconds."""
        if timeout > 0:
            self.sock.settimeout(timeout)
        else:
            self.sock.setblocking(False)
        try:
            data = self.sock.recv(4096).decode()
        except (TimeoutError, BlockingIOError):
            return None
        self.received.append((time.monotonic(), data))
        return data

    def receive(self, until: Callable[[list[str]], bool], within: float = 30.0) -> list[str]:
        """Receive until ``until(the messages received by this call)``; those messages."""
        got: list[str] = []
        deadline = time.monotonic() + within
        while not until(got):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out; received {got}")
            message = self._next(left)
            if message is not None:
                got.append(message)
        return got

    def during(self, seconds: float) -> list[str]:
        """Everything received in the next ``seconds``."""
        got: list[str] = []
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            message = self._next(left)
            if message is not None:
                got.append(message)
        return got

    def drain(self) -> list[str]:
        """What was received and not read yet."""
        got = []
        while (message := self._next(0)) is not None:
            got.append(message)
        return got


def pings(messages: list[str]) -> int:
    return messages.count("WATCHDOG=1")


def has(line: str) -> Callable[[list[str]], bool]:
    return lambda got: any(line in m.splitlines() for m in got)


def stopped(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


@pytest.fixture(params=[("asyncio", "path"), ("trio", "abstract")], ids=lambda p: "-".join(p))
def notify(request: pytest.FixtureRequest) -> Iterator[tuple[str, NotifySocket]]:
    loop, kind = request.param
    sock = NotifySocket(abstract=kind == "abstract")
    try:
        yield loop, sock
    finally:
        sock.close()


def test_ready_after_joining_watchdog_while_its_loop_runs(
    tmp_path: Path, notify: tuple[str, NotifySocket]
) -> None:
    loop, sock = notify
    gate = tmp_path / "healthy"
    health = tmp_path / "health.sh"  # the first check passes once the gate exists
    health.write_text(f"#!/bin/sh\nwhile [ ! -e {gate} ]; do sleep 0.05; done\n")
    health.chmod(0o755)
    ran = tmp_path / "command.json"
    env = ha_env(
        tmp_path,
        HA_URL=sqlite_url(tmp_path),
        HA_ASYNC_BACKEND=loop,
        NOTIFY_SOCKET=sock.address,
        WATCHDOG_USEC=str(int(WATCHDOG * 1e6)),
    )
    argv = ["run", "/svc", "--id", "a", "--health", str(health), "--health-timeout", "60"]
    proc = popen_ha(*argv, "--", *COMMAND, str(ran), env=env, log=tmp_path / "a.log")
    try:
        # waiting for its first health check: alive (keep-alives come), not ready, not joined
        waiting = sock.receive(lambda got: pings(got) >= 3)
        assert not has("READY=1")(waiting), waiting
        assert "STATUS=out of /svc: waiting for the first health check" in "\n".join(waiting)
        status = json.loads(ha("status", "/svc", "--json", env=env).stdout)
        assert "a" not in status["contenders"]

        gate.touch()
        joined = sock.receive(has("READY=1"))
        ready = next(m for m in joined if "READY=1" in m.splitlines())
        # sent once joined, and said so: it leads (the only contender)
        assert ready.splitlines()[1].startswith("STATUS=active in /svc (epoch "), ready
        assert json.loads(ha("status", "/svc", "--json", env=env).stdout)["active"] == "a"
        assert sum(1 for _, m in sock.received if "READY=1" in m.splitlines()) == 1

        # systemd's rule: no whole WatchdogSec without a keep-alive while the loop runs
        sock.receive(lambda got: pings(got) >= 1)
        start = len(sock.received)
        sock.receive(lambda got: pings(got) >= 6)
        times = [at for at, m in sock.received[start - 1 :] if m == "WATCHDOG=1"]
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert len(gaps) >= 6 and max(gaps) < WATCHDOG, gaps

        # the supervisor stopped (not its guard, not COMMAND): not one keep-alive in a whole
        # WatchdogSec, so systemd acts
        command = json.loads(wait_until(ran.exists, "COMMAND") and ran.read_text())
        os.kill(proc.pid, signal.SIGSTOP)
        wait_until(lambda: stopped(proc.pid), "the supervisor to stop")
        sock.drain()  # sent before it stopped
        assert pings(sock.during(WATCHDOG * 1.25)) == 0

        # what systemd does then (WatchdogSignal=SIGABRT, to the main process alone under
        # KillMode=mixed, and SIGCONT): the supervisor dies with its traceback, and its
        # guard takes COMMAND's tree with it
        os.kill(proc.pid, signal.SIGABRT)
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(timeout=30) == -signal.SIGABRT
        wait_until(lambda: not alive(command["pid"]), "COMMAND to end with its supervisor")
        log = (tmp_path / "a.log").read_text()
        assert "Fatal Python error: Aborted" in log, log
        # taken by the main thread, which dumps the others while they wait (from a worker
        # thread, the dump raced the running main one and crashed: ha/supervisor/abort.py)
        current = log.partition("Current thread")[2].partition("\n\n")[0]
        assert "_run_module_as_main" in current, log
        # systemd's variables are the supervisor's: COMMAND did not inherit them
        assert not {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"} & set(command["env"])
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
        stop_procs([proc])


def test_a_standby_is_ready_too_and_a_stop_says_stopping(
    tmp_path: Path, notify: tuple[str, NotifySocket]
) -> None:
    loop, sock = notify
    env = ha_env(tmp_path, HA_URL=sqlite_url(tmp_path), HA_ASYNC_BACKEND=loop)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        a = popen_ha("run", "/svc", "--id", "a", "--", "sleep", "600", env=env, log=tmp_path / "a")
        procs.append(a)
        wait_until(lambda: "-> active" in (tmp_path / "a").read_text(), "a to lead")
        # no WATCHDOG_USEC: no keep-alives, only what changes
        env_b = dict(env, NOTIFY_SOCKET=sock.address)
        b = popen_ha(
            "run", "/svc", "--id", "b", "--", "sleep", "600", env=env_b, log=tmp_path / "b"
        )
        procs.append(b)
        assert sock.receive(has("READY=1")) == ["READY=1\nSTATUS=standby in /svc"]

        b.send_signal(signal.SIGTERM)
        assert b.wait(timeout=30) == 0
        said = sock.drain()
        assert said[0] == "STOPPING=1\nSTATUS=stopping", said
        assert "READY=1" not in "\n".join(said) and pings(said) == 0
    finally:
        stop_procs(procs)
