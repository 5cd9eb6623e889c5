"""Network rounds: servers and contenders on hosts of their own, faults at the packet level.

Every host is a network namespace joined to a bridge by a veth pair (``hosts.py``); a
ZooKeeper ensemble, an etcd cluster (three members, each on its own host), the Kubernetes
FAKE API server, and the three contender processes run there (``servers.py``, ``envs.py``),
talking real TCP with no proxy in the way. A seeded schedule of nemeses (``envs.py``:
partitions, a bridge node, one-way drops and packet loss with nftables inside the hosts,
``tc netem`` delay where the kernel has it, SIGSTOP/SIGKILL of contenders and members, each
contender's clocks) runs for ``tests.chaos.SPAN`` seconds, then everything heals and some
contender must act again. The judge runs outside, in the root namespace, reaching every host
through the bridge: the witness file (``tests/support/witness.py``: no two actives' acts
overlap, one identity per epoch) and the history of the fenced writes (every acknowledged
write present and no refused one, writes in epoch order, no write of a deposed epoch after a
newer one's first, commit order agreeing with real time).

Replay a round: ``python -m tests.netns --backend etcd --seed 7 --rounds 1 --loop trio``;
the soak: ``--rounds 1000`` (or ``HA_NETNS_ROUNDS=1000 pytest -m slow tests/netns``). A seed
fixes the schedule, the fault's own draws and the clocks; which process a draw hits depends on
who leads then, so a replay repeats the schedule, not every interleaving.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tests.chaos import FAULTS, LENGTHS, SPAN, Fault, RoundResult

if TYPE_CHECKING:
    from tests.chaos.supervised import Plan
    from tests.netns.envs import NetEnv

__all__ = ("BACKENDS", "missing", "run_rounds", "schedule")

BACKENDS = ("zookeeper", "etcd", "kubernetes", "sqlite")
CONTENDER_KINDS = {"kill": 2, "pause": 2, "restart": 1}  # the fleet's own
LONGER = ("partition", "bridge", "isolate")  # twice as long: a session must have time to end


def schedule(kind: str, seed: int, weights: dict[str, int]) -> list[Fault]:
    """The faults of round ``seed`` on ``kind`` (``weights``: the env's own kinds)."""
    rng = random.Random(f"netns-{kind}-{seed}")
    table = {**CONTENDER_KINDS, **weights}
    kinds, chances = list(table), list(table.values())
    faults = []
    for t in sorted(rng.uniform(0, SPAN) for _ in range(FAULTS)):
        what = rng.choices(kinds, chances)[0]
        pick, length = round(rng.random(), 3), rng.choice(LENGTHS)
        faults.append(Fault(round(t, 3), what, pick, length * (2 if what in LONGER else 1)))
    return faults


def missing(backend: str) -> str | None:
    """Why network rounds on ``backend`` cannot run here (None: they can)."""
    from tests.netns.hosts import refused

    if reason := refused():
        return reason
    if backend == "zookeeper":
        from tests.support.backends.zookeeper import missing_reason

        return missing_reason()
    if backend == "etcd":
        from tests.support.backends.etcd import missing_reason as etcd_missing

        return etcd_missing()
    return None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The faults' warnings are what we cause; levels are put back for what runs next."""
    loggers = [logging.getLogger(name) for name in ("ha", "kazoo", "httpx")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


async def supervised_plan(backend: str, seed: int, env: NetEnv) -> Plan:
    """The supervised round ``seed``: ``tests/chaos/supervised.py``'s draw of the session
    timeout and of each ``ha run``'s options, with faults drawn here: its supervisor faults
    and this env's (clock faults aside: see ``Clocks.host_only``)."""
    from tests.chaos.supervised import FAULTS as COUNT
    from tests.chaos.supervised import LENGTHS as SPANS
    from tests.chaos.supervised import SUPERVISOR_KINDS, plan

    drawn = await plan(backend, seed, env)  # type: ignore[arg-type]
    rng = random.Random(f"netns-supervised-{backend}-{seed}")
    own = {k: w for k, w in env.weights.items() if not k.startswith("clock_")}
    table = {**SUPERVISOR_KINDS, **own}
    faults = []
    for at in sorted(rng.uniform(0, drawn.span) for _ in range(COUNT)):
        what = rng.choices(list(table), list(table.values()))[0]
        faults.append(Fault(round(at, 3), what, round(rng.random(), 3), rng.choice(SPANS)))
    return dataclasses.replace(drawn, faults=faults)


async def run_rounds(
    backend: str,
    seeds: list[int],
    loop: str,
    workdir: Path,
    on_round: Callable[[RoundResult], None] = lambda r: None,
    supervised: bool = False,
) -> list[RoundResult]:
    """Rounds of ``backend`` (its servers live across them), one per seed; ``supervised``:
    three ``ha run`` judged by their COMMANDs' heartbeats (tests/chaos/supervised.py)."""
    import anyio.to_thread

    from tests.chaos.procs import process_round
    from tests.chaos.supervised import supervised_round
    from tests.netns.envs import ENVS

    results = []
    with _quiet():
        env = await anyio.to_thread.run_sync(ENVS[backend], workdir)
        try:
            for seed in seeds:
                if supervised:
                    env.supervised = True
                    await env.begin(seed, workdir)  # the plan connects to this round's prefix
                    drawn = await supervised_plan(backend, seed, env)
                    r = await supervised_round(env, seed, workdir, loop, drawn)  # type: ignore[arg-type]
                else:
                    faults = schedule(env.kind, seed, env.weights)
                    r = await process_round(env, seed, workdir, loop, faults=faults)  # type: ignore[arg-type]
                r.setup += list(env.clocks.notes)
                for kind, n in env.clocks.drawn.items():
                    r.applied[f"clock_{kind}"] += n
                results.append(r)
                on_round(r)
        finally:
            broken = [r.seed for r in results if r.violations]
            keep = workdir / f"servers-{backend}-{broken[0]}" if broken else None
            await anyio.to_thread.run_sync(env.close, keep)
    return results
