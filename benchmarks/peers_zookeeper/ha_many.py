"""One ``ha`` process holding many elections (one path each) on one ZooKeeper session.

Prints ``SETTLED <seconds> RSS <MiB> BASE <MiB>``: the time from starting every elector until
each one is active, the process's resident memory then, and before the electors existed.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import anyio

REPOSITORY = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.environ.get("HA_ROOT") or REPOSITORY)  # as in ha_contender.py

import ha  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Counter:
    def __init__(self, total: int) -> None:
        self.active = 0
        self.total = total
        self.all_active = anyio.Event()

    async def become_active(self, lease: ha.Lease) -> None:
        self.active += 1
        if self.active == self.total:
            self.all_active.set()


async def main(hosts: str, count: int, session_timeout: float) -> None:
    prefix = f"/many-{os.getpid()}"
    async with ha.connect(f"zk://{hosts}{prefix}?session_timeout={session_timeout}") as driver:
        base = rss_mib()
        counter = Counter(count)
        electors = [ha.Elector(driver, f"/e{i}", f"p{os.getpid()}") for i in range(count)]
        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            for elector in electors:
                tg.start_soon(elector.run, counter)
            with anyio.fail_after(120):
                await counter.all_active.wait()
            settled = time.monotonic() - started
            print(f"SETTLED {settled:.3f} RSS {rss_mib():.1f} BASE {base:.1f}", flush=True)
            for elector in electors:
                elector.quit()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", required=True)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--session-timeout", type=float, default=2.0)
    parser.add_argument("--backend", default="asyncio")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    anyio.run(main, args.hosts, args.count, args.session_timeout, backend=args.backend)
