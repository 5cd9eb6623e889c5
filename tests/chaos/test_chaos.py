"""Chaos rounds judged by the witness (tests/support/witness.py, tests/chaos/): the verdict itself on
made-up histories, a broken contender it must catch, and a few seeded rounds per backend.

CI runs ``CI_ROUNDS`` rounds per backend and event loop (about two minutes in all);
``HA_CHAOS_SEED`` moves the seeds. The long run: ``HA_CHAOS_ROUNDS=1000 pytest -m slow
tests/chaos/test_chaos.py`` or ``python -m tests.chaos --rounds 1000``. A failure prints each bad
round's seed, schedule, violations and the command that replays it.

The supervised rounds (``ha run`` attacked itself on every backend, tests/chaos/supervised.py):
``SUPERVISED_ROUNDS`` per backend; the soak: ``HA_CHAOS_ROUNDS=1000 pytest -m slow
tests/chaos/test_chaos.py -k supervised_long`` or ``python -m tests.chaos --supervised --backend
etcd --rounds 1000``.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

import ha
from ha.drivers.memory import MemoryCluster, MemoryDriver
from ha.testing import faults
from tests.chaos import Fault, RoundResult
from tests.chaos.envs import SqliteEnv
from tests.chaos.memory import MemoryRound, memory_round
from tests.chaos.procs import Fleet
from tests.chaos.reporting import summary_of
from tests.chaos.runner import BACKENDS, SUPERVISED_BACKENDS, run_backend, server_missing
from tests.chaos.supervised import Options, Plan, supervised_round
from tests.support.witness import verdict

SEED = int(os.environ.get("HA_CHAOS_SEED", "0"))
CI_ROUNDS = {
    "memory": 3,
    "sqlite": 3,
    "supervised": 2,
    "zookeeper": 2,
    "ensemble": 2,
    "etcd": 2,
    "kubernetes": 1,
}
# the FAKE API server (tests/chaos/kube_env.py): a round takes 8-20 s of the fake on 2 busy
# cores and the default suite is over its 20 min budget, so these rounds run with -m slow
SLOW_ROUNDS = ("kubernetes",)
# issue 26: the supervised rounds found the breaks of `ha run` on 55177d0 (a frozen supervisor's
# COMMAND beside the next one, a term started on stale contact, a cancelled start's COMMAND
# leaked, accepted timings that flap); with the fixes merged they run in CI (HELD: marks to
# hold them back again)
HELD: tuple[pytest.MarkDecorator, ...] = ()
SUPERVISED_ROUNDS = 1  # per backend: a round is 10-25 s on 2 cores
LOOPS = ("asyncio", "trio")
RESULTS: list[RoundResult] = []


summary = summary_of(RESULTS)  # the table of the rounds, after the tests


# --- the verdict on made-up histories -----------------------------------------------------------


def act(identity: str, epoch: int, begin: float, n: int = 0, pid: int = 0) -> dict[str, Any]:
    pid = pid or ord(identity[0])
    return {
        "kind": "act",
        "act": f"{identity}/{pid}/{n or begin}",
        "identity": identity,
        "pid": pid,
        "epoch": epoch,
        "begin": begin,
        "end": begin + 0.001,
    }


def record(n: int, epoch: int, sent: float) -> dict[str, Any]:
    return {"n": n, "epoch": epoch, "sent": sent, "act": f"x/{n}", "pid": 1}


def write(n: int, sent: float, done: float, result: str = "landed") -> dict[str, Any]:
    return {
        "kind": "write",
        "act": f"x/{n}",
        "epoch": 1,
        "sent": sent,
        "done": done,
        "result": result,
        "n": n,
    }


def kinds(violations: list[Any]) -> list[str]:
    return sorted({v.kind for v in violations})


def test_a_clean_handover_passes() -> None:
    lines = [act("a", 1, 1.0), act("a", 1, 1.1), act("b", 2, 2.0), act("b", 2, 2.1)]
    records = [record(0, 1, 1.0), record(1, 1, 1.1), record(2, 2, 2.0)]
    assert (
        verdict(lines, records, epochs_seen=[(1.5, 1), (2.05, 2)], healed_at=1.9, live_within=1.0)
        == []
    )


def test_interleaved_acts_of_two_identities_overlap() -> None:
    lines = [act("a", 1, 1.0), act("b", 2, 1.1), act("a", 1, 1.2)]
    assert kinds(verdict(lines, [])) == ["epoch order", "overlap"]


def test_an_act_that_follows_a_sigstop_is_still_judged() -> None:
    # a resumed after a pause and acted once more while b leads: only the act the stop may
    # have caught between its check and its append is excused
    lines = [act("a", 1, 1.0), act("b", 2, 2.0), act("a", 1, 2.5), act("b", 2, 2.6)]
    assert kinds(verdict(lines, [], stops=[(ord("a"), 1.2)])) == ["epoch order", "overlap"]
    late = [act("a", 1, 1.0), act("b", 2, 2.0), act("a", 1, 1.05), act("b", 2, 2.6)]
    assert verdict(late, [], stops=[(ord("a"), 1.2)]) == []  # appended late: caught by the stop
    assert kinds(verdict(late, [])) == ["epoch order"]


def test_acts_soon_after_a_forced_expiry_are_excused() -> None:
    lines = [act("a", 1, 1.0), act("b", 2, 1.3), act("a", 1, 1.35)]
    assert verdict(lines, [], expiries=[("a", 1.2)], window=0.5) == []
    assert kinds(verdict(lines, [], expiries=[("a", 0.2)], window=0.5)) != []


def test_one_epoch_two_identities() -> None:
    assert kinds(verdict([act("a", 1, 1.0), act("b", 1, 2.0)], [])) == ["epoch"]


def test_a_deposed_write_that_landed() -> None:
    # after a newer epoch's write
    records = [record(0, 1, 1.0), record(1, 2, 2.0), record(2, 1, 1.5)]
    assert kinds(verdict([], records)) == ["deposed write"]
    # sent once a newer epoch was in force (seen from outside, or acted with)
    assert kinds(verdict([], [record(0, 1, 2.0)], epochs_seen=[(1.9, 2)])) == ["deposed write"]
    assert kinds(verdict([act("b", 2, 1.5)], [record(0, 1, 2.0)])) == ["deposed write"]
    assert verdict([], [record(0, 1, 1.8)], epochs_seen=[(1.9, 2)]) == []


def test_lost_writes() -> None:
    assert kinds(verdict([], [record(0, 1, 1.0), record(2, 1, 1.1)])) == ["lost write"]
    ack = {**write(0, 1.0, 1.1), "act": "a/1/1"}
    assert kinds(verdict([ack], [])) == ["lost write"]


def test_a_refused_write_that_landed() -> None:
    refused = {**write(0, 1.0, 1.1, "refused"), "n": None}
    assert kinds(verdict([refused], [record(0, 1, 1.0)])) == ["refused write"]
    assert verdict([refused], []) == []


def test_writes_committed_against_real_time() -> None:
    # write 1 was acknowledged (1.2) before write 0 was sent (1.5): 0 cannot commit first
    records = [record(0, 1, 1.5), record(1, 1, 1.0)]
    wrong = [write(0, 1.5, 1.6), write(1, 1.0, 1.2)]
    assert kinds(verdict(wrong, records)) == ["real-time order"]
    # overlapping in time: either order is linearizable
    assert verdict([write(0, 1.5, 1.6), write(1, 1.0, 1.55)], records) == []
    # an unacknowledged write sent late can still commit before an acknowledged one it
    # overlaps, but not before one acknowledged before it was sent
    assert verdict([write(1, 1.0, 1.55)], records) == []
    assert kinds(verdict([write(1, 1.0, 1.2)], records)) == ["real-time order"]


def test_liveness_after_healing() -> None:
    lines = [act("a", 1, 1.0), act("b", 2, 5.0)]
    assert kinds(verdict(lines, [], healed_at=2.0, live_within=2.0)) == ["liveness"]
    assert verdict(lines, [], healed_at=2.0, live_within=3.5) == []


# --- the harness catches a contender that ignores its lease -----------------------------------


@pytest.mark.anyio
async def test_a_broken_contender_is_caught(anyio_backend: str, tmp_path: Path) -> None:
    """Acting without asking the lease, writing without the fence and finishing late: the
    verdict must find overlaps and deposed writes (one of a few seeded rounds suffices)."""
    found: set[str] = set()
    for seed in (0, 2, 1):
        r = await memory_round(seed, tmp_path, anyio_backend, broken=True)
        found |= {v.kind for v in r.violations}
        if {"overlap", "deposed write"} <= found:
            return
    pytest.fail(f"the witness missed a broken contender: found only {sorted(found)}")


# --- a bug the rounds found, made deterministic ------------------------------------------------


class LateToNotice(MemoryDriver):
    """Notices lost contact only when told: kazoo's read timeout outlasts the local deadline."""

    quiet = False

    def _lose_contact(self) -> None:
        if not self.quiet:
            super()._lose_contact()


