"""`ha run --on-exit`: what the supervisor does when COMMAND exits by itself while active.

The rules (``ha/supervisor/exits.py``) with no event loop, then the supervisor in-process on the
memory backend under asyncio and trio, with real child processes; the command itself is
tested on sqlite and ZooKeeper in ``tests/cli/test_run_on_exit.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from ha import admin
from ha.drivers.memory import MemoryDriver
from ha.errors import ConfigurationError
from ha.supervisor import Settings, Supervisor
from ha.supervisor.exits import LONG_RUN, RESTART_BACKOFF, STARTED, OnExit, Restarts, status

# COMMAND: note the epoch it ran under, then exit 3
RUN = "import os, sys; open(sys.argv[1], 'a').write(os.environ['HA_EPOCH'] + '\\n'); sys.exit(3)"


def test_restarts_back_off_up_to_the_limit_and_a_long_run_starts_again() -> None:
    restarts = Restarts(limit=3)
    first = RESTART_BACKOFF[0]
    runs = [STARTED, 1.0, 1.0, 1.0]  # the first came up; the restarts crash at once
    assert [restarts.after_exit(ran) for ran in runs] == [first, 2 * first, 4 * first, None]
    assert restarts.after_exit(LONG_RUN + 1) == first  # no crash loop: counted from none
    assert Restarts(limit=0).after_exit(LONG_RUN) is None
    capped = Restarts(limit=20, started=0.0)
    assert max(capped.after_exit(0.0) or 0 for _ in range(20)) == RESTART_BACKOFF[1]


def test_a_first_run_that_never_came_up_cedes_at_once() -> None:
    assert Restarts(limit=3).after_exit(STARTED - 0.1) is None  # a failed start: cede
    assert Restarts(limit=3, started=0.0).after_exit(0.0) == RESTART_BACKOFF[0]


def test_fail_never_exits_0() -> None:
    assert [status(3), status(0), status(-9), status(300)] == [3, 1, 137, 255]


def test_settings_refuse_a_bad_policy() -> None:
    with pytest.raises(ConfigurationError, match="--on-exit must be one of restart, quit, fail"):
        Settings("/svc", "a", ("true",), on_exit="again")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="--max-restarts must be >= 0"):
        Settings("/svc", "a", ("true",), max_restarts=-1)


async def supervise(tmp_path: Path, **options: object) -> tuple[Supervisor, MemoryDriver]:
    """Run one supervisor until it returns by itself (or 15 s: a hang fails the test)."""
    runs = tmp_path / "runs"
    command = (sys.executable, "-c", RUN, str(runs))
    driver = MemoryDriver(f"on-exit-{tmp_path.name}", session_timeout=1.0)
    supervisor = Supervisor(driver, Settings("/svc", "a", command, grace=0.3, **options))  # type: ignore[arg-type]
    async with driver:
        with anyio.fail_after(15):
            await supervisor.run()
    return supervisor, driver


@pytest.mark.anyio
@pytest.mark.parametrize("policy", [OnExit.QUIT, OnExit.FAIL])
async def test_quit_and_fail_leave_the_election_and_return(tmp_path: Path, policy: OnExit) -> None:
    supervisor, _ = await supervise(tmp_path, on_exit=policy)
    assert (tmp_path / "runs").read_text().count("\n") == 1  # ran once, not again
    assert supervisor.exit_status == (3 if policy is OnExit.FAIL else None)
    assert supervisor.state == "neutral"


@pytest.mark.anyio
async def test_restart_runs_again_in_the_same_term_then_cedes(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    command = (sys.executable, "-c", RUN, str(runs))
    driver = MemoryDriver(f"on-exit-{tmp_path.name}", session_timeout=1.0)
    settings = Settings("/svc", "a", command, grace=0.3, max_restarts=1, started=0.0)
    supervisor = Supervisor(driver, settings)
    async with driver, anyio.create_task_group() as tg:
        tg.start_soon(supervisor.run)
        with anyio.fail_after(15):
            while supervisor.state != "out":  # ceded after its one restart
                await anyio.sleep(0.02)
            status = await admin.election_status(driver, "/svc")
        supervisor.stop()
    epochs = runs.read_text().split()
    assert len(epochs) == 2 and epochs[0] == epochs[1]  # the restart kept the lead
    member = next(m for m in status.members if m.identity == b"a")
    assert member.note.startswith(f"{sys.executable} exited (exit status 3): rejoining in ")
