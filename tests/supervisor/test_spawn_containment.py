"""``spawn`` never loses a process, and the guard is a watchdog on the supervisor's deadline.

Real processes; each COMMAND is ``sleep`` with a number of its own, found afterwards by
scanning ``/proc``: the verdict is whether a process runs, not what ``spawn`` returned.
"""

from __future__ import annotations

import errno
import itertools
import math
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from ha.drivers.memory import MemoryCluster, MemoryDriver
from ha.election.lease import Lease
from ha.supervisor import Settings, Supervisor, spawn

pytestmark = pytest.mark.anyio

_tokens = itertools.count(random.randrange(40_000, 50_000))
# the first deadline given to a guard: it must have started COMMAND by then (else ETIME), which
# on a loaded machine takes more than a second
STARTS = 2.0


def running(token: str) -> list[int]:
    """Pids of live ``sleep TOKEN`` processes (zombies count as dead)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{name}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if argv[:2] == [b"sleep", token.encode()] and state != "Z":
            found.append(int(name))
    return found


def kill_all(token: str) -> None:
    for pid in running(token):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("guard", [True, False], ids=["guarded", "unguarded"])
async def test_a_spawn_cancelled_midway_leaves_nothing_running(guard: bool) -> None:
    # the cancellation is already pending when spawn begins: the fork happens in the spawner
    # thread all the same, so spawn itself must stop what it started before it raises
    token = str(next(_tokens))
    try:
        with anyio.CancelScope() as scope:
            scope.cancel()
            await spawn(["sleep", token], guard=guard)
        assert scope.cancelled_caught
        await anyio.sleep(0.3)  # a leaked fork would be running by now
        assert running(token) == []
    finally:
        kill_all(token)


async def test_a_spawn_cancelled_while_the_fork_runs_leaves_nothing_running() -> None:
    # cancelled from another task while the spawner thread forks the guard and COMMAND
    token = str(next(_tokens))
    try:
        for delay in (0.0, 0.005, 0.02, 0.05):
            child = None
            with anyio.move_on_after(delay):
                child = await spawn(["sleep", token])
            if child is not None:  # spawned in time: ours to stop
                await child.stop(0.0)
        await anyio.sleep(0.3)  # a leaked fork would be running by now
        assert running(token) == []
    finally:
        kill_all(token)


async def test_nothing_starts_once_the_deadline_has_passed() -> None:
    token = str(next(_tokens))
    try:
        for guard in (True, False):
            with pytest.raises(OSError) as caught:
                await spawn(["sleep", token], guard=guard, deadline=time.monotonic() - 0.001)
            assert caught.value.errno == errno.ETIME
        await anyio.sleep(0.2)
        assert running(token) == []
    finally:
        kill_all(token)


async def test_the_guard_stops_command_when_the_deadline_is_not_renewed() -> None:
    token = str(next(_tokens))
    try:
        child = await spawn(["sleep", token], deadline=time.monotonic() + STARTS, grace=0.2)
        assert running(token) == [child.pid]
        with anyio.fail_after(10):
            code = await child.wait()  # nobody asked it to stop: the watchdog did
        assert code == -signal.SIGTERM
        assert running(token) == []
    finally:
        kill_all(token)


async def test_a_renewed_deadline_keeps_command_running() -> None:
    token = str(next(_tokens))
    try:
        child = await spawn(["sleep", token], deadline=time.monotonic() + STARTS, grace=0.2)
        with anyio.move_on_after(STARTS + 1.0):  # the first deadline and three renewed ones
            await child.keep_renewed(lambda: time.monotonic() + 0.3, 0.05)
        assert running(token) == [child.pid]
        assert await child.stop(1.0) == -signal.SIGTERM
    finally:
        kill_all(token)


async def test_no_deadline_at_all_stops_command_as_a_passed_one() -> None:
    """A lease whose session is gone has no deadline (``-inf``): the guard is told one that
    has passed (it reads numbers only; ``-inf`` made it crash) and stops COMMAND as usual,
    SIGTERM first (netns sqlite seed 38027)."""
    token = str(next(_tokens))
    try:
        child = await spawn(["sleep", token], deadline=time.monotonic() + 60, grace=0.2)
        assert child.renew(-math.inf)
        with anyio.fail_after(10):
            code = await child.wait()
        assert code == -signal.SIGTERM
        assert running(token) == []
    finally:
        kill_all(token)


async def test_a_stop_reaches_command_through_a_frozen_guard() -> None:
    # the guard SIGSTOPped alone: the stop wakes it, so it still ends the tree within the grace
    token = str(next(_tokens))
    try:
        child = await spawn(["sh", "-c", f"sleep {token} & setsid sleep {token} & wait"])
        while len(running(token)) < 2:
            await anyio.sleep(0.01)
        os.kill(child.popen.pid, signal.SIGSTOP)
        await child.stop(0.5)
        assert running(token) == []  # the daemon too: the guard was woken, not killed
    finally:
        kill_all(token)


async def test_a_guard_frozen_with_its_supervisor_still_ends_command() -> None:
    # nobody renews the deadline and the guard is stopped too: its timer SIGKILLs it, and
    # COMMAND dies with it (PDEATHSIG)
    token = str(next(_tokens))
    try:
        child = await spawn(["sleep", token], deadline=time.monotonic() + STARTS, grace=0.2)
        os.kill(child.popen.pid, signal.SIGSTOP)
        with anyio.fail_after(10):
            while running(token) or child.popen.poll() is None:
                await anyio.sleep(0.02)
        assert child.popen.returncode == -signal.SIGKILL  # the guard, killed while stopped
    finally:
        kill_all(token)


async def test_a_term_cancelled_at_any_moment_of_its_start_leaves_nothing_running(
    tmp_path: Path,
) -> None:
    # the supervisor's become_active cancelled after a random delay, from before the fork to
    # well after it: each time, no COMMAND of it is left running once the cancel is done
    token = str(next(_tokens))
    rng = random.Random(int(token))
    driver = MemoryDriver(f"cancel-{token}", session_timeout=10.0)
    settings = Settings("/svc", "a", ("sleep", token), grace=0.2)
    supervisor = Supervisor(driver, settings)
    lease = Lease(
        "/svc", b"a", 1, 1, "/svc/n/a_1", lambda: True, lambda: None, lambda: time.monotonic() + 5.0
    )
    try:
        for delay in [0.0, *(rng.uniform(0.0, 0.15) for _ in range(24))]:
            with anyio.move_on_after(delay):
                await supervisor.become_active(lease)
            assert running(token) == []
    finally:
        kill_all(token)
        MemoryCluster.drop(f"cancel-{token}")


class CancelAtStep:
    """Awaits ``coro``, cancelling ``scope`` just before the task resumes it for the
    ``step``-th time: every suspension of the coroutine, in turn, is where a cancellation
    lands. The loop's own objects pass through untouched (asyncio's futures, trio's traps),
    so nothing in the code under test is changed or armed."""

    def __init__(self, coro: Any, step: int, scope: anyio.CancelScope, token: str) -> None:
        self.coro, self.step, self.scope, self.token = coro, step, scope, token
        self.steps = 0
        self.running_at_cancel: bool | None = None  # was COMMAND running when it landed

    def __await__(self) -> Any:
        send: Any = None
        thrown: BaseException | None = None
        while True:
            if self.steps == self.step:
                self.running_at_cancel = bool(running(self.token))
                self.scope.cancel()
            self.steps += 1
            try:
                if thrown is not None:
                    yielded = self.coro.throw(thrown)
                else:
                    yielded = self.coro.send(send)
            except StopIteration as stop:
                return stop.value
            send, thrown = None, None
            try:
                send = yield yielded
            except BaseException as exc:  # the loop's cancellation, or a trap's error
                thrown = exc


async def test_a_cancellation_at_each_await_of_a_terms_start_leaves_nothing_running() -> None:
    # the supervisor's become_active cancelled at its first suspension, then its second, ...
    # until well after COMMAND runs: each time, no COMMAND of it is left once the cancel is done
    token = str(next(_tokens))
    driver = MemoryDriver(f"steps-{token}", session_timeout=10.0)
    settings = Settings("/svc", "a", ("sleep", token), grace=0.2)
    supervisor = Supervisor(driver, settings)
    lease = Lease(
        "/svc", b"a", 1, 1, "/svc/n/a_1", lambda: True, lambda: None, lambda: time.monotonic() + 5.0
    )
    landed: list[bool] = []
    try:
        for step in itertools.count():
            with anyio.CancelScope() as scope:
                stepper = CancelAtStep(supervisor.become_active(lease), step, scope, token)
                with anyio.move_on_after(2.0):  # a step never reached: the term runs on
                    await stepper
            assert running(token) == [], f"COMMAND left running by a cancel at step {step}"
            if stepper.running_at_cancel is None:
                break  # the term started and ran 2 s without reaching that step
            landed.append(stepper.running_at_cancel)
        assert False in landed and True in landed, landed  # before and after the fork
    finally:
        kill_all(token)
        MemoryCluster.drop(f"steps-{token}")
