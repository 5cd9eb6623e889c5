"""What the embedded sqlite backend costs: idle CPU of its polling, op latencies, detection.

Sections, each one table:

- idle CPU: a process holding a session with an ephemeral node and one watched path, next to
  a peer process holding another session (so the reaper has a lock to test), measured with
  ``getrusage`` over ``--idle-seconds`` after a one-second warm-up; per poll interval and
  event loop. The processes run side by side.
- op latency: get, exists, set, create, delete, a two-op transaction (Check + SetData), p50
  and p99 over ``--count`` calls each, with ``synchronous=full`` (the default) and ``normal``.
- death detection: a member process holding an ephemeral node gets SIGKILL; latency = the
  observer's DELETED event minus the kill. Hang detection: SIGSTOP instead; reported as the
  DELETED event minus the lease end the database holds (CLOCK_MONOTONIC, shared).
- write lock at a SIGSTOP (section ``frozen``): an idle active (a process holding a session and
  an ephemeral node, as an elected process between jobs) next to two peers. How often does a
  SIGSTOP at a random moment leave it holding SQLite's write lock? Two measures: the share of
  ``--frozen-seconds`` it holds the lock, sampled without taking it (``F_GETLK`` on the WAL
  write-lock byte of the ``-shm`` file: who would block a writer, and for how long each hold
  lasts), and ``--stops`` real SIGSTOPs at random moments, each followed by a write attempt
  from this process that gives up after 100 ms. Once with a quiet process, once with a thread
  of it computing in Python (holding the GIL, as a busy job manager does).

    .venv/bin/python benchmarks/sqlite_costs.py [--idle-seconds 10] [--count 1000] [--rounds 20]
        [--sections ops,detection,idle,frozen] [--frozen-seconds 30] [--stops 200]

Files go to a temporary directory (on the disk of /tmp). Prints tables; results are not kept.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import random
import signal
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ha.drivers.base import Check, DriverEvent, NodeEvent, NodeEventKind, SetData  # noqa: E402
from ha.drivers.sqlite.driver import SqliteDriver  # noqa: E402

# a process that holds a session; in "idle" mode it also watches a path and reports its CPU
CHILD = r"""
import resource, sys, threading, time
import anyio
from ha.drivers.sqlite.driver import SqliteDriver

def compute():
    while True:  # pure Python: holds the GIL but for the interpreter's switches
        sum(i * i for i in range(1000))

async def main(mode, url, name, seconds):
    if mode == "busy":
        threading.Thread(target=compute, daemon=True).start()
    async with SqliteDriver.from_url(url) as driver:
        await driver.ensure_path("/members")
        await driver.create("/members/" + name, ephemeral=True)
        driver.subscribe("/watched", lambda event: None)
        print("ready", driver.session_id, flush=True)
        if mode in ("hold", "busy"):
            await anyio.sleep_forever()
        await anyio.sleep(1.0)  # warm-up: start-up costs are not idle costs
        before, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        await anyio.sleep(float(seconds))
        after, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - wall
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        print("cpu", cpu / wall, flush=True)

