"""`ha run` never lets a COMMAND outlive its leadership: a frozen supervisor, a frozen guard.

Real `ha run` processes on sqlite (one file, two hosts' worth of supervisors). COMMAND is a
heartbeat writer: every 20 ms it appends ``identity epoch pid monotonic`` to one shared file.
The verdict comes from those heartbeats, not from the electors: once a COMMAND of a newer
epoch has written, no COMMAND of an older epoch writes again (CLOCK_MONOTONIC is one clock for
every process of the host).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import Supervisors, alive, ha, popen_ha, sqlite_url, wait_until

HEARTBEAT = r"""
import os, sys, time
path, ident, epoch = sys.argv[1], os.environ["HA_IDENTITY"], os.environ["HA_EPOCH"]
with open(path, "a", buffering=1) as out:
    while True:
        out.write(f"{ident} {epoch} {os.getpid()} {time.monotonic():.6f}\n")
        time.sleep(0.02)
"""


def beats(path: Path) -> list[tuple[str, int, int, float]]:
    """The heartbeats written so far: (identity, epoch, pid, monotonic time)."""
    found = []
    for line in path.read_text().splitlines() if path.exists() else ():
        fields = line.split()
        if len(fields) == 4:  # a line being written is skipped
            found.append((fields[0], int(fields[1]), int(fields[2]), float(fields[3])))
    return found


def overlaps(heartbeats: list[tuple[str, int, int, float]]) -> list[str]:
    """Heartbeats of an older epoch written after a newer epoch's first one."""
    first: dict[int, float] = {}
    for _, epoch, _, at in heartbeats:
        first[epoch] = min(at, first.get(epoch, at))
    found = []
    for ident, epoch, pid, at in heartbeats:
        for newer, began in first.items():
            if newer > epoch and at > began:
                found.append(
                    f"{ident} (epoch {epoch}, pid {pid}) beat {at - began:.3f}s after"
                    f" epoch {newer} began"
                )
    return found


def test_the_overlap_check_can_fail() -> None:
    assert overlaps([("a", 3, 10, 1.0), ("b", 5, 11, 2.0), ("a", 3, 10, 1.5)]) == []
    assert overlaps([("a", 3, 10, 1.0), ("b", 5, 11, 2.0), ("a", 3, 10, 2.5)]) != []


class Hosts(Supervisors):
    """`ha run` supervisors of /svc whose COMMAND writes heartbeats to ``beats``."""

    def __init__(self, directory: Path, session: float = 2.0, url: str | None = None) -> None:
        """``url``: another backend's; sqlite in ``directory`` by default."""
        url = url or sqlite_url(directory)
        joint = "&" if "?" in url else "?"
        super().__init__(directory, f"{url}{joint}session_timeout={session:g}")
        self.script = directory / "heartbeat.py"
        self.script.write_text(HEARTBEAT)
        self.beats = directory / "beats"

    def start(self, identity: str, *extra: str) -> subprocess.Popen[bytes]:
        argv = ["run", "/svc", "--id", identity, *extra, "--"]
        argv += [sys.executable, str(self.script), str(self.beats)]
        proc = popen_ha(*argv, env=self.env, log=self.directory / f"{identity}.log")
        self.procs[identity] = proc
        return proc

    def leader(self) -> tuple[str, int, int]:
        """(identity, epoch, pid) of the COMMAND that wrote the newest heartbeat."""
        found = beats(self.beats)
        assert found
        ident, epoch, pid, _ = found[-1]
        return ident, epoch, pid

    def a_active_b_standing_by(self) -> int:
        """Start a, then b behind it; the pid of a's COMMAND, once it beats and b stands by."""
        self.start("a")
        wait_until(lambda: beats(self.beats), "a's COMMAND")
        self.start("b")
        wait_until(lambda: "standby" in self.log("b"), "b to stand by")
        ident, _, pid = self.leader()
        assert ident == "a"
        return pid

    def log(self, identity: str) -> str:
        return (self.directory / f"{identity}.log").read_text()

    def resume_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    with Hosts(tmp_path) as h:
        try:
            yield h
        finally:
            h.resume_all()  # a stopped process ignores SIGTERM until continued


def guard_of(supervisor: int) -> int:
    """The pid of the supervisor's guard: its child running ``_guard.py``."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            if int(stat[1]) == supervisor and b"_guard.py" in cmdline:
                return int(name)
    raise AssertionError(f"no guard under {supervisor}")


def backend_url(backend: str, request: pytest.FixtureRequest) -> str | None:
    """The URL of a fresh namespace on ``backend``'s test server (None: sqlite)."""
    if backend == "sqlite":
        return None
    found: str = request.getfixturevalue(f"{backend}_backend").url()
    return found


# sqlite on both loops; each server backend on one loop (the suite's time budget: what differs
# between the loops is the supervisor, the same code on every backend)
FROZEN = [
    pytest.param("sqlite", "asyncio"),
    pytest.param("sqlite", "trio"),
    pytest.param("zookeeper", "trio", marks=pytest.mark.zookeeper),
    pytest.param("etcd", "asyncio"),
    pytest.param("kubernetes", "trio"),
]


