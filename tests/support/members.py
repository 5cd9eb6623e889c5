"""`ha run`'s supervisor in-process: its child, the member it publishes, and waits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ha.drivers.memory import MemoryDriver
from ha.supervisor import Supervisor
from ha.testing import faults

CHILD = r"""
import os, signal, sys, time
directory, ident = sys.argv[1], os.environ["HA_IDENTITY"]
if os.environ.get("CHILD_EXIT"):
    sys.exit(int(os.environ["CHILD_EXIT"]))
def on_term(*_):
    with open(os.path.join(directory, ident + ".term"), "a") as f:
        f.write(f"{os.getpid()}\n")
    if not os.environ.get("CHILD_IGNORE_TERM"):
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
tmp = os.path.join(directory, ident + ".pid.tmp")
with open(tmp, "w") as f:
    f.write(f"{os.getpid()} {os.environ['HA_EPOCH']}")
os.replace(tmp, os.path.join(directory, ident + ".pid"))
while True:
    time.sleep(0.05)
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def wait_until(check: Callable[[], Any], what: str) -> Any:
    """Poll ``check`` until truthy (a generous bound: a hang fails the test, not a slow run)."""
    with anyio.move_on_after(15.0):
        while True:
            found = check()
            if found:
                return found
            await anyio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def child_pid(directory: Path, identity: str) -> int | None:
    try:
        return int((directory / f"{identity}.pid").read_text().split()[0])
    except FileNotFoundError:
        return None


@dataclass
class Member:
    supervisor: Supervisor
    driver: MemoryDriver
    scope: anyio.CancelScope

    @property
    def state(self) -> str:
        return self.supervisor.state

    async def crash(self) -> None:
        """Die without a goodbye: the session stays until the backend times it out."""
        await faults(self.driver).crash()
        self.scope.cancel()
