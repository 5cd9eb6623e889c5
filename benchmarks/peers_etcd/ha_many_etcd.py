"""One ``ha`` process holding many elections (one path each) on one etcd driver connection.

Prints ``SETTLED <seconds> RSS <MiB> BASE <MiB> CPU <seconds>`` as ``peers_zookeeper/ha_many.py``
does: the time from starting every elector until each one is active, the resident memory then,
and before the electors existed, then the process's CPU time over the same span (steadier than
the wall time on a loaded machine: the elections are CPU-bound in this process) and the part of
it spent in CPython's cyclic garbage collector, with its count of full collections:
``GC <seconds> FULL <n>``; or, if they were not all active within ``--limit`` seconds,
``UNSETTLED`` and how far they got (an election that failed for good is counted, not raised).
``--profile FILE`` writes a cProfile of the run (asyncio only). ``--metrics URL`` (the server's
metrics endpoint, alone on it) adds the requests etcd served from start to settled, per
elector: ``REQUESTS txn <n> writes <n>`` (gRPC Txn calls, and raft proposals committed: write
transactions and lease grants and revokes; the rest of the Txn calls are reads).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import re
import sys
import time
import urllib.request

import anyio

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "peers_zookeeper"))
sys.path.insert(0, os.environ.get("HA_ROOT") or os.path.join(HERE, "..", ".."))

from ha_many import Counter, rss_mib  # noqa: E402

import ha  # noqa: E402
from ha.errors import ElectionFailed  # noqa: E402


class Collections:
    """CPU seconds spent in the garbage collector, and its full (oldest generation) runs."""

    def __init__(self) -> None:
        self.cpu, self.full, self._start = 0.0, 0, 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.process_time()
            return
        self.cpu += time.process_time() - self._start
        self.full += info["generation"] == 2


def served(metrics: str | None) -> tuple[int, int]:
    """etcd's count of Txn calls and of raft proposals committed so far (0, 0: not asked)."""
    if not metrics:
        return 0, 0
    with urllib.request.urlopen(metrics, timeout=5) as reply:
        text = reply.read().decode()
    txn = re.findall(r'grpc_server_handled_total\{[^}]*grpc_method="Txn"[^}]*\} (\d+)', text)
    proposals = re.search(r"^etcd_server_proposals_committed_total (\d+)", text, re.M)
    return sum(map(int, txn)), int(proposals.group(1)) if proposals else 0


async def main(
    hosts: str, count: int, session_timeout: float, limit: float, metrics: str | None = None
) -> None:
    prefix = f"/many-{os.getpid()}"
    async with ha.connect(f"etcd://{hosts}{prefix}?session_timeout={session_timeout}") as driver:
        base = rss_mib()
        counter = Counter(count)
        electors = [ha.Elector(driver, f"/e{i}", f"p{os.getpid()}") for i in range(count)]
        failed: list[str] = []

        async def run(elector: ha.Elector) -> None:
            try:
                await elector.run(counter)
            except ElectionFailed as exc:  # counted and reported, not raised
                failed.append(str(exc))

        before = served(metrics)
        collections = Collections()
        started, cpu = time.monotonic(), time.process_time()
        async with anyio.create_task_group() as tg:
            for elector in electors:
                tg.start_soon(run, elector)
            with anyio.move_on_after(limit):
                await counter.all_active.wait()
            settled, cpu = time.monotonic() - started, time.process_time() - cpu
            gc_cpu, full = collections.cpu, collections.full
            if metrics:
                after = served(metrics)
                txn, writes = ((a - b) / count for a, b in zip(after, before, strict=True))
                print(f"REQUESTS txn {txn:.2f} writes {writes:.2f} per elector", flush=True)
            if counter.all_active.is_set():
                memory = f"RSS {rss_mib():.1f} BASE {base:.1f}"
                print(
                    f"SETTLED {settled:.3f} {memory} CPU {cpu:.3f} GC {gc_cpu:.3f} FULL {full}",
                    flush=True,
                )
            else:
                print(
                    f"UNSETTLED {counter.active} of {count} active after {settled:.0f} s,"
                    f" {len(failed)} elections failed ({failed[0] if failed else ''})",
                    flush=True,
                )
            for elector in electors:
                elector.quit()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", required=True)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--session-timeout", type=float, default=2.0)
    parser.add_argument("--backend", default="asyncio")
    parser.add_argument("--limit", type=float, default=60.0, help="seconds before giving up")
    parser.add_argument("--profile", help="write a cProfile of the run to this file")
    parser.add_argument("--metrics", help="etcd's metrics URL: count the requests it served")
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)  # electors stopped unsettled say so each
    run = (main, args.hosts, args.count, args.session_timeout, args.limit, args.metrics)
    if args.profile:
        import cProfile

        cProfile.run("anyio.run(*run, backend=args.backend)", args.profile)
    else:
        anyio.run(*run, backend=args.backend)