@pytest.mark.parametrize(("backend", "loop"), FROZEN)
def test_a_frozen_supervisors_command_stops_before_the_standby_starts(
    tmp_path: Path, backend: str, loop: str, request: pytest.FixtureRequest
) -> None:
    # SIGSTOP of the active's supervisor process (not its guard, not COMMAND), frozen past its
    # session's expiry on the backend: it can no longer stop COMMAND nor renew its session; its
    # guard stops COMMAND on the deadline the supervisor last renewed, before the session runs
    # out (the backend's own clock: ZooKeeper's session, etcd's lease, the Lease's
    # renewTime + duration) and b starts its own
    with Hosts(tmp_path, url=backend_url(backend, request)) as h:
        h.env["HA_ASYNC_BACKEND"] = loop
        try:
            pid = h.a_active_b_standing_by()
            os.kill(h.procs["a"].pid, signal.SIGSTOP)
            wait_until(lambda: h.leader()[0] == "b", "b's COMMAND", within=20)
            wait_until(
                lambda: (
                    len({e for _, e, _, _ in beats(h.beats)}) == 2
                    and sum(1 for b in beats(h.beats) if b[0] == "b") > 10
                ),
                "b's heartbeats",
            )
            assert not alive(pid), "a's COMMAND runs on beside b's"
            os.kill(h.procs["a"].pid, signal.SIGCONT)
            wait_until(lambda: sum(1 for b in beats(h.beats) if b[0] == "b") > 40, "b goes on")
            assert overlaps(beats(h.beats)) == []
            assert "no renewal from the supervisor" in h.log("a")
        finally:
            h.resume_all()


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_a_supervisor_frozen_with_its_guard_still_loses_its_command(
    tmp_path: Path, loop: str
) -> None:
    # SIGSTOP of the active's supervisor and its guard (COMMAND runs on): nobody can act for
    # a but the kernel, whose timer kills the guard, and COMMAND with it, before the session
    # can run out and b start its own
    with Hosts(tmp_path) as h:
        h.env["HA_ASYNC_BACKEND"] = loop
        try:
            pid = h.a_active_b_standing_by()
            guard = guard_of(h.procs["a"].pid)
            os.kill(guard, signal.SIGSTOP)
            os.kill(h.procs["a"].pid, signal.SIGSTOP)
            wait_until(lambda: h.leader()[0] == "b", "b's COMMAND", within=20)
            wait_until(lambda: sum(1 for b in beats(h.beats) if b[0] == "b") > 10, "b's beats")
            assert not alive(pid), "a's COMMAND runs on beside b's"
            assert overlaps(beats(h.beats)) == []
            h.resume_all()  # a wakes deposed: its guard is gone, no COMMAND of its starts
            wait_until(lambda: sum(1 for b in beats(h.beats) if b[0] == "b") > 40, "b goes on")
            assert overlaps(beats(h.beats)) == []
            assert {i for i, _, _, _ in beats(h.beats)[-20:]} == {"b"}
        finally:
            h.resume_all()


def test_a_frozen_guard_still_stops_the_whole_tree(hosts: Hosts, tmp_path: Path) -> None:
    # the guard alone SIGSTOPped (COMMAND runs on): a stop must still reach every descendant
    # of COMMAND in time, daemons included, for the lead to pass on
    hosts.start("a")
    wait_until(lambda: beats(hosts.beats), "a's COMMAND")
    _, _, pid = hosts.leader()
    guard = guard_of(hosts.procs["a"].pid)
    os.kill(guard, signal.SIGSTOP)
    hosts.start("b")
    wait_until(lambda: "standby" in hosts.log("b"), "b to stand by")
    hosts.procs["a"].send_signal(signal.SIGTERM)  # a quits: stops COMMAND, then hands over
    wait_until(lambda: hosts.leader()[0] == "b", "b's COMMAND", within=20)
    assert not alive(pid)
    assert overlaps(beats(hosts.beats)) == []
    assert "did not stop it in time" not in hosts.log("a")  # woken, not killed


def test_a_takeover_is_called_fenced_only_when_a_fence_ran(hosts: Hosts) -> None:
    # no --fence: b takes over a's crash on the epoch alone; status and history say so
    hosts.start("a")
    wait_until(lambda: beats(hosts.beats), "a's COMMAND")
    hosts.start("b")
    wait_until(lambda: "standby" in hosts.log("b"), "b to stand by")
    hosts.procs["a"].kill()
    hosts.procs["a"].wait()
    wait_until(lambda: hosts.leader()[0] == "b", "b's COMMAND", within=20)

    def b_term() -> str | None:
        lines = ha("history", "/svc", env=hosts.env).stdout.splitlines()
        return lines[-1] if len(lines) == 2 else None

    line = wait_until(b_term, "b's term in the history")
    assert "took over from 'a'" in line and "fenced" not in line
    assert "fenced" not in ha("status", "/svc", env=hosts.env).stdout