class HealsWhileNeutral:
    """Stopped on its deadline, it lets the driver notice the loss; the contact comes back
    while the elector runs the enter_neutral hook (ZooKeeper reconnects within milliseconds)."""

    def __init__(self, driver: LateToNotice) -> None:
        self.driver, self.armed = driver, False

    async def become_active(self, lease: ha.Lease) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            if self.armed:
                self.driver.quiet = False
                self.driver._wake.set()

    async def enter_neutral(self) -> None:
        if self.armed:
            self.armed = False
            faults(self.driver).heal()
            while not self.driver.connected:
                await anyio.sleep(0.001)


@pytest.mark.anyio
async def test_reconnecting_while_a_lock_read_fails_does_not_strand_the_elector() -> None:
    """Found by the ensemble rounds (seed 5011, trio; seed 6015, asyncio): the local deadline
    passes while the driver still says connected, so the elector reads the lock; the read
    fails once the driver has noticed the loss, and ``Elector._op`` turns that failure into
    a ``Disconnected`` outcome. The driver's own Disconnected and Reconnected are handled
    first (driver events before outcomes): the second lock read finds the lock ours. Then the
    stale Disconnected moves the machine OFFLINE, the answer is ignored, and nothing ever
    wakes it: no active while the session lives (its lock blocks everyone else)."""
    name = f"stale-disconnect-{uuid.uuid4().hex[:6]}"
    driver = LateToNotice(name, session_timeout=1.0)
    contender = HealsWhileNeutral(driver)
    try:
        async with driver, anyio.create_task_group() as tg:
            elector = ha.Elector(driver, "/svc", "a")
            tg.start_soon(elector.run, contender)
            with anyio.fail_after(3):
                while elector.state is not ha.State.ACTIVE:
                    await anyio.sleep(0.01)
            driver.quiet = contender.armed = True
            faults(driver).partition()
            driver.delay = 0.2  # the lock read is in flight when the loss is noticed
            with anyio.fail_after(3):
                while elector.state is ha.State.ACTIVE or contender.armed:
                    await anyio.sleep(0.005)
            driver.delay = 0
            try:
                with anyio.fail_after(2):  # it holds the lock and is connected: active at once
                    while elector.state is not ha.State.ACTIVE:
                        await anyio.sleep(0.01)
            finally:
                elector.quit()
    finally:
        MemoryCluster.drop(name)


