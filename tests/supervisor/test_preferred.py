"""A preferred leader through the real API: ``ha run`` supervisors (``ha.supervisor``)
in-process with real COMMAND processes, on memory, sqlite and a real ZooKeeper, under asyncio
and trio.

The story: the preferred host joins behind another and gets the lead handed over gracefully
once settled; it crashes, the other takes over and fences it; it comes back and gets the lead
back, gracefully again. The only fencing is the crash's: the hand back never skips one.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from ha import admin
from ha.supervisor import Settings, Supervisor
from tests.support.members import CHILD, alive, child_pid, wait_until
from tests.support.members import Member as Host

pytestmark = pytest.mark.anyio

FENCE = "import os, sys; open(sys.argv[1], 'a').write(os.environ['HA_OLD_IDENTITY'] + '\\n')"


class Hosts:
    def __init__(self, backend: Any, directory: Path, tg: anyio.abc.TaskGroup) -> None:
        self.backend, self.directory, self.tg = backend, directory, tg
        self.fenced = directory / "fenced"
        self.started: list[Host] = []

    async def start(self, identity: str, **options: Any) -> Host:
        driver = self.backend.driver(session_timeout=0.6)
        fence = (sys.executable, "-c", FENCE, str(self.fenced))
        command = (sys.executable, "-c", CHILD, str(self.directory))
        settings = Settings("/svc", identity, command, grace=0.2, fence=fence, **options)
        supervisor = Supervisor(driver, settings)
        scope = anyio.CancelScope()

        async def run() -> None:
            async with driver:
                with scope:
                    await supervisor.run()

        self.tg.start_soon(run)
        host = Host(supervisor, driver, scope)
        self.started.append(host)
        return host

    def fences(self) -> list[str]:
        return self.fenced.read_text().split() if self.fenced.exists() else []

    def epoch(self, identity: str) -> int:
        """HA_EPOCH of the identity's COMMAND as last started."""
        return int((self.directory / f"{identity}.pid").read_text().split()[1])


@asynccontextmanager
async def hosts(backend: Any, directory: Path) -> AsyncIterator[Hosts]:
    async with anyio.create_task_group() as tg:
        h = Hosts(backend, directory, tg)
        try:
            yield h
        finally:
            for host in h.started:
                host.supervisor.stop()


async def active(host: Host, directory: Path, identity: str) -> None:
    def running() -> bool:
        pid = child_pid(directory, identity)
        return host.state == "active" and host.supervisor.child is not None and pid is not None

    await wait_until(running, f"{identity} active, its COMMAND running")


@pytest.mark.parametrize("name", ["memory", "sqlite", "zookeeper"])
async def test_the_preferred_host_takes_the_lead_back_after_a_failover(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    backend = request.getfixturevalue(f"{name}_backend")
    async with hosts(backend, tmp_path) as h:
        other = await h.start("other", settle=0.2)  # the active's settle time counts
        await active(other, tmp_path, "other")
        first = h.epoch("other")
        pref = await h.start("pref", priority=10, settle=0.2)
        # it joins behind the active; once settled, the active hands it the lead gracefully
        await active(pref, tmp_path, "pref")
        assert (tmp_path / "other.term").exists()  # other's COMMAND was stopped by SIGTERM
        assert h.epoch("pref") > first
        await wait_until(lambda: other.state == "standby", "other to join again behind pref")
        status = await admin.election_status(pref.driver, "/svc")
        assert [(c.identity, c.priority) for c in status.contenders] == [
            (b"pref", 10),
            (b"other", 0),
        ]
        assert h.fences() == []  # nobody needed fencing so far

        # a failover: the preferred host crashes; the other takes over, fencing it first
        pid = child_pid(tmp_path, "pref")
        assert pid is not None
        (tmp_path / "pref.pid").unlink()
        await pref.crash()
        await active(other, tmp_path, "other")
        assert not alive(pid)
        assert h.fences() == ["pref"]
        taken_over = h.epoch("other")

        # it comes back: once settled, it gets the lead back, and that fences nobody
        back = await h.start("pref", priority=10, settle=0.2)
        await active(back, tmp_path, "pref")
        assert h.epoch("pref") > taken_over
        assert h.fences() == ["pref"]
        status = await admin.election_status(back.driver, "/svc")
        assert status.active == b"pref" and not status.leftovers
