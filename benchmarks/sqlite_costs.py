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

    .venv/bin/python benchmarks/sqlite_costs.py [--idle-seconds 10] [--count 1000] [--rounds 20]

Files go to a temporary directory (on the disk of /tmp). Prints tables; results are not kept.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sqlite3
import statistics
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
from ha.drivers.sqlite import SqliteDriver  # noqa: E402

# a process that holds a session; in "idle" mode it also watches a path and reports its CPU
CHILD = r"""
import resource, sys, time
import anyio
from ha.drivers.sqlite import SqliteDriver

async def main(mode, url, name, seconds):
    async with SqliteDriver.from_url(url) as driver:
        await driver.ensure_path("/members")
        await driver.create("/members/" + name, ephemeral=True)
        driver.subscribe("/watched", lambda event: None)
        print("ready", driver.session_id, flush=True)
        if mode == "hold":
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--hang-rounds", type=int, default=3)
    parser.add_argument("--polls", default="0.05,0.1", help="poll intervals for detection")
    parser.add_argument(
        "--sections", default="ops,detection,idle", help="comma-separated: ops,detection,idle"
    )
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


if __name__ == "__main__":
    main()
