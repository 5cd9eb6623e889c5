"""`ha run` with a COMMAND that is a wrapper, and `ha failover` / duplicate ``--id`` refusals.

Real `ha` processes on the sqlite backend. The wrapper (``serve.sh``) forks the real server
and a daemon (setsid, double fork) and waits, as service scripts do. Each server process
writes ``<identity>.<role>.<pid>.proc`` (JSON: pid, parent, session, epoch, and which processes
of the *other* identities were still alive when it started) and notes SIGTERM in
``<identity>.<role>.term``: the verdict comes from the processes, not from the elector.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import Supervisors, alive, ha, popen_ha, wait_until

SERVER = r"""
import json, os, signal, sys, time
directory, role = sys.argv[1], sys.argv[2]
ident = os.environ["HA_IDENTITY"]
if role == "daemon":  # a classic daemon: it leaves the wrapper's process group and session
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
others = []
for name in os.listdir(directory):
    if name.endswith(".proc") and not name.startswith(ident + "."):
        with open(os.path.join(directory, name)) as f:
            record = json.load(f)
        if alive(record["pid"]):
            others.append(record["pid"])
def on_term(*_):
    with open(os.path.join(directory, f"{ident}.{role}.term"), "a") as f:
        f.write(f"{os.getpid()}\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
record = {
    "pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0), "role": role,
    "identity": ident, "epoch": int(os.environ["HA_EPOCH"]), "overlap": others,
    "started": time.monotonic(),  # CLOCK_MONOTONIC: one clock for every process of the host
}
tmp = os.path.join(directory, f".{ident}.{role}.tmp")
with open(tmp, "w") as f:
    json.dump(record, f)
os.replace(tmp, os.path.join(directory, f"{ident}.{role}.{os.getpid()}.proc"))
while True:
    time.sleep(0.05)
"""

WRAPPER = """#!/bin/sh
# forks the real server and a daemon, then waits: no exec, as many service scripts do
"{python}" "{dir}/server.py" "{dir}" child &
"{python}" "{dir}/server.py" "{dir}" daemon
wait
"""


class Hosts(Supervisors):
    """`ha run` supervisors whose COMMAND is the wrapper (or the one given to ``start``)."""

    stop_timeout = 20.0

    def __init__(self, directory: Path, url: str | None = None, **env: str) -> None:
        super().__init__(directory, url, **env)
        (directory / "server.py").write_text(SERVER)
        self.wrapper = directory / "serve.sh"
        self.wrapper.write_text(WRAPPER.format(python=sys.executable, dir=directory))
        self.wrapper.chmod(0o755)

    def start(self, identity: str, *command: str) -> subprocess.Popen[bytes]:
        argv = ["run", "/svc", "--id", identity, "--", *(command or [str(self.wrapper)])]
        log = self.directory / f"{identity}.{len(self.procs)}.log"
        proc = popen_ha(*argv, env=self.env, log=log)
        self.procs[identity] = proc
        return proc

    def records(self, identity: str, epoch: int | None = None) -> list[dict[str, Any]]:
        found = []
        for path in sorted(self.directory.glob(f"{identity}.*.proc")):
            record = json.loads(path.read_text())
            if epoch is None or record["epoch"] == epoch:
                found.append(record)
        return found

    def tree(self, identity: str, epoch: int) -> list[dict[str, Any]]:
        """The server and the daemon of ``identity`` at ``epoch``, once both have started."""

        def both() -> list[dict[str, Any]] | None:
            records = self.records(identity, epoch)
            return records if sorted(r["role"] for r in records) == ["child", "daemon"] else None

        found: list[dict[str, Any]] = wait_until(both, f"{identity}'s processes at {epoch}")
        return found

    def pids(self, identity: str, epoch: int) -> list[int]:
        """Every process of the tree: the wrapper (the server's parent), server, daemon."""
        records = self.tree(identity, epoch)
        child = next(r for r in records if r["role"] == "child")
        return [child["ppid"], *(r["pid"] for r in records)]

    def active(self, identity: str, above: int = 0) -> int:
        """Wait for ``identity`` to be active with an epoch above ``above``; return the epoch
        (its token: its queue node's creation order, so not known in advance)."""

        def check() -> int | None:
            doc = self.status()
            states = {m["identity"]: m["state"] for m in doc["members"]}
            ok = (doc["active"], states.get(identity)) == (identity, "active")
            return doc["epoch"] if ok and doc["epoch"] > above else None

        found: int = wait_until(check, f"{identity} active at an epoch above {above}")
        return found

    def standby(self, identity: str) -> None:
        wait_until(
            lambda: any(
                m["identity"] == identity and m["state"] == "standby"
                for m in self.status()["members"]
            ),
            f"{identity} standby",
        )

    def stop_all(self) -> None:
        super().stop_all()
        for path in self.directory.glob("*.proc"):  # nothing may outlive the test, even failed
            pid = json.loads(path.read_text())["pid"]
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    with Hosts(tmp_path) as h:
        yield h


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_sigkill_of_the_supervisor_kills_the_whole_tree_before_the_standby_starts(
    tmp_path: Path, loop: str
) -> None:
    with Hosts(tmp_path, HA_ASYNC_BACKEND=loop) as h:
        h.start("a")
        epoch_a = h.active("a")
        a_pids = h.pids("a", epoch_a)
        h.start("b")
        h.standby("b")
        child, daemon = h.tree("a", epoch_a)
        assert daemon["sid"] != child["sid"]  # it left the wrapper's group and session
        assert all(alive(pid) for pid in a_pids)

        h.procs["a"].kill()  # SIGKILL: the supervisor can do nothing
        killed = time.monotonic()
        wait_until(lambda: not any(alive(pid) for pid in a_pids), "a's tree to die", within=5)
        assert time.monotonic() - killed < 2.0, "a's tree outlived its supervisor too long"
        epoch_b = h.active("b", above=epoch_a)
        b_records = h.tree("b", epoch_b)
        # no overlap: when each of b's processes started, none of a's was alive any more
        assert [r["overlap"] for r in b_records] == [[], []]
        assert [r["identity"] for r in h.records("a")] == ["a", "a"]  # a's ran once


def test_failover_and_quit_stop_the_whole_tree(hosts: Hosts, tmp_path: Path) -> None:
    hosts.start("a")
    epoch_a = hosts.active("a")
    a_pids = hosts.pids("a", epoch_a)
    hosts.start("b")
    hosts.standby("b")
    result = ha("failover", "/svc", "--to", "b", env=hosts.env)
    assert result.returncode == 0, result.stderr
    # a stopped its whole tree before b could start: the daemon too, and gracefully (SIGTERM)
    assert not any(alive(pid) for pid in a_pids)
    term = tmp_path / "a.daemon.term"
    assert term.exists() and term.read_text().split() == [str(a_pids[-1])]
    epoch_b = hosts.active("b", above=epoch_a)
    b_pids = hosts.pids("b", epoch_b)
    assert [r["overlap"] for r in hosts.tree("b", epoch_b)] == [[], []]

    hosts.procs["b"].send_signal(signal.SIGTERM)  # quit: `ha run` returns after the tree died
    assert hosts.procs["b"].wait(timeout=20) == 0
    assert [pid for pid in b_pids if alive(pid)] == []


def test_a_duplicate_id_is_refused_and_the_running_one_is_untouched(
    hosts: Hosts, tmp_path: Path
) -> None:
    first = hosts.start("a")
    epoch_a = hosts.active("a")
    a_pids = hosts.pids("a", epoch_a)
    second = ha("run", "/svc", "--id", "a", "--", str(hosts.wrapper), env=hosts.env, timeout=20)
    assert second.returncode == 1
    lines = second.stderr.strip().splitlines()
    assert "another supervisor with --id 'a' is running in /svc" in lines[-1], second.stderr
    assert lines[-1].startswith("ha: error: ")
    assert first.poll() is None and all(alive(pid) for pid in a_pids)
    doc = hosts.status()
    assert doc["active"] == "a" and doc["epoch"] == epoch_a
    assert [(m["identity"], m["pid"], m["state"]) for m in doc["members"]] == [
        ("a", first.pid, "active")
    ]
    assert len(hosts.records("a")) == 2  # the duplicate never ran its COMMAND


def test_failover_without_a_standby_is_refused_unless_forced(hosts: Hosts, tmp_path: Path) -> None:
    hosts.start("a")
    epoch_a = hosts.active("a")
    a_pids = hosts.pids("a", epoch_a)
    started = time.monotonic()
    refused = ha("failover", "/svc", env=hosts.env)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        "ha: error: no standby can take over /svc (members: a active): refusing, as it would"
        " only stop the service for the cooling period (force it)"
    ]
    assert time.monotonic() - started < 4.0  # refused up front, not after the cooling period
    assert all(alive(pid) for pid in a_pids) and not (tmp_path / "a.child.term").exists()
    assert hosts.status()["epoch"] == epoch_a

    forced = ha("failover", "/svc", "--force", "--cooldown", "0.5", env=hosts.env)
    assert forced.returncode == 1 and "'a' became active again" in forced.stderr
    assert (tmp_path / "a.child.term").exists()  # it did cede


@pytest.mark.parametrize("command", ["exit 3", "sleep 0.4; exit 3"])
def test_failover_to_a_standby_whose_command_fails_reports_failure(
    hosts: Hosts, command: str
) -> None:
    hosts.start("a")
    hosts.active("a")
    hosts.start("b", "sh", "-c", command)
    hosts.standby("b")
    result = ha("failover", "/svc", "--to", "b", env=hosts.env)
    assert result.returncode == 1, result.stdout
    assert result.stderr.startswith(
        "ha: error: couldn't make 'b' active: sh exited (exit status 3)"
    )
    assert len(result.stderr.strip().splitlines()) == 1
