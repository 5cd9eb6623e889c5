"""`ha pause` with a graceful failover pending, as real `ha run` processes on sqlite.

a leads, b and c stand by behind it; `ha failover --to c` waits for b to step aside, but b's
supervisor is frozen (SIGSTOP). `ha pause` then clears the request (in the transaction that
writes the pause) and says so: when b runs again nothing moves, a's COMMAND runs on, before and
after `ha resume`. On 55177d0 the pause left the request pending: b stepped aside, a ceded to c,
and c, first in a paused queue, waited: no COMMAND ran until `ha resume`.

b's health check appends a line to a file on each run: that is how the test knows b has been
awake for a while (its loop runs), without reading a clock.
"""

from __future__ import annotations

import shlex
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import Hosts, alive, ha, one_error_line, sqlite_url, wait_until

# Long enough that b's session outlives its freeze (two `ha` commands), so b is still in the
# queue ahead of c when it wakes.
SESSION = 10


def _queue(doc: dict[str, Any]) -> list[str]:
    return [c["identity"] for c in doc["contenders"]]


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_a_pause_clears_a_pending_failover_and_the_active_stays(tmp_path: Path, loop: str) -> None:
    checks = tmp_path / "b.checks"
    health = shlex.join(["sh", "-c", f'echo >> "{checks}"'])

    def awake(more: int) -> None:
        """Wait until b's health check has run ``more`` times from now."""
        seen = len(checks.read_text().splitlines())
        wait_until(lambda: len(checks.read_text().splitlines()) >= seen + more, "b's checks")

    url = f"{sqlite_url(tmp_path)}?session_timeout={SESSION}"
    with Hosts(tmp_path, url, HA_ASYNC_BACKEND=loop) as hosts:
        hosts.start("a")
        hosts.settled()
        hosts.start("b", "--health", health, "--health-interval", "0.05")
        hosts.settled()
        hosts.start("c")
        doc = hosts.settled()
        epoch, a_child = doc["epoch"], hosts.child("a")
        assert doc["active"] == "a" and _queue(doc) == ["a", "b", "c"] and a_child is not None

        hosts.procs["b"].send_signal(signal.SIGSTOP)
        try:
            asked = ha("failover", "/svc", "--to", "c", "--no-wait", env=hosts.env)
            assert asked.returncode == 0, asked.stderr
            assert hosts.status()["failover_pending"]  # a waits for b to step aside
            paused = ha("pause", "/svc", env=hosts.env)
        finally:
            hosts.procs["b"].send_signal(signal.SIGCONT)
        assert paused.returncode == 0, paused.stderr

        awake(20)  # b has looked at the election (on 55177d0 it stepped aside, a ceded)
        doc = hosts.status()
        assert doc["active"] == "a" and doc["epoch"] == epoch, hosts.log("a")
        assert hosts.child("a") == a_child and alive(a_child[0])
        assert "ceding" not in hosts.log("a") and "behind it" not in hosts.log("b")
        assert _queue(doc) == ["a", "b", "c"] and not doc["failover_pending"]
        assert "cleared the pending failover to 'c'" in paused.stdout
        assert "'a' stays active" in paused.stdout

        # the request is gone, not held back: after the resume nothing moves either
        resumed = ha("resume", "/svc", env=hosts.env)
        assert resumed.returncode == 0, resumed.stderr
        awake(20)
        doc = hosts.status()
        assert doc["active"] == "a" and doc["epoch"] == epoch and _queue(doc) == ["a", "b", "c"]
        assert hosts.child("a") == a_child and alive(a_child[0])

        # while paused, `ha failover` is refused in one line
        assert ha("pause", "/svc", env=hosts.env).returncode == 0
        refused = one_error_line(ha("failover", "/svc", "--to", "c", env=hosts.env))
        assert "/svc is paused: `ha resume /svc` first" in refused
