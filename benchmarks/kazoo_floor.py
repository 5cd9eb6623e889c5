"""The floor under many elections on ZooKeeper: kazoo's own CPU per request, no event loop.

    .venv/bin/python benchmarks/kazoo_floor.py [--requests 10000] [--zookeeper HOSTS]

One kazoo client, ``--requests`` async requests of each kind in flight at once (as a thousand
electors joining at once put them), answered on kazoo's threads; the process's CPU per request.
An elector joining a new election on ZooKeeper makes four requests (the join's transaction,
which makes the election, its node's read, the history read and written; seven when it lists
an election that was there), so ten thousand elections in one process cost at least ten
thousand times four times this, before any of ``ha``'s own work.

Starts its own ZooKeeper (Debian's package, like the tests) unless ``--zookeeper`` gives hosts.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

JOIN_REQUESTS = 4  # a new election's join on ZooKeeper (ha/election/nodes.py, history.py)


def measure(client: Any, count: int, issue: Callable[[int], Any]) -> tuple[float, float]:
    """Seconds and CPU seconds for ``count`` requests issued at once, until all answered."""
    left = [count]
    lock, done = threading.Lock(), threading.Event()

    def answered(_: object) -> None:
        with lock:
            left[0] -= 1
            if left[0] == 0:
                done.set()

    started, cpu = time.monotonic(), time.process_time()
    for i in range(count):
        issue(i).rawlink(answered)
    done.wait()
    return time.monotonic() - started, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--zookeeper", help="ZooKeeper hosts (else one is started here)")
    args = parser.parse_args()
    from kazoo.client import KazooClient

    server = None
    hosts = args.zookeeper
    if not hosts:
        from tests.support.backends.zookeeper import ZooKeeperServer

        server = ZooKeeperServer(Path(tempfile.mkdtemp(prefix="kazoo-floor-")))
        server.start()
        server.wait_serving()
        hosts = server.hosts
    client = KazooClient(hosts=hosts)
    client.start()
    try:
        base = f"/kazoo-floor-{os.getpid()}"
        client.ensure_path(base)
        kinds: dict[str, Callable[[int], Any]] = {
            "exists": lambda i: client.exists_async(f"{base}/absent{i}"),
            "create": lambda i: client.create_async(f"{base}/n{i}", b""),
        }
        n = args.requests
        print(f"{'request':<10}{'in flight':>10}{'s':>8}{'cpu s':>8}{'cpu ms/request':>16}")
        per = []
        for name, issue in kinds.items():
            seconds, cpu = measure(client, n, issue)
            per.append(cpu / n)
            print(f"{name:<10}{n:>10}{seconds:>8.2f}{cpu:>8.2f}{cpu / n * 1e3:>16.3f}")
        floor = sum(per) / len(per) * JOIN_REQUESTS * 10000
        print(
            f"floor of 10,000 joins of {JOIN_REQUESTS} requests each: {floor:.1f} CPU s in kazoo"
            f" alone; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
        )
        client.delete(base, recursive=True)
    finally:
        client.stop()
        client.close()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
