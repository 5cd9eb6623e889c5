"""`ha run` on one sqlite file from processes in different time namespaces.

A time namespace (``unshare --time``; CRIU and ``podman container restore`` give a restored
container one) shifts CLOCK_MONOTONIC by a constant offset. The file's leases must still be
judged on one clock: a newcomer whose clock is ahead must not find the active's lease run out,
and a standby whose clock is behind must still see a frozen active's lease run out.

Each supervisor's COMMAND appends ``<identity> <epoch> <pid>`` lines to one shared file, one
``write(2)`` each with ``O_APPEND``: the file's order is the order in which they ran, whatever
their clocks say. The test judges from that file and from ``ha status``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import Supervisors, sqlite_url, wait_until
from tests.support.namespaces import host_monotonic, refused, unshare

AHEAD = 100_000  # seconds: the offset of the namespace (as `unshare --monotonic 100000`)
SESSION = 2.0  # the lease of every supervisor (shorter ones flap on a loaded machine: item 4)
LONG_SESSION = 60.0  # a lease that cannot run out while the test looks

BEATS = r"""
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
line = f"{os.environ['HA_IDENTITY']} {os.environ['HA_EPOCH']} {os.getpid()}\n".encode()
while True:
    os.write(fd, line)
    time.sleep(0.02)
"""


TIME = ("--time", f"--monotonic={AHEAD}")
PIDS = ("--pid", "--mount-proc")  # a PID namespace of its own, as a container's

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(refused(*TIME) is not None, reason=str(refused(*TIME))),
]


def time_namespace(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/time").st_ino


def pid_namespace(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/pid").st_ino


class Hosts(Supervisors):
    """`ha run` supervisors whose COMMAND beats into ``beats``; ``pids`` are the supervisors'
    own pids (in a namespace, the child of ``unshare``)."""

    def __init__(self, directory: Path, loop: str, session: float = SESSION) -> None:
        super().__init__(
            directory, sqlite_url(directory) + f"?session_timeout={session}", HA_ASYNC_BACKEND=loop
        )
        self.script = directory / "beats.py"
        self.script.write_text(BEATS)
        self.beats_file = directory / "beats"
        self.pids: dict[str, int] = {}

    def start(self, identity: str, *namespaces: str) -> int:
        """Start a supervisor, in new namespaces if ``namespaces`` (unshare's flags)."""
        argv = [sys.executable, "-m", "ha", "run", "/svc", "--id", identity, "--"]
        argv += [sys.executable, str(self.script), str(self.beats_file)]
        if namespaces:
            argv = unshare(*namespaces) + argv
        with open(self.directory / f"{identity}.log", "wb") as log:
            proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env
            )
        self.procs[identity] = proc
        pid = proc.pid
        if namespaces:
            children = f"/proc/{proc.pid}/task/{proc.pid}/children"
            pid = int(wait_until(lambda: Path(children).read_text().strip(), "unshare's child"))
            # the test tests what it says: the supervisor's clock is not ours
            assert time_namespace(pid) != time_namespace(os.getpid())
        self.pids[identity] = pid
        return pid

    def signal(self, identity: str, signum: int) -> None:
        os.kill(self.pids[identity], signum)

    def beats(self) -> list[tuple[str, int, int]]:
        """(identity, epoch, pid) of every beat so far, in the order they were written."""
        try:
            text = self.beats_file.read_text()
        except FileNotFoundError:
            return []
        lines = [line.split() for line in text.splitlines(keepends=True) if line.endswith("\n")]
        return [(who, int(epoch), int(pid)) for who, epoch, pid in lines]

    def log(self, identity: str) -> str:
        return (self.directory / f"{identity}.log").read_text()

    def states(self) -> dict[str, Any]:
        doc = self.status()
        return {m["identity"]: m["state"] for m in doc["members"]} | {
            "active": doc["active"],
            "epoch": doc["epoch"],
        }

    def stop_all(self) -> None:
        """SIGTERM each supervisor itself (unshare ignores it), resumed first if stopped."""
        for signum in (signal.SIGCONT, signal.SIGTERM):
            for identity, proc in self.procs.items():
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(self.pids[identity], signum)
        super().stop_all()


