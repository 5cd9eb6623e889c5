"""The harness's side of the line protocol: one election's contender processes, and its rounds.

``Election`` keeps ``size`` processes of one kind on one election path, reads their lines
(``protocol.py``) on one thread each, and runs a graceful or a crash round: it measures, then
replaces the old leader's process with a fresh one and waits until the election has settled
again, so that the next measurement (of any kind) starts from a quiet machine.
"""

from __future__ import annotations

import itertools
import os
import queue
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from observer import Observer, Queue

HERE = Path(__file__).resolve().parent
SETTLE_TIMEOUT = 60.0
QUIET = 0.1  # seconds left idle before a measurement: the last joiner's traffic is over


@dataclass
class Contender:
    name: str
    process: subprocess.Popen[str]
    joined: bool = False


@dataclass
class Election:
    """``size`` contender processes of one kind on one election path."""

    command: list[str]
    hosts: str
    session_timeout: float
    log: Path
    observer: Observer
    queues: tuple[Queue, ...]
    env: dict[str, str] = field(default_factory=dict)
    size: int = 3
    path: str = field(default_factory=lambda: f"/bench/{uuid.uuid4().hex[:10]}")
    contenders: dict[str, Contender] = field(default_factory=dict)
    lines: queue.Queue[tuple[str, str, int]] = field(default_factory=queue.Queue)
    names: itertools.count[int] = field(default_factory=itertools.count)
    leader: str | None = None
    leaving: str | None = None  # the old leader of the round under way: its exit is expected
    watched: set[str] = field(default_factory=set)  # the queues a crash round dated "seen" on

    def start(self) -> None:
        for _ in range(self.size):
            self.spawn()
        self.settle()

    def spawn(self) -> None:
        name = f"c{next(self.names)}"
        options = ["--hosts", self.hosts, "--path", self.path, "--id", name]
        process = subprocess.Popen(
            [*self.command, *options, "--session-timeout", str(self.session_timeout)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log.open("a"),
            text=True,
            cwd=HERE,
            env={**os.environ, **self.env},
        )
        self.contenders[name] = Contender(name, process)
        threading.Thread(target=self._read, args=(name, process), daemon=True).start()

    def _read(self, name: str, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            word, _, stamp = line.strip().partition(" ")
            if stamp.isdigit():
                self.lines.put((name, word, int(stamp)))
        self.lines.put((name, "EXITED", time.monotonic_ns()))

    def next_line(self, timeout: float = SETTLE_TIMEOUT) -> tuple[str, str, int]:
        try:
            name, word, stamp = self.lines.get(timeout=timeout)
        except queue.Empty:
            tail = " | ".join(self.log.read_text(errors="replace").splitlines()[-5:])
            raise RuntimeError(
                f"no contender said anything for {timeout} s; stderr: {tail}"
            ) from None
        if word == "JOINED" and name in self.contenders:
            self.contenders[name].joined = True
        elif word == "LEADER":
            self.leader = name
        elif word == "EXITED" and name in self.contenders and name != self.leaving:
            tail = " | ".join(self.log.read_text(errors="replace").splitlines()[-5:])
            raise RuntimeError(f"contender {name} exited unasked; stderr: {tail}")
        return name, word, stamp

    def settle(self) -> None:
        """Until every contender has joined, one leads, and the queue holds the expected nodes."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while not (
            self.leader in self.contenders and all(c.joined for c in self.contenders.values())
        ):
            self.next_line(max(0.01, deadline - time.monotonic()))
        while self.queues and not self._queue_full():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the queue of {self.path} did not fill in {SETTLE_TIMEOUT} s")
            time.sleep(0.02)
        if not self.queues:
            time.sleep(0.2)  # no queue to look at: give the newest contender's node time to land
        time.sleep(QUIET)

    def _queue_full(self) -> bool:
        found = self.observer.queue_nodes(self.path, self.queues)
        if found is None:
            return False
        where, nodes = found
        return len(nodes) == (self.size if where.per_contender else 1)

    def replace(self, name: str) -> None:
        contender = self.contenders.pop(name)
        contender.process.wait(timeout=30)
        if self.leader == name:
            self.leader = None
        self.spawn()
        self.settle()

    def _tell_release(self, name: str) -> None:
        stdin = self.contenders[name].process.stdin
        assert stdin is not None
        stdin.write("release\n")
        stdin.flush()

    def graceful_round(self) -> float:
        """Milliseconds from the leader's ``RELEASING`` to the next one's ``LEADER``."""
        old = self.leaving = self.leader
        assert old is not None
        self._tell_release(old)
        released = elected = None
        while released is None or elected is None:
            name, word, stamp = self.next_line()
            if word == "RELEASING" and name == old:
                released = stamp
            elif word == "LEADER" and name != old:
                elected = stamp
        self.replace(old)
        return (elected - released) / 1e6

    def crash_round(self) -> tuple[float, float | None]:
        """Milliseconds from SIGKILL to the next ``LEADER``, and from the observer seeing the
        dead session's node go to that ``LEADER`` (``None`` if the kind has no known queue)."""
        old = self.leaving = self.leader
        assert old is not None
        found = self.observer.queue_nodes(self.path, self.queues) if self.queues else None
        deletions = None
        if found:
            deletions = self.observer.watch(found[1])
            where = f"PATH/{found[0].directory}".rstrip("/")
            self.watched.add(
                f"{where}/*" if found[0].per_contender else found[1][0].replace(self.path, "PATH")
            )
        killed = time.monotonic_ns()
        os.kill(self.contenders[old].process.pid, signal.SIGKILL)
        while True:
            name, word, stamp = self.next_line()
            if word == "LEADER" and name != old:
                break
        seen = None
        if deletions is not None:
            deletions.done.wait(1.0)  # the observer's notification may come a little later
            if deletions.first is not None:
                seen = (stamp - deletions.first) / 1e6
        self.replace(old)
        return (stamp - killed) / 1e6, seen

    def close(self) -> None:
        for contender in self.contenders.values():
            if contender.process.poll() is None:
                contender.process.kill()
            contender.process.wait(timeout=30)
