"""Ctrl-C: every `ha` command exits 130 and says nothing more, under asyncio and trio alike
(issue 30, item 8). Real processes and real signals.

Before, trio raised KeyboardInterrupt wherever the code happened to be (an exception group and
exit 1, a command that ran on, or TrioInternalError), `ha run` and `ha watch` exited 0, the
others printed "ha: error: interrupted", and click said "Aborted!" (exit 1) at a prompt.
"""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.cli import Hosts, Silent, alive, ha, ha_env, popen_ha, sqlite_url, wait_until

LOOPS = ["asyncio", "trio"]
NOISE = ("Traceback", "Error", "ha: error", "Aborted")


def quiet(text: str) -> bool:
    return not any(word in text for word in NOISE)


def ended(proc: subprocess.Popen[bytes], what: str) -> int:
    try:
        return proc.wait(timeout=30)  # a hang guard: it ends at once
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"{what} still runs after SIGINT")


@pytest.mark.parametrize("loop", LOOPS)
def test_ctrl_c_stops_ha_run_then_exits_130(tmp_path: Path, loop: str) -> None:
    with Hosts(tmp_path, HA_ASYNC_BACKEND=loop) as hosts:
        hosts.start("a")
        hosts.settled()
        hosts.start("b")
        epoch = hosts.settled()["epoch"]
        child = hosts.child("a")
        assert child is not None
        hosts.procs["a"].send_signal(signal.SIGINT)
        assert ended(hosts.procs["a"], "ha run") == 130
        log = hosts.log("a")
        assert "SIGINT received" in log and quiet(log), log
        # the stop it always was: COMMAND got SIGTERM, the election was left without fencing
        assert not alive(child[0])
        assert (tmp_path / "a.term").read_text().split() == [str(child[0])]
        doc = hosts.settled()
        assert doc["active"] == "b" and doc["epoch"] > epoch


@pytest.mark.parametrize("loop", LOOPS)
def test_ctrl_c_ends_ha_watch_with_130(tmp_path: Path, loop: str) -> None:
    env = ha_env(tmp_path, HA_URL=sqlite_url(tmp_path), HA_ASYNC_BACKEND=loop)
    assert ha("format", "/svc", env=env).returncode == 0  # `ha watch` creates no file
    for signum, code in ((signal.SIGINT, 130), (signal.SIGTERM, 0)):
        log = tmp_path / f"watch-{signum.name}.log"
        watch = popen_ha("watch", "/svc", env=env, log=log)
        wait_until(lambda: log.read_text().strip(), "the first line")  # noqa: B023
        watch.send_signal(signum)
        assert ended(watch, "ha watch") == code
        assert log.read_text().strip().endswith("/svc no active")
        assert quiet(log.read_text()), log.read_text()


@pytest.mark.parametrize("loop", LOOPS)
def test_ctrl_c_while_a_duplicate_id_waits_ends_the_wait(tmp_path: Path, loop: str) -> None:
    """A second `ha run --id a` waits for the first one's member node to go (1.5 session
    timeouts: 90 s here); Ctrl-C ends the wait, and the first one's node is left alone."""
    url = sqlite_url(tmp_path) + "?session_timeout=60"
    with Hosts(tmp_path, url, HA_ASYNC_BACKEND=loop) as hosts:
        hosts.start("a")
        epoch = hosts.settled()["epoch"]
        log = tmp_path / "again.log"
        argv = ("run", "/svc", "--id", "a", "--log-level", "info", "--", "true")
        again = popen_ha(*argv, env=hosts.env, log=log)
        try:
            wait_until(lambda: "another supervisor with this id" in log.read_text(), "the wait")
            again.send_signal(signal.SIGINT)
            assert ended(again, "the duplicate") == 130
        finally:
            if again.poll() is None:
                again.kill()
                again.wait()
        assert quiet(log.read_text()), log.read_text()
        doc = hosts.settled()
        assert (doc["active"], doc["epoch"]) == ("a", epoch)
        [member] = doc["members"]
        assert member["pid"] == hosts.procs["a"].pid  # the first one's node, still there


@pytest.mark.parametrize("loop", LOOPS)
def test_ctrl_c_while_a_command_connects(tmp_path: Path, loop: str) -> None:
    """`ha status` on an etcd port that accepts and never answers: Ctrl-C cancels the
    connect (120 s away), and the command exits 130 with nothing on stderr."""
    silent = Silent()
    try:
        url = f"etcd://127.0.0.1:{silent.port}/x?connect_timeout=120"
        env = ha_env(tmp_path, HA_URL=url, HA_ASYNC_BACKEND=loop)
        status = subprocess.Popen(
            [sys.executable, "-m", "ha", "status", "/svc"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        silent.wait_for_a_client()
        status.send_signal(signal.SIGINT)
        out, err = status.communicate(timeout=30)
        assert status.returncode == 130
        assert (out, err) == (b"", b"")
    finally:
        silent.close()


STUCK = textwrap.dedent(
    """
    import anyio
    from ha.cli._run import Options, run

    async def stuck() -> None:
        with anyio.CancelScope(shield=True):  # ignores the first Ctrl-C's cancellation
            print("ready", flush=True)
            await anyio.sleep(600)
        print("done", flush=True)

    run(Options(None, False, False), stuck)
    """
)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_second_ctrl_c_ends_work_that_ignores_the_first(tmp_path: Path, loop: str) -> None:
    env = ha_env(tmp_path, HA_ASYNC_BACKEND=loop, PYTHONPATH=os.getcwd())
    proc = subprocess.Popen(
        [sys.executable, "-c", STUCK], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    # again and again (two sent at once may reach the process as one), until it has ended
    wait_until(lambda: proc.send_signal(signal.SIGINT) or proc.poll() is not None, "the end")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert (out, err) == (b"", b"")  # not "done": the shielded sleep never ended


def reading_stdin(pid: int) -> bool:
    """Whether ``pid`` is blocked in read(2) on its stdin (Linux, x86-64 and arm64 numbers)."""
    call = Path(f"/proc/{pid}/syscall").read_text().split()
    return len(call) > 1 and call[0] in ("0", "63") and int(call[1], 16) == 0


def test_ctrl_c_at_a_prompt_exits_130_not_aborted(tmp_path: Path) -> None:
    """`ha format --force` asks on a terminal; Ctrl-C there is 130, not click's "Aborted!"."""
    env = ha_env(tmp_path, HA_URL=sqlite_url(tmp_path))
    assert ha("format", "/svc", env=env).returncode == 0
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ha", "format", "/svc", "--force"],
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert proc.stderr is not None
        prompt = b""
        while b"Clear the election at /svc?" not in prompt:
            chunk = proc.stderr.read1(4096)
            assert chunk, prompt
            prompt += chunk
        # input() writes the prompt, then reads: a signal between the two is only seen at the
        # next one (Python's own race). Once it blocks in read(0, ...), Ctrl-C is one press.
        wait_until(lambda: reading_stdin(proc.pid), "the prompt to wait for an answer")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        os.close(controller)
        os.close(terminal)
    assert proc.returncode == 130
    assert out == b"" and quiet((prompt + err).decode()), (prompt + err).decode()