@pytest.fixture(params=["asyncio", "trio"])
def hosts(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Hosts]:
    with Hosts(tmp_path, request.param) as h:
        yield h


def first_beat(hosts: Hosts, identity: str) -> tuple[str, int, int]:
    found: tuple[str, int, int] = wait_until(
        lambda: next((b for b in hosts.beats() if b[0] == identity), None),
        f"{identity}'s COMMAND to beat",
    )
    return found


def test_a_newcomer_whose_clock_is_ahead_does_not_take_over(hosts: Hosts) -> None:
    """Regression (issue 26, item 5): the newcomer's first transaction expired the active's
    session (its lease ran out 100,000 s ago by the newcomer's clock) and it took over while
    the active's COMMAND still ran."""
    hosts.start("a")
    _, epoch, _ = first_beat(hosts, "a")
    hosts.start("b", *TIME)
    wait_until(lambda: hosts.states().get("b"), "b to join")
    # a renews its lease and b polls the file many times over: b stays a standby
    time.sleep(3 * SESSION)
    assert hosts.states() == {"a": "active", "b": "standby", "active": "a", "epoch": epoch}
    assert {who for who, _, _ in hosts.beats()} == {"a"}, "b's COMMAND ran beside a's"

    # and b leads once a hands over: a's COMMAND stops before b's starts
    hosts.signal("a", signal.SIGTERM)
    first_beat(hosts, "b")
    beats = [who for who, _, _ in hosts.beats()]
    assert "a" not in beats[beats.index("b") :], "a's COMMAND ran after b's started"
    assert hosts.procs["a"].wait(timeout=20) == 0


def test_a_standby_whose_clock_is_behind_sees_a_frozen_active_expire(hosts: Hosts) -> None:
    """Regression (issue 26, item 5): by the clock of a standby 100,000 s behind the active,
    the active's lease never ran out, so a frozen active kept the lead for good; meanwhile
    the active, by its clock, expired the standby's session at each of its polls."""
    hosts.start("a", *TIME)
    _, epoch, _ = first_beat(hosts, "a")
    hosts.start("b")
    wait_until(lambda: hosts.states().get("b"), "b to join")
    time.sleep(3 * SESSION)
    assert hosts.states() == {"a": "active", "b": "standby", "active": "a", "epoch": epoch}
    assert "expired" not in hosts.log("b")  # its session lived on

    # SIGSTOP: a keeps its kernel lock, so only its lease running out can tell b; (a's
    # COMMAND is not a's to stop while a is frozen: issue 26, item 2)
    hosts.signal("a", signal.SIGSTOP)
    _, b_epoch, _ = first_beat(hosts, "b")
    assert b_epoch > epoch


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_the_kernel_lock_tells_a_death_across_pid_and_time_namespaces(
    tmp_path: Path, loop: str
) -> None:
    """A standby in time and PID namespaces of its own (as a container's) sees the active's
    death from its free lock file: it leads while the active's lease still runs."""
    if refused(*TIME, *PIDS):
        pytest.skip(str(refused(*TIME, *PIDS)))
    with Hosts(tmp_path, loop, session=LONG_SESSION) as hosts:
        a = hosts.start("a")
        first_beat(hosts, "a")
        b = hosts.start("b", *TIME, *PIDS)
        assert pid_namespace(b) != pid_namespace(os.getpid())
        wait_until(lambda: hosts.states().get("b") == "standby", "b to join")

        with sqlite3.connect(tmp_path / "ha.db") as conn:
            (lease_end,) = conn.execute(
                "SELECT expires_at FROM sessions WHERE pid = ?", (a,)
            ).fetchone()
        hosts.signal("a", signal.SIGKILL)
        first_beat(hosts, "b")
        assert host_monotonic() < lease_end, "b waited for a's lease, not its lock"
