"""`ha run` while the election is paused (`ha pause`): COMMAND is left alone (paused.py).

Two supervisors in-process on sqlite and a real ZooKeeper, under asyncio and trio, with real
child processes; the pause, the status and the resume go through a third client, as an
operator's `ha pause`, `ha status` and `ha resume` would.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from ha import admin
from ha.admin.status import ElectionStatus
from ha.supervisor import Settings, Supervisor
from tests.support.members import alive

pytestmark = pytest.mark.anyio

# COMMAND: note its pid, then run until the file "exit" is there, and exit 3
CHILD = r"""
import os, sys, time
directory = sys.argv[1]
with open(os.path.join(directory, os.environ["HA_IDENTITY"] + ".runs"), "a") as f:
    f.write(f"{os.getpid()}\n")
while not os.path.exists(os.path.join(directory, "exit")):
    time.sleep(0.02)
sys.exit(3)
"""


def runs(directory: Path, identity: str) -> list[int]:
    path = directory / f"{identity}.runs"
    return [int(pid) for pid in path.read_text().split()] if path.exists() else []


class Hosts:
    def __init__(self, backend: Any, directory: Path, tg: Any, admin_driver: Any) -> None:
        self.backend, self.directory, self.tg, self.admin = backend, directory, tg, admin_driver
        self.started: list[Supervisor] = []

    def start(self, identity: str, **options: Any) -> Supervisor:
        # Long enough that a loaded machine does not depose the active (its local deadline
        # stops COMMAND after two thirds of it without contact): these tests are about the pause.
        driver = self.backend.driver(session_timeout=2.0)
        command = (sys.executable, "-c", CHILD, str(self.directory))
        supervisor = Supervisor(driver, Settings("/svc", identity, command, grace=0.2, **options))

        async def run() -> None:
            async with driver:
                await supervisor.run()

        self.tg.start_soon(run)
        self.started.append(supervisor)
        return supervisor

    async def status(self) -> ElectionStatus:
        return await admin.election_status(self.admin, "/svc")

    async def until(self, check: Callable[[ElectionStatus], bool], what: str) -> ElectionStatus:
        """Read the status until ``check`` holds (a hang fails the test, not a slow run)."""
        with anyio.move_on_after(15.0):
            while True:
                status = await self.status()
                if check(status):
                    return status
                await anyio.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}: {status}")


@asynccontextmanager
async def hosts(request: pytest.FixtureRequest, name: str, directory: Path) -> AsyncIterator[Hosts]:
    backend = request.getfixturevalue(f"{name}_backend")
    async with backend.driver(session_timeout=2.0) as admin_driver:
        async with anyio.create_task_group() as tg:
            h = Hosts(backend, directory, tg, admin_driver)
            try:
                yield h
            finally:
                for supervisor in h.started:
                    supervisor.stop()


def note(status: ElectionStatus, identity: bytes) -> str:
    return next((m.note for m in status.members if m.identity == identity), "")


def leads(identity: bytes, other: bytes) -> Callable[[ElectionStatus], bool]:
    """``identity`` active, ``other`` a standby behind it (both members say so)."""

    def check(s: ElectionStatus) -> bool:
        states = {m.identity: m.state for m in s.members}
        return s.active == identity and states == {identity: "active", other: "standby"}

    return check


@pytest.mark.parametrize("name", ["sqlite", "zookeeper"])
async def test_paused_a_failing_health_check_leaves_command_and_lead_then_resume_cedes(
    request: pytest.FixtureRequest, name: str, tmp_path: Path
) -> None:
    healthy, checks = tmp_path / "healthy", tmp_path / "checks"
    healthy.touch()
    check = ("sh", "-c", f'echo >> "{checks}"; test -f "{healthy}"')
    async with hosts(request, name, tmp_path) as h:
        a = h.start("a", health=check, health_interval=0.05)
        await h.until(lambda s: s.active == b"a", "a active")
        h.start("b")
        before = await h.until(leads(b"a", b"b"), "b standby behind a")
        await admin.pause_election(h.admin, "/svc")
        healthy.unlink()
        seen = checks.read_text().count("\n")
        while checks.read_text().count("\n") < seen + 5:  # failed at least 4 times since
            await anyio.sleep(0.05)
        status = await h.status()
        assert leads(b"a", b"b")(status) and status.epoch == before.epoch
        [pid] = runs(tmp_path, "a")
        assert alive(pid) and a.state == "active" and a.child is not None
        await admin.resume_election(h.admin, "/svc")
        await h.until(lambda s: s.active == b"b", "b active after the resume")
        assert not alive(pid) and runs(tmp_path, "a") == [pid]  # ceded, not restarted


@pytest.mark.parametrize("name", ["sqlite", "zookeeper"])
async def test_paused_a_command_that_exits_stays_down_until_resumed(
    request: pytest.FixtureRequest, name: str, tmp_path: Path
) -> None:
    async with hosts(request, name, tmp_path) as h:
        h.start("a", max_restarts=0, started=0.0)  # unpaused, an exit cedes at once
        await h.until(lambda s: s.active == b"a", "a active")
        h.start("b")
        before = await h.until(leads(b"a", b"b"), "b standby behind a")
        await admin.pause_election(h.admin, "/svc")
        (tmp_path / "exit").touch()
        status = await h.until(lambda s: "paused" in note(s, b"a"), "a's note: paused")
        assert note(status, b"a").startswith(f"{sys.executable} exited (exit status 3)")
        assert leads(b"a", b"b")(status) and status.epoch == before.epoch
        [pid] = runs(tmp_path, "a")
        assert not alive(pid)  # down, not restarted
        os.unlink(tmp_path / "exit")
        await admin.resume_election(h.admin, "/svc")
        await h.until(lambda s: s.active == b"b", "b active after the resume")
        assert runs(tmp_path, "a") == [pid]  # --on-exit applied: ceded, no restart