# --- chaos rounds ---------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "backend",
    [pytest.param(b, marks=pytest.mark.slow) if b in SLOW_ROUNDS else b for b in BACKENDS],
)
async def test_chaos_rounds(backend: str, anyio_backend: str, tmp_path: Path) -> None:
    await rounds(backend, CI_ROUNDS[backend], anyio_backend, tmp_path)


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.timeout(0)
@pytest.mark.parametrize("backend", BACKENDS)
async def test_chaos_long(
    backend: str, anyio_backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    count = os.environ.get("HA_CHAOS_ROUNDS")
    if not count and "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the long run: select with -m slow or HA_CHAOS_ROUNDS=N")
    await rounds(backend, int(count or 1000), anyio_backend, tmp_path)


async def rounds(backend: str, count: int, loop: str, workdir: Path) -> None:
    if reason := server_missing(backend):
        pytest.skip(f"needs a local server: {reason}")
    start = SEED + (0 if loop == "asyncio" else 100_000)
    results = await run_backend(backend, list(range(start, start + count)), loop, workdir)
    RESULTS.extend(results)
    bad = [r for r in results if r.violations]
    assert not bad, "\n\n".join(r.report() for r in bad)


# --- supervised rounds: ha run attacked itself, judged by its COMMANDs' heartbeats -----------------


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_the_supervised_rounds_catch_a_command_that_outlives_its_term(
    anyio_backend: str, tmp_path: Path
) -> None:
    """The harness can fail: the active's supervisor and guard frozen together past the session,
    its COMMAND beating from a daemon outside its process group (out of the reach of the guard's
    timer: the README's limit), the standby takes over, and the check must see the old epoch
    beat after the new one began."""
    options = Options(grace=0.2, hold=0.0, priority=0, settle=10.0, linger=0.0, detach=True)
    # six session timeouts: a standby takes over within them even on 2 cores under a load of 25
    # (in 3 one did not once: the old COMMAND was stopped on the thaw before a new one began)
    freeze = [Fault(0.2, "freeze_tree", 0.0, 6.0)]
    drawn = Plan(1.0, dict.fromkeys("abc", options), freeze, 6.5, 1.0)
    r = await supervised_round(SqliteEnv(), SEED, tmp_path, anyio_backend, drawn)
    RESULTS.append(r)
    assert "freeze_tree" in r.applied, r.report()
    assert "older epoch" in {v.kind for v in r.violations}, r.report()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", [pytest.param(b, marks=HELD) for b in SUPERVISED_BACKENDS])
