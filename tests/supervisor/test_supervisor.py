"""The `ha run` supervisor in-process on the memory backend, with real child processes.

COMMAND is a small Python program that writes its pid to ``<dir>/<identity>.pid`` and notes a
SIGTERM in ``<dir>/<identity>.term``; the tests check which processes are alive.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from ha import admin
from ha.drivers.memory import MemoryCluster, MemoryDriver
from ha.election.elector import Elector
from ha.election.machine import State
from ha.election.nodes import ElectionNodes
from ha.errors import ConfigurationError
from ha.supervisor import Settings, Supervisor, spawn, timing_for
from ha.testing import History, Recorder, faults
from tests.support.members import CHILD, Member, alive, child_pid, wait_until

pytestmark = pytest.mark.anyio


_names = itertools.count()


class Group:
    def __init__(self, directory: Path, tg: anyio.abc.TaskGroup) -> None:
        self.directory = directory
        self.cluster = f"sup-{next(_names)}"
        self.tg = tg
        self.members: dict[str, Member] = {}

    async def start(self, identity: str, **options: Any) -> Member:
        driver = MemoryDriver(self.cluster, session_timeout=1.0)
        settings = Settings(
            "/svc",
            identity,
            (sys.executable, "-c", CHILD, str(self.directory)),
            **{"grace": 0.3, **options},
        )
        supervisor = Supervisor(driver, settings)
        scope = anyio.CancelScope()

        async def run() -> None:
            async with driver:  # the task that starts a driver must close it
                with scope:
                    await supervisor.run()

        self.tg.start_soon(run)
        member = Member(supervisor, driver, scope)
        self.members[identity] = member
        return member

    def active(self) -> str | None:
        actives = [i for i, m in self.members.items() if m.state == "active"]
        return actives[0] if len(actives) == 1 else None

    async def settled(self) -> str:
        """Wait for one active whose COMMAND runs and every other member standby (or out)."""

        def check() -> str | None:
            active = self.active()
            if active is None or any(
                m.state not in ("standby", "out") for i, m in self.members.items() if i != active
            ):
                return None
            child = self.members[active].supervisor.child
            return active if child is not None and child_pid(self.directory, active) else None

        result: str = await wait_until(check, "one active and the others standby")
        return result

    async def status(self) -> admin.ElectionStatus:
        driver = next(m.driver for m in self.members.values() if not m.scope.cancel_called)
        return await admin.election_status(driver, "/svc")


@asynccontextmanager
async def group(tmp_path: Path) -> AsyncIterator[Group]:
    async with anyio.create_task_group() as tg:
        g = Group(tmp_path, tg)
        try:
            yield g
        finally:
            for m in g.members.values():
                m.supervisor.stop()
            await wait_until(
                lambda: all(m.supervisor.child is None for m in g.members.values()),
                "every COMMAND to stop",
            )
    MemoryCluster.drop(g.cluster)


async def test_command_runs_only_while_active(tmp_path: Path) -> None:
    async with group(tmp_path) as g:
        await g.start("a")
        await g.settled()
        await g.start("b")
        assert await g.settled() == "a"
        pid_a = child_pid(tmp_path, "a")
        assert pid_a is not None and alive(pid_a)
        assert g.members["b"].supervisor.child is None
        assert child_pid(tmp_path, "b") is None
        g.members["a"].supervisor.stop()  # a leaves: its COMMAND gets SIGTERM, b's starts
        await wait_until(lambda: child_pid(tmp_path, "b"), "b's COMMAND")
        assert not alive(pid_a)
        assert (tmp_path / "a.term").read_text().split() == [str(pid_a)]
        assert g.members["b"].state == "active"


async def test_command_is_dead_before_another_state_is_reported(tmp_path: Path) -> None:
    async with group(tmp_path) as g:
        a = await g.start("a")
        await g.settled()
        await g.start("b")
        await g.settled()
        pid_a = child_pid(tmp_path, "a")
        assert pid_a is not None
        await faults(a.driver).expire()  # the backend drops a's session: a is fenced
        # the state changes only after become_active returned from its cancellation
        await wait_until(lambda: a.state != "active", "a to lose the lead")
        assert not alive(pid_a)
        assert await g.settled() == "b"


async def test_crashed_supervisor_is_fenced_with_its_breadcrumb(tmp_path: Path) -> None:
    fence_log = tmp_path / "fence.env"
    verdict = tmp_path / "verdict"
    verdict.write_text("1")  # refuse first
    fence = (
        sys.executable,
        "-c",
        "import json, os, sys; open(sys.argv[1], 'a').write(json.dumps("
        "{k: v for k, v in os.environ.items() if k.startswith('HA_')}) + '\\n');"
        " sys.exit(int(open(sys.argv[2]).read()))",
        str(fence_log),
        str(verdict),
    )
    async with group(tmp_path) as g:
        a = await g.start("a")
        await g.settled()
        b = await g.start("b", fence=fence)
        await g.settled()
        pid_a = child_pid(tmp_path, "a")
        assert pid_a is not None
        epoch_a = (await g.status()).epoch  # a's token: its queue node's creation order
        assert epoch_a is not None and child_pid(tmp_path, "a") == pid_a
        assert (tmp_path / "a.pid").read_text().split()[1] == str(epoch_a)  # HA_EPOCH
        await a.crash()  # a's scope is cancelled: its COMMAND is stopped; its breadcrumb stays
        # open() creates the file before the line is written: wait for a whole line
        await wait_until(
            lambda: fence_log.exists() and fence_log.read_text().endswith("\n"),
            "the fence command's first line",
        )
        assert not alive(pid_a)
        env = [__import__("json").loads(line) for line in fence_log.read_text().splitlines()]
        first = env[0]
        assert first["HA_OLD_IDENTITY"] == "a"
        assert first["HA_OLD_EPOCH"] == str(epoch_a)
        assert first["HA_OLD_BREADCRUMB_VALID"] == "1"
        assert first["HA_OLD_PID"] == str(os.getpid())
        assert first["HA_IDENTITY"] == "b" and first["HA_ELECTION"] == "/svc"
        assert "HA_OLD_BREADCRUMB_B64" in first
        # refused: b does not start its COMMAND, and tries again after a backoff
        await wait_until(lambda: len(fence_log.read_text().splitlines()) >= 2, "a second try")
        assert b.state != "active" and child_pid(tmp_path, "b") is None
        verdict.write_text("0")
        await wait_until(lambda: child_pid(tmp_path, "b"), "b's COMMAND after fencing")
        assert b.state == "active"
        epoch_b = (await g.status()).epoch
        assert epoch_b is not None and epoch_b > epoch_a
        assert (tmp_path / "b.pid").read_text().split()[1] == str(epoch_b)


async def test_health_check_failing_leaves_and_passing_rejoins(tmp_path: Path) -> None:
    healthy = tmp_path / "healthy"
    healthy.touch()
    async with group(tmp_path) as g:
        a = await g.start("a", health=("test", "-f", str(healthy)), health_interval=0.05)
        await g.settled()
        await g.start("b")
        assert await g.settled() == "a"
        pid_a = child_pid(tmp_path, "a")
        assert pid_a is not None
        healthy.unlink()
        await wait_until(lambda: a.state == "out", "a to leave the election")
        assert not alive(pid_a)
        assert await g.settled() == "b"
        members = {m.identity: m for m in (await g.status()).members}
        assert members[b"a"].state == "out" and members[b"a"].note == "unhealthy"
        healthy.touch()
        await wait_until(lambda: a.state == "standby", "a to rejoin")
        assert await g.settled() == "b"


async def test_command_exiting_while_active_hands_over(tmp_path: Path) -> None:
    async with group(tmp_path) as g:
        a = await g.start("a", extra_env={"CHILD_EXIT": "3"})
        await wait_until(lambda: a.state == "out", "a to leave after its COMMAND exited")
        await g.start("b")
        assert await g.settled() == "b"
        status = await g.status()
        assert status.active == b"b"
        assert status.breadcrumb is not None and status.breadcrumb.identity == b"b"


async def test_graceful_failover_to_a_chosen_standby(tmp_path: Path) -> None:
    async with group(tmp_path) as g:
        for identity in ("a", "b", "c"):
            await g.start(identity)
        await g.settled()
        old = g.active()
        assert old is not None
        target = [i for i in ("a", "b", "c") if i != old][-1]
        other = [i for i in ("a", "b", "c") if i not in (old, target)][0]
        pid_old = child_pid(tmp_path, old)
        assert pid_old is not None
        driver = g.members[other].driver
        # the status shows every member; the request names the active and its epoch
        status = await g.status()
        assert {m.identity for m in status.members} == {b"a", b"b", b"c"}
        request = await admin.request_failover(driver, "/svc", target, cooldown=30)
        assert request.active == old.encode() and request.epoch == status.epoch
        with anyio.fail_after(15):
            found = await admin.wait_for_failover(driver, "/svc", request)
        assert found.active == target.encode()
        assert found.epoch is not None and status.epoch is not None
        assert found.epoch > status.epoch
        assert not alive(pid_old)
        assert (tmp_path / f"{old}.term").exists()  # stopped gracefully, with SIGTERM
        # the other one, ahead of the target, joined again behind it; the old active at once
        # behind them both (#30: no cooling period out of the election)
        await wait_until(lambda: g.members[other].state == "standby", "the bystander to rejoin")
        await wait_until(lambda: g.members[old].state == "standby", "the old active to rejoin")
        assert g.active() == target
        order = [e.identity for e in await ElectionNodes("/svc").entries(driver)]
        assert order == [target.encode(), other.encode(), old.encode()]
        after = await g.status()
        assert after.breadcrumb is not None and after.breadcrumb.identity == target.encode()
        assert not after.failover_pending


async def test_graceful_failover_to_any_standby(tmp_path: Path) -> None:
    async with group(tmp_path) as g:
        await g.start("a")
        await g.settled()
        await g.start("b")
        await g.settled()
        driver = g.members["b"].driver
        request = await admin.request_failover(driver, "/svc", cooldown=30)
        with anyio.fail_after(15):
            found = await admin.wait_for_failover(driver, "/svc", request)
        assert found.active == b"b" and found.epoch is not None
        assert found.epoch > request.epoch
        await wait_until(lambda: g.members["a"].state == "standby", "a to stand by behind b")


async def test_failover_requests_that_cannot_be_honoured(tmp_path: Path) -> None:
    async with group(tmp_path) as g:
        await g.start("a")
        await g.settled()
        async with MemoryDriver(g.cluster) as driver:
            with pytest.raises(admin.FailoverError, match="not running"):
                await admin.request_failover(driver, "/svc", "nobody")
            with pytest.raises(admin.FailoverError, match="already the active"):
                await admin.request_failover(driver, "/svc", "a")
            # no standby: refused up front, rather than stopping the only COMMAND for nothing
            with pytest.raises(admin.FailoverError, match="no standby can take over /svc"):
                await admin.request_failover(driver, "/svc")
            assert g.members["a"].state == "active" and not (tmp_path / "a.term").exists()
            await admin.request_failover(driver, "/svc", force=True, cooldown=30)
            await wait_until(lambda: g.members["a"].state == "out", "a to cede when forced")
            g.members["a"].supervisor.stop()
            await wait_until(lambda: g.members["a"].state != "active", "a to leave")
            with pytest.raises(admin.NoActive):
                await admin.request_failover(driver, "/svc")


async def test_a_duplicate_identity_is_refused(tmp_path: Path) -> None:
    async with group(tmp_path) as g:
        a = await g.start("a")
        await g.settled()
        pid_a = child_pid(tmp_path, "a")
        settings = Settings("/svc", "a", (sys.executable, "-c", CHILD, str(tmp_path)))
        async with MemoryDriver(g.cluster, session_timeout=1.0) as driver:
            duplicate = Supervisor(driver, settings)
            with pytest.raises(admin.DuplicateIdentity, match="another supervisor with --id 'a'"):
                await duplicate.run()
        # the running one is untouched: its member node, its lead, its COMMAND
        status = await g.status()
        assert [(m.identity, m.state) for m in status.members] == [(b"a", "active")]
        assert a.state == "active" and child_pid(tmp_path, "a") == pid_a
        assert pid_a is not None and alive(pid_a)


@pytest.mark.parametrize("leaves", [False, True], ids=["in-group", "setsid"])
async def test_stop_escalates_to_sigkill_after_the_grace_period(
    tmp_path: Path, leaves: bool
) -> None:
    # a COMMAND that ignores SIGTERM and leaves a grandchild that ignores it too, in its
    # process group or in a session of its own (a daemon)
    script = (
        "import os, signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "p = subprocess.Popen(['sleep', '60'], start_new_session=sys.argv[2] == '1')\n"
        "open(sys.argv[1], 'w').write(str(p.pid))\n"
        "while True: time.sleep(0.05)\n"
    )
    pidfile = tmp_path / "grandchild"
    child = await spawn([sys.executable, "-c", script, str(pidfile), str(int(leaves))])
    await wait_until(lambda: pidfile.exists() and pidfile.read_text(), "the grandchild")
    grandchild = int(pidfile.read_text())
    try:
        assert (os.getsid(grandchild) != os.getsid(child.pid)) == leaves
        code = await child.stop(0.1)
        assert code == -signal.SIGKILL
        # stop returns only once the whole tree is dead: the lock may pass on right after
        assert not alive(child.pid) and not alive(grandchild)
    finally:
        if alive(grandchild):  # an escapee
            os.kill(grandchild, signal.SIGKILL)


async def test_the_whole_tree_gets_sigterm_and_the_grace_period(tmp_path: Path) -> None:
    # a wrapper that forks a server and a double-forked daemon, then waits
    record = tmp_path / "terms"
    server = (
        "import os, signal, sys, time\n"
        "def term(*_):\n"
        "    time.sleep(0.2)  # a graceful shutdown takes a while\n"
        "    open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, term)\n"
        "if sys.argv[2] == 'daemon':\n"
        "    if os.fork(): os._exit(0)\n"
        "    os.setsid()\n"
        "    if os.fork(): os._exit(0)\n"
        "pidfile = sys.argv[1] + '.' + sys.argv[2] + '.pid'\n"
        "open(pidfile + '.tmp', 'w').write(str(os.getpid()))\n"
        "os.replace(pidfile + '.tmp', pidfile)\n"
        "while True: time.sleep(0.05)\n"
    )
    (tmp_path / "server.py").write_text(server)
    run = f'"{sys.executable}" "{tmp_path}/server.py" "{record}"'
    child = await spawn(["sh", "-c", f"{run} child & {run} daemon; wait"])
    pids = [
        await wait_until(lambda: child_pid(tmp_path, f"terms.{role}"), role)  # noqa: B023
        for role in ("child", "daemon")
    ]
    try:
        await child.stop(5.0)
        assert sorted(record.read_text().split()) == ["child", "daemon"]  # both shut down cleanly
        assert not any(alive(pid) for pid in [child.pid, *pids])
    finally:
        for pid in pids:
            if alive(pid):  # an escapee
                os.kill(pid, signal.SIGKILL)


async def test_stop_of_a_child_that_obeys_sigterm(tmp_path: Path) -> None:
    child = await spawn(["sleep", "60"])
    assert await child.stop(5.0) == -signal.SIGTERM
    assert await child.wait() == -signal.SIGTERM  # idempotent


def test_settings_and_timing_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="grace"):
        timing_for(2.0, 5.0)
    assert timing_for(2.0, 0.5).deadline_ratio < 2 / 3
    assert timing_for(30.0, 0.5).deadline_ratio == pytest.approx(2 / 3)
    with pytest.raises(ConfigurationError, match="COMMAND"):
        Settings("/svc", "a", ())
    with pytest.raises(ConfigurationError, match="--id"):
        Settings("/svc", "", ("true",))
    with pytest.raises(ConfigurationError, match="grace"):
        Settings("/svc", "a", ("true",), grace=-1)
    with pytest.raises(ConfigurationError, match="root"):
        Settings("/", "a", ("true",))
    settings = Settings("/svc", "a", ("true",), fence_timeout=7.0, grace=1.0)
    timing = Supervisor(MemoryDriver("unused", session_timeout=10.0), settings).timing
    assert timing.fence_timeout == 7.0
    assert timing.deadline_ratio * 10.0 + 1.0 < 10.0  # the stop ends before the session can
    MemoryCluster.drop("unused")


async def test_failover_to_a_target_moves_only_the_members_ahead_of_it(tmp_path: Path) -> None:
    # the queue is a, b, c, d (a leads): --to c makes b join again behind c, d stays where it
    # was, a cedes once c is next, and c leads with no request of its own
    async with group(tmp_path) as g:
        for identity in ("a", "b", "c", "d"):
            await g.start(identity)
            await g.settled()
        driver = g.members["d"].driver
        nodes = ElectionNodes("/svc")
        before = {e.identity: e.name for e in await nodes.entries(driver)}
        assert list(before) == [b"a", b"b", b"c", b"d"]
        pid_a = child_pid(tmp_path, "a")
        assert pid_a is not None
        request = await admin.request_failover(driver, "/svc", "c", cooldown=30)
        with anyio.fail_after(15):
            found = await admin.wait_for_failover(driver, "/svc", request)
        assert found.active == b"c" and g.active() == "c"
        await wait_until(lambda: g.members["b"].state == "standby", "b to join again")
        await wait_until(lambda: g.members["a"].state == "standby", "a to stand by")
        after = {e.identity: e.name for e in await nodes.entries(driver)}
        assert list(after) == [b"c", b"d", b"b", b"a"]  # a at once at the back (#30)
        assert after[b"c"] == before[b"c"] and after[b"d"] == before[b"d"]  # c and d stayed
        assert after[b"b"] != before[b"b"]  # b left and joined again, behind c
        assert not alive(pid_a) and (tmp_path / "a.term").exists()  # stopped with SIGTERM
        assert child_pid(tmp_path, "b") is None and child_pid(tmp_path, "d") is None


async def test_the_active_waits_for_the_target_to_be_next_then_drops_the_request(
    tmp_path: Path,
) -> None:
    # x, ahead of c, is a plain elector, no `ha run`: it never moves, so a stays active
    async with group(tmp_path) as g:
        a = await g.start("a")
        await g.settled()
        history = History()
        async with MemoryDriver(g.cluster) as driver, anyio.create_task_group() as tg:
            x = Elector(driver, "/svc", "x")
            tg.start_soon(x.run, Recorder("x", history))
            await x.wait_state(State.STANDBY)
            await g.start("c")
            await g.settled()
            with pytest.raises(admin.FailoverError, match="'x' ahead of 'c' in the queue"):
                await admin.request_failover(driver, "/svc", "c")
            status = await g.status()
            assert status.epoch is not None
            pid_a = child_pid(tmp_path, "a")
            request = admin.FailoverRequest("r1", b"a", status.epoch, b"c", 1.0)
            await driver.create("/svc/failover", request.encode())
            await anyio.sleep(0.5)  # a waits for c to be next: it does not cede
            assert a.state == "active" and child_pid(tmp_path, "a") == pid_a
            # the cooling period passes on a's clock: the request is dropped, a stays active
            rules = a.supervisor._eligibility
            await wait_until(lambda: "r1" in rules.handled, "a to drop the request")
            assert a.state == "active" and g.members["c"].state == "standby"
            assert pid_a is not None and alive(pid_a) and not (tmp_path / "a.term").exists()
            x.quit()