anyio.run(main, *sys.argv[1:5], backend=sys.argv[5])
"""


def spawn(
    mode: str, url: str, name: str, seconds: float = 0, loop: str = "asyncio"
) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", CHILD, mode, url, name, str(seconds), loop]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)


def expect(process: subprocess.Popen[str], word: str) -> list[str]:
    assert process.stdout is not None
    for line in process.stdout:
        words = line.split()
        if words and words[0] == word:
            return words
    raise RuntimeError(f"child exited before saying {word!r}")


def url_of(path: Path, **options: object) -> str:
    query = "&".join(f"{key}={value}" for key, value in options.items())
    return f"sqlite://{path}" + (f"?{query}" if query else "")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    print(f"\n{title}")
    for row in [header, ["-" * w for w in widths], *rows]:
        print(
            "  ".join(
                cell.rjust(w) if i else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )


# --- idle CPU -----------------------------------------------------------------------------------


def idle_cpu(directory: Path, seconds: float) -> None:
    cases = [(poll, loop) for poll in (0.02, 0.05, 0.1, 0.2) for loop in ("asyncio", "trio")]
    children = []
    for index, (poll, loop) in enumerate(cases):
        url = url_of(directory / f"idle{index}.db", poll_interval=poll)
        peer = spawn("hold", url, "peer")
        expect(peer, "ready")
        idle = spawn("idle", url, "idle", seconds, loop)
        children.append((poll, loop, peer, idle))
    rows = []
    for poll, loop, peer, idle in children:
        cpu = float(expect(idle, "cpu")[1])
        idle.wait()
        peer.kill()
        peer.wait()
        rows.append([f"{poll * 1000:.0f} ms", loop, f"{cpu * 100:.2f} %"])
    table(
        f"idle CPU of a process holding a session, one watched path, one peer ({seconds:.0f} s)",
        ["poll interval", "loop", "CPU of one core"],
        rows,
    )


# --- op latency ---------------------------------------------------------------------------------


async def latencies(directory: Path, count: int) -> None:
    rows = []
    for synchronous in ("full", "normal"):
        url = url_of(directory / f"ops-{synchronous}.db", synchronous=synchronous)
        async with SqliteDriver.from_url(url) as driver:
            await driver.create("/k", b"v" * 100)

            async def create(i: int) -> None:
                await driver.create(f"/n{i}", b"v" * 100)

            async def delete(i: int) -> None:
                await driver.delete(f"/n{i}")

            async def transaction(i: int) -> None:
                await driver.transaction([Check("/k"), SetData("/k", b"%d" % i)])

            ops: list[tuple[str, Callable[[int], Awaitable[object]]]] = [
                ("get", lambda i: driver.get("/k")),
                ("exists", lambda i: driver.exists("/k")),
                ("set", lambda i: driver.set("/k", b"%d" % i)),
                ("create", create),
                ("delete", delete),
                ("transaction", transaction),
            ]
            for name, op in ops:
                samples = []
                for i in range(count):
                    start = time.perf_counter()
                    await op(i)
                    samples.append(time.perf_counter() - start)
                rows.append(
                    [
                        name,
                        synchronous,
                        f"{pct(samples, 0.5) * 1e3:.3f}",
                        f"{pct(samples, 0.99) * 1e3:.3f}",
                    ]
                )
    table(f"op latency, ms ({count} calls each)", ["op", "synchronous", "p50", "p99"], rows)


# --- detection ----------------------------------------------------------------------------------


def stop_outside_write(pid: int, database: Path) -> None:
    """SIGSTOP ``pid`` when it does not hold SQLite's write lock (see the driver's limits)."""
    probe = sqlite3.connect(database, timeout=0, isolation_level=None)
    try:
        while True:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.01)  # let the stop take effect
            try:
                probe.execute("BEGIN IMMEDIATE")
                probe.execute("ROLLBACK")
                return
            except sqlite3.OperationalError:
                os.kill(pid, signal.SIGCONT)
                time.sleep(0.01)
    finally:
        probe.close()


async def detection(directory: Path, rounds: int, hang_rounds: int, polls: list[float]) -> None:
    rng = random.Random(1)
    rows = []
    for poll in polls:
        path = directory / f"detect-{poll}.db"
        url = url_of(path, session_timeout=2, poll_interval=poll)
        killed: list[float] = []
        hung: list[float] = []
        async with SqliteDriver.from_url(url) as observer:
            for index in range(rounds + hang_rounds):
                name = f"m{index}"
                member = spawn("hold", url, name)
                sid = int((await anyio.to_thread.run_sync(expect, member, "ready"))[1])
                deleted = anyio.Event()
                at: list[float] = []

                def on_event(
                    event: DriverEvent, at: list[float] = at, done: anyio.Event = deleted
                ) -> None:
                    if isinstance(event, NodeEvent) and event.kind is NodeEventKind.DELETED:
                        at.append(time.monotonic())
                        done.set()

                with observer.subscribe(f"/members/{name}", on_event):
                    await anyio.sleep(rng.uniform(0, poll))  # any phase of the poll
                    if index < rounds:
                        start = time.monotonic()
                        member.kill()
                        with anyio.fail_after(30):
                            await deleted.wait()
                        killed.append(at[0] - start)
                    else:
                        await anyio.to_thread.run_sync(stop_outside_write, member.pid, path)
                        with sqlite3.connect(path) as conn:
                            row = conn.execute(
                                "SELECT expires_at FROM sessions WHERE id = ?", (sid,)
                            ).fetchone()
                        with anyio.fail_after(30):
                            await deleted.wait()
                        hung.append(at[0] - row[0])
                        member.kill()
                await anyio.to_thread.run_sync(member.wait)
        rows.append(
            ["SIGKILL: kill -> DELETED", f"{poll * 1000:.0f} ms", str(len(killed)), *_ms(killed)]
        )
        rows.append(
            ["SIGSTOP: lease end -> DELETED", f"{poll * 1000:.0f} ms", str(len(hung)), *_ms(hung)]
        )
    table(
        "failure detection seen by an observer process (session 2 s), ms",
        ["case", "poll", "n", "p50", "p90", "max"],
        rows,
    )


def _ms(values: list[float]) -> list[str]:
    if not values:
        return ["-", "-", "-"]
    return [f"{v * 1e3:.1f}" for v in (statistics.median(values), pct(values, 0.9), max(values))]


# --- the write lock at a SIGSTOP -----------------------------------------------------------------

SHM_WRITE_LOCK = 120  # the byte of <db>-shm that SQLite's WAL write lock holds (unix VFS)
FLOCK = "hhqqi"  # struct flock on Linux x86-64: type, whence, start, len, pid


def write_lock_holds(
    shm: Path, seconds: float
) -> tuple[int, dict[int, int], dict[int, list[float]]]:
    """Sample who holds the WAL write lock (F_GETLK: asks, never takes it).

    Returns the number of samples, the samples per holding pid, and each pid's hold durations.
    """
    fd = os.open(shm, os.O_RDONLY)
    query = struct.pack(FLOCK, fcntl.F_WRLCK, os.SEEK_SET, SHM_WRITE_LOCK, 1, 0)
    samples, holder, since = 0, 0, 0.0
    held: dict[int, int] = {}
    holds: dict[int, list[float]] = {}
    try:
        end = time.monotonic() + seconds
        while (now := time.monotonic()) < end:
            kind, _, _, _, pid = struct.unpack(FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query))
            pid = 0 if kind == fcntl.F_UNLCK else pid
            samples += 1
            if pid:
                held[pid] = held.get(pid, 0) + 1
            if pid != holder:
                if holder:
                    holds.setdefault(holder, []).append(now - since)
                holder, since = pid, now
    finally:
        os.close(fd)
    return samples, held, holds


def _stopped(pid: int) -> bool:
    states = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/stat") as f:
            states.append(f.read().rsplit(")", 1)[1].split()[0])
    return bool(states) and all(state in "tT" for state in states)


def stops_holding(pid: int, database: Path, stops: int, rng: random.Random) -> int:
    """SIGSTOP ``pid`` at random moments; count the stops after which no write got in 100 ms."""
    blocked = 0
    with contextlib.closing(sqlite3.connect(database, timeout=0.1, isolation_level=None)) as probe:
        for _ in range(stops):
            time.sleep(rng.uniform(0.05, 0.5))
            os.kill(pid, signal.SIGSTOP)
            while not _stopped(pid):
                time.sleep(0.0002)
            try:
                probe.execute("BEGIN IMMEDIATE")
                probe.execute("ROLLBACK")
            except sqlite3.OperationalError:
                blocked += 1
            finally:
                os.kill(pid, signal.SIGCONT)
    return blocked


def frozen(directory: Path, seconds: float, stops: int) -> None:
    rng = random.Random(7)
    rows = []
    for mode in ("hold", "busy"):
        path = directory / f"frozen-{mode}.db"
        url = url_of(path, session_timeout=2)
        active = spawn(mode, url, "active")
        expect(active, "ready")
        peers = [spawn("hold", url, f"peer{i}") for i in range(2)]
        for peer in peers:
            expect(peer, "ready")
        try:
            time.sleep(1.0)
            samples, held, holds = write_lock_holds(Path(f"{path}-shm"), seconds)
            blocked = stops_holding(active.pid, path, stops, rng)
        finally:
            for child in (active, *peers):
                child.kill()
                child.wait()
        mine = sorted(holds.get(active.pid, []))
        rows.append(
            [
                "quiet" if mode == "hold" else "computing thread",
                f"{100 * held.get(active.pid, 0) / max(samples, 1):.4f} %",
                str(len(mine)),
                *(f"{pct(mine, q) * 1e6:.0f}" if mine else "-" for q in (0.5, 0.99)),
                f"{max(mine) * 1e6:.0f}" if mine else "-",
                f"{blocked} / {stops}",
            ]
        )
    table(
        f"the idle active's hold of the write lock ({seconds:.0f} s sampled; session 2 s,"
        " two peers)",
        ["active", "time held", "holds", "p50 us", "p99 us", "max us", "SIGSTOP blocks writers"],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--hang-rounds", type=int, default=3)
    parser.add_argument("--polls", default="0.05,0.1", help="poll intervals for detection")
    parser.add_argument(
        "--sections",
        default="ops,detection,idle,frozen",
        help="comma-separated: ops,detection,idle,frozen",
    )
    parser.add_argument("--frozen-seconds", type=float, default=30.0)
    parser.add_argument("--stops", type=int, default=200)
    args = parser.parse_args()
    sections = args.sections.split(",")
    with tempfile.TemporaryDirectory(prefix="ha-sqlite-bench-") as tmp:
        directory = Path(tmp)
        print(
            f"sqlite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, {os.cpu_count()} cores, files in {tmp}"
        )
        if "ops" in sections:
            anyio.run(latencies, directory, args.count)
        if "detection" in sections:
            polls = [float(p) for p in args.polls.split(",")]
            anyio.run(detection, directory, args.rounds, args.hang_rounds, polls)
        if "idle" in sections:
            idle_cpu(directory, args.idle_seconds)
        if "frozen" in sections:
            frozen(directory, args.frozen_seconds, args.stops)


if __name__ == "__main__":
    main()
