"""Runs rounds of one backend: the environment (servers) lives across its rounds.

A backend is one of ``BACKENDS`` (contender rounds, and ``supervised``: ``ha run`` on sqlite
judged by the acts of ``command.py``), or ``supervised-<kind>`` for each kind of
``tests/chaos/supervised.py`` (``ha run`` attacked itself, judged by the COMMANDs' heartbeats).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

from tests.chaos import SUPERVISED, RoundResult
from tests.chaos.memory import memory_round
from tests.chaos.procs import process_round
from tests.chaos.supervised import KINDS, supervised_round

BACKENDS = ("memory", "sqlite", "supervised", "zookeeper", "ensemble", "etcd", "kubernetes")
SUPERVISED_BACKENDS = tuple(f"{SUPERVISED}{kind}" for kind in KINDS)


def zookeeper_missing() -> str | None:
    from tests.support.backends.zookeeper import missing_reason

    return missing_reason()


def server_missing(backend: str) -> str | None:
    """Why ``backend``'s server cannot run here (None: it can, or it needs none)."""
    backend = backend.removeprefix(SUPERVISED)
    if backend in ("zookeeper", "ensemble"):
        return zookeeper_missing()
    if backend == "etcd":
        from tests.support.backends.etcd import missing_reason

        return missing_reason()
    return None


async def run_backend(
    backend: str,
    seeds: list[int],
    loop: str,
    workdir: Path,
    on_round: Callable[[RoundResult], None] = lambda r: None,
) -> list[RoundResult]:
    # their warnings are the faults we cause; the levels are put back for whatever runs next
    # in this process (a test that checks what ha logs)
    loggers = [logging.getLogger(name) for name in ("ha", "kazoo", "httpx")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        return await _run_rounds(backend, seeds, loop, workdir, on_round)
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


async def _run_rounds(
    backend: str,
    seeds: list[int],
    loop: str,
    workdir: Path,
    on_round: Callable[[RoundResult], None],
) -> list[RoundResult]:
    results = []
    if backend == "memory":
        for seed in seeds:
            results.append(await memory_round(seed, workdir, loop))
            on_round(results[-1])
        return results
    from tests.chaos.envs import EnsembleEnv, SqliteEnv, ZooKeeperEnv
    from tests.chaos.etcd_env import EtcdEnv
    from tests.chaos.kube_env import KubernetesEnv

    kind = backend.removeprefix(SUPERVISED)
    env = {
        "sqlite": SqliteEnv,
        "supervised": SqliteEnv,
        "zookeeper": lambda: ZooKeeperEnv(workdir),
        "ensemble": lambda: EnsembleEnv(workdir),
        "etcd": lambda: EtcdEnv(workdir),
        "kubernetes": lambda: KubernetesEnv(workdir),
    }[kind]()
    try:
        for seed in seeds:
            if kind != backend:
                result = await supervised_round(env, seed, workdir, loop)
            else:
                supervised = backend == "supervised"
                result = await process_round(env, seed, workdir, loop, supervised=supervised)
            results.append(result)
            on_round(result)
    finally:
        broken = [r.seed for r in results if r.violations]
        if broken:  # the servers' logs go with their env: keep them for the first broken round
            keep_logs(env, workdir / f"servers-{backend}-{broken[0]}")
        close = getattr(env, "close", None)
        if close is not None:
            close()
    return results


def keep_logs(env: object, into: Path) -> list[Path]:
    """Copy the logs ``env.logs()`` names (if it names any) into ``into``; what was copied.
    (supervised-kubernetes seed 21004: the fake API server did not come back after its
    restart, and its log was removed with it.)"""
    kept: list[Path] = []
    for log in getattr(env, "logs", lambda: [])():
        target = into / f"{log.parent.name}-{log.name}"
        with contextlib.suppress(OSError):
            into.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(log, target)
            kept.append(target)
    return kept
