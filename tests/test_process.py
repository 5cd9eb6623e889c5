"""ha._process: a quit on SIGTERM/SIGINT, and children that die with their parent (Linux)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from ha._process import quit_on_signals

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")


@pytest.mark.anyio
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_quit_on_signals_calls_quit_once_and_returns(sig: signal.Signals) -> None:
    calls: list[int] = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(quit_on_signals, lambda: calls.append(1))
            await anyio.sleep(0.1)  # the receiver is installed
            os.kill(os.getpid(), sig)
    assert calls == [1]


def _dead(pid: int) -> bool:
    """Gone, or a zombie waiting for init (or a subreaper) to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@linux
@pytest.mark.parametrize("how", ["die_with_parent", "deathsig_preexec"])
def test_a_child_dies_with_its_parent(tmp_path: Path, how: str) -> None:
    """The parent starts a sleeping grandchild bound either way, prints its pid, is killed."""
    start = {
        "die_with_parent": "[sys.executable, '-c', 'from ha._process import die_with_parent;"
        " die_with_parent(); import time; time.sleep(60)']",
        "deathsig_preexec": "['sleep', '60'], preexec_fn=deathsig_preexec()",
    }[how]
    parent = textwrap.dedent(f"""
        import subprocess, sys, time
        from ha._process import deathsig_preexec
        child = subprocess.Popen({start})
        print(child.pid, flush=True)
        time.sleep(60)
    """)
    with subprocess.Popen(
        [sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        pid = int(proc.stdout.readline())
        time.sleep(0.5)  # the child's prctl has run
        assert not _dead(pid)
        proc.kill()
    deadline = time.monotonic() + 5
    while not _dead(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _dead(pid)