def test_supervised_rounds(backend: str, tmp_path: Path) -> None:
    """``SUPERVISED_ROUNDS`` per backend; the event loop (the harness's and the supervisors')
    alternates over the backends and the seeds, so that CI sees asyncio and trio in its time."""
    loop = LOOPS[(SEED + SUPERVISED_BACKENDS.index(backend)) % 2]
    anyio.run(rounds, backend, SUPERVISED_ROUNDS, loop, tmp_path, backend=loop)


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.timeout(0)
@pytest.mark.parametrize("backend", SUPERVISED_BACKENDS)
async def test_supervised_long(
    backend: str, anyio_backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    count = os.environ.get("HA_CHAOS_ROUNDS")
    if not count and "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the long run: select with -m slow or HA_CHAOS_ROUNDS=N")
    await rounds(backend, int(count or 1000), anyio_backend, tmp_path)


@pytest.mark.anyio
async def test_a_replay_into_the_same_directory_judges_only_its_own_acts(tmp_path: Path) -> None:
    """A round stopped halfway leaves its witness file; the same seed run again into the same
    ``--keep`` directory must not read those acts as its own (they are another run's epochs)."""
    for name, make in (
        (
            "witness-etcd-7.jsonl",
            lambda: Fleet(None, RoundResult("etcd", 7, "trio", []), tmp_path, False),
        ),  # type: ignore[arg-type]
        ("witness-memory-7.jsonl", lambda: MemoryRound(7, tmp_path, "trio")),
    ):
        stale = tmp_path / name
        stale.write_text('{"id": "c", "epoch": 422}\n')
        assert make().file == stale
        assert not stale.exists()


@pytest.mark.anyio
async def test_a_command_for_the_report_keeps_every_line(tmp_path: Path) -> None:
    """A liveness miss is read from ``ha status``: its verdict is on its first lines, not only
    the last (netns etcd seed 3187 kept "...nobody to fence; `ha history /svc`)" alone)."""
    url = f"sqlite://{tmp_path / 'ha.db'}"
    env = type("Env", (), {"observer_url": lambda self: url})()
    fleet = Fleet(env, RoundResult("sqlite", 7, "trio", []), tmp_path, False)  # type: ignore[arg-type]
    await fleet.command("format", "/svc")
    await fleet.command("status", "/svc", whole=True)
    log = [line.strip().split(" ", 1)[1].strip() for line in fleet.r.log]
    assert log[0].startswith("ha format /svc -> exit 0:")
    assert log[1] == "ha status /svc -> exit 3:"
    assert all(line.startswith("|") for line in log[2:])
    said = " ".join(log[2:])
    assert "election /svc" in said and "no active: nobody is in the queue" in said


@pytest.mark.timeout(60)
def test_a_block_that_broke_keeps_the_logs_of_its_servers(tmp_path: Path) -> None:
    """The servers' logs go with their env; a block with a broken round keeps them first
    (supervised-kubernetes seed 21004: the fake API server stayed down after its restart, and
    why went with its directory)."""
    from tests.chaos.kube_env import KubernetesEnv
    from tests.chaos.runner import keep_logs

    env = KubernetesEnv(tmp_path)
    try:
        kept = keep_logs(env, tmp_path / "servers-kubernetes-7")
    finally:
        env.close()
    assert not env.server.directory.exists()  # the env's own files are gone...
    assert [p.name for p in kept] == ["kubeapi-kubeapi.log"]  # ...its log is not
    assert kept[0].read_bytes() != b""
    assert keep_logs(object(), tmp_path / "none") == []  # an env without servers keeps nothing
