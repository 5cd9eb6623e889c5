"""`ha run --http` under a flood of idle connections, with a low open-file limit (as `ulimit -n`):
the endpoint keeps answering and the supervisor stays active, its COMMAND running. Real
processes on sqlite, under asyncio and trio."""

from __future__ import annotations

import json
import re
import resource
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import Supervisors, alive, wait_until
from tests.support.http import http_get

NOFILE = 256  # the supervisor's open-file limit; the flood is half as many again


def ask(port: int, path: str) -> tuple[int | None, bytes]:
    """(status, body), or (None, the error) when the endpoint cannot be reached."""
    try:
        return http_get(port, path)
    except OSError as exc:  # refused, reset: URLError is one
        return None, repr(exc).encode()


@pytest.mark.parametrize("async_backend", ["asyncio", "trio"])
def test_idle_connections_past_the_open_file_limit_leave_the_active_running(
    tmp_path: Path, async_backend: str
) -> None:
    def low_nofile() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))

    log = tmp_path / "a.log"
    argv = ["run", "/svc", "--id", "a", "--http", "127.0.0.1:0", "--", "sleep", "600"]
    with Supervisors(tmp_path, HA_ASYNC_BACKEND=async_backend) as hosts, open(log, "wb") as out:
        a = hosts.procs["a"] = subprocess.Popen(
            [sys.executable, "-m", "ha", *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=hosts.env,
            preexec_fn=low_nofile,
        )
        found = wait_until(
            lambda: re.search(r"started sleep \(pid (\d+), epoch (\d+)\)", log.read_text()),
            "a's COMMAND to start",
        )
        command, epoch = int(found.group(1)), int(found.group(2))
        port = int(re.findall(r"http on 127\.0\.0\.1:(\d+)", log.read_text())[0])

        flood: list[socket.socket] = []
        try:
            for _ in range(NOFILE * 3 // 2):
                try:
                    flood.append(socket.create_connection(("127.0.0.1", port), timeout=10))
                except OSError:  # refused or reset: the endpoint, or its process, is gone
                    break
            assert len(flood) == NOFILE * 3 // 2, f"gone after {len(flood)}:\n{log.read_text()}"
            # answered while every one of them is held open
            status, body = ask(port, "/healthz")
            assert status == 200, f"{body!r}\n{log.read_text()}"
            assert json.loads(body)["state"] == "active"
        finally:
            for sock in flood:
                sock.close()
        assert a.poll() is None, log.read_text()
        assert alive(command)
        doc = hosts.status()
        assert (doc["active"], doc["epoch"]) == ("a", epoch)
        assert ask(port, "/readyz") == (200, b"active\n")
        assert "Too many open files" not in log.read_text()
