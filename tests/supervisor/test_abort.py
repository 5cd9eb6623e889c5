"""The watchdog's SIGABRT lands on the main thread of ``ha run`` (``ha/supervisor/abort.py``).

faulthandler reads the other threads' frames without the GIL; taken by a worker thread while the
main one ran, the dump crashed the supervisor with SIGSEGV instead of SIGABRT. Every thread but
the main one must block the signal, whichever library started it: checked in the kernel's own
record of each thread's mask (``/proc/PID/task/TID/status``, SigBlk), on real processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# threads started by the ways ha run's libraries start theirs: anyio's worker threads (asyncio
# and trio), concurrent.futures and a plain threading.Thread, each left waiting
CHILD = textwrap.dedent(
    """
    import concurrent.futures, sys, threading, anyio
    from ha.supervisor.abort import trace_aborts

    trace_aborts()
    hold = threading.Event()

    async def main():
        await anyio.to_thread.run_sync(lambda: None)

    for backend in ("asyncio", "trio"):
        anyio.run(main, backend=backend)
    pool = concurrent.futures.ThreadPoolExecutor(2)
    pool.submit(hold.wait)
    threading.Thread(target=hold.wait, daemon=True).start()
    print(threading.get_native_id(), flush=True)
    sys.stdin.read()
    hold.set()
    """
)

# COMMAND (through the guard) and a health check (without one) are forked by ha run's spawner
# thread, which blocks SIGABRT: neither may inherit that
SPAWNING = textwrap.dedent(
    """
    import sys, anyio
    from ha._process import spawn
    from ha.supervisor.abort import trace_aborts

    trace_aborts()

    async def main():
        guarded = await spawn(["sleep", "60"])
        bare = await spawn(["sleep", "60"], guard=False)
        print(guarded.pid, guarded.popen.pid, bare.pid, flush=True)
        await anyio.to_thread.run_sync(sys.stdin.read)
        for child in (guarded, bare):
            await child.stop(0)

    anyio.run(main)
    """
)


def blocks_abort(pid: int | str, tid: int | str | None = None) -> bool:
    where = f"/proc/{pid}/status" if tid is None else f"/proc/{pid}/task/{tid}/status"
    status = Path(where).read_text()
    mask = int(
        next(line for line in status.splitlines() if line.startswith("SigBlk:")).split()[1], 16
    )
    return bool(mask & (1 << (signal.SIGABRT - 1)))


@contextmanager
def running(script: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``script`` in a child Python, with the first line it prints; it ends when stdin closes."""
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    try:
        assert child.stdout is not None
        yield child, child.stdout.readline()
    finally:
        child.communicate("", timeout=30)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_every_thread_but_the_main_one_blocks_sigabrt() -> None:
    with running(CHILD) as (child, line):
        main = line.strip()
        threads = sorted(os.listdir(f"/proc/{child.pid}/task"))
        assert main in threads and len(threads) >= 4, threads
        assert not blocks_abort(child.pid, main)
        unblocked = [tid for tid in threads if tid != main and not blocks_abort(child.pid, tid)]
        assert unblocked == [], f"threads that may take SIGABRT besides the main one: {unblocked}"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_what_ha_run_starts_blocks_no_signal_of_its_threads() -> None:
    with running(SPAWNING) as (_, line):
        command, guard, health = line.split()
        assert command != guard  # COMMAND runs under its guard
        assert [pid for pid in (command, guard, health) if blocks_abort(pid)] == []


def test_only_the_main_thread_may_set_it_up() -> None:
    import threading

    from ha.supervisor.abort import trace_aborts

    errors: list[BaseException] = []

    def other() -> None:
        try:
            trace_aborts()
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert len(errors) == 1 and "main thread" in str(errors[0])
