"""Fenced store write throughput against unfenced plain writes, on the same backend.

Rows, per backend:

- plain set: ``driver.set(node, pointer)``, no fence (the floor: one round trip, one op);
- plain transaction: ``transaction([SetData(node, pointer)])``, the same write as a transaction;
- fenced set: ``transaction([Check(epoch, version), SetData(node, pointer)])``, what every store
  write adds on top of its own ops;
- checkpoint add, unfenced: ``CheckpointStore.add`` (keep 1, so each add also subsumes the
  previous checkpoint) with a lease whose ``fence_ops()`` is empty: the same code and backend
  calls minus the fence;
- checkpoint add, fenced: the real thing, blobs in memory (the backend's cost alone);
- checkpoint add, fenced, file blobs: blobs in a temporary directory (temp file, fsync,
  rename, fsync of the directory): what a leader actually pays per checkpoint.

"fence cost" compares each fenced row with its unfenced twin. Rates are the median of
``--repeat`` rounds of ``--count`` writes (a quarter of that with file blobs), after a
warm-up; twins run in alternating rounds so machine load hits both alike.

    .venv/bin/python benchmarks/stores_throughput.py [--url memory://bench] [--url sqlite:///tmp/b.db]
        [--count 1000] [--repeat 5] [--backend asyncio|trio]

Without ``--url``: the memory backend and a sqlite file in a temporary directory. A ZooKeeper
URL (``zk://127.0.0.1:2181/bench``) needs a running server. Prints one table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ha.drivers import connect  # noqa: E402
from ha.drivers.base import Check, Driver, Op, SetData  # noqa: E402
from ha.election.lease import Lease  # noqa: E402
from ha.stores import (  # noqa: E402
    BlobStore,
    CheckpointStore,
    CompletedCheckpoint,
    FileBlobStore,
    Layout,
    MemoryBlobStore,
)

EPOCH = "/bench/election/epoch"
POINTER = b'{"blob":{"key":"checkpoints/job/0000000000000000001/x","sha256":"' + b"0" * 64 + b'"}}'
METADATA = b"m" * 512


class Unfenced(Lease):
    """A lease whose writes carry no fence: the store's code path without the Check op."""

    __slots__ = ()

    def fence_ops(self) -> list[Op]:
        return []


async def lease_on(driver: Driver, cls: type[Lease] = Lease) -> Lease:
    if await driver.exists(EPOCH) is None:
        await driver.create(EPOCH, b"0", makepath=True)
    data, stat = await driver.get(EPOCH)
    new = await driver.set(EPOCH, str(int(data) + 1).encode(), stat.version)
    return cls(
        election="bench",
        identity=b"bench",
        epoch=int(data) + 1,
        session_id=driver.session_id or 0,
        epoch_path=EPOCH,
        epoch_version=new.version,
    )


async def rates(
    writes: dict[str, Callable[[int], Awaitable[object]]], count: int, repeat: int
) -> list[tuple[str, float]]:
    """Median writes per second of each write, over ``repeat`` rounds of ``count`` writes.

    Rounds alternate between the writes, so that a load spike on the machine or a growing
    database file hits all of them alike rather than whichever ran last.
    """
    seq = 0
    samples: dict[str, list[float]] = {name: [] for name in writes}
    for write in writes.values():  # warm-up
        for _ in range(min(50, count)):
            seq += 1
            await write(seq)
    for _ in range(repeat):
        for name, write in writes.items():
            start = time.perf_counter()
            for _ in range(count):
                seq += 1
                await write(seq)
            samples[name].append(count / (time.perf_counter() - start))
    return [(name, statistics.median(found)) for name, found in samples.items()]


async def measure(url: str, count: int, repeat: int, blob_dir: Path) -> list[tuple[str, float]]:
    async with connect(url) as driver:
        node = "/bench/plain"
        if await driver.exists(node) is None:
            await driver.create(node, b"", makepath=True)
        unfenced = await lease_on(driver, Unfenced)
        lease = await lease_on(driver)  # the newest: its fence passes
        fence = lease.fence_ops()
        assert isinstance(fence[0], Check) and unfenced.fence_ops() == []

        async def plain_set(_: int) -> None:
            await driver.set(node, POINTER)

        async def plain_transaction(_: int) -> None:
            await driver.transaction([SetData(node, POINTER)])

        async def fenced_set(_: int) -> None:
            await driver.transaction([*fence, SetData(node, POINTER)])

        def adder(cluster: str, lease: Lease, blobs: BlobStore) -> Callable[[int], Awaitable[None]]:
            store = CheckpointStore(driver, Layout(cluster), "job", blobs, lease=lease)

            async def add(seq: int) -> None:
                await store.add(CompletedCheckpoint("job", seq, METADATA))

            return add

        files = FileBlobStore(blob_dir / url.replace("/", "_").replace(":", ""))
        rows = await rates(
            {
                "plain set (unfenced)": plain_set,
                "plain transaction (unfenced)": plain_transaction,
                "fenced set": fenced_set,
            },
            count,
            repeat,
        )
        rows += await rates(
            {
                "checkpoint add, unfenced": adder("u", unfenced, MemoryBlobStore()),
                "checkpoint add, fenced": adder("f", lease, MemoryBlobStore()),
            },
            count,
            repeat,
        )
        rows += await rates(
            {"checkpoint add, fenced, file blobs": adder("ff", lease, files)},
            max(1, count // 4),
            repeat,
        )
    return rows


def table(results: dict[str, list[tuple[str, float]]]) -> str:
    twins = {
        "fenced set": "plain transaction (unfenced)",
        "checkpoint add, fenced": "checkpoint add, unfenced",
    }
    lines = [
        f"{'backend':<28} {'write':<36} {'writes/s':>10} {'us/write':>9} {'fence cost':>11}",
        "-" * 98,
    ]
    for url, rows in results.items():
        by_name = dict(rows)
        for name, per_second in rows:
            cost = ""
            if name in twins:
                cost = f"{1 - per_second / by_name[twins[name]]:>10.1%}"
            lines.append(
                f"{url:<28} {name:<36} {per_second:>10,.0f} {1e6 / per_second:>9.1f} {cost:>11}"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", action="append", help="backend URL (repeatable)")
    parser.add_argument("--count", type=int, default=1000, help="writes per run")
    parser.add_argument("--repeat", type=int, default=5, help="rounds per row (median)")
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ha-bench-") as tmp:
        urls = args.url or ["memory://bench", f"sqlite://{tmp}/bench.db"]
        results: dict[str, list[tuple[str, float]]] = {}
        for url in urls:

            async def run(url: str = url) -> None:
                results[url.split("?")[0][:28]] = await measure(
                    url, args.count, args.repeat, Path(tmp)
                )

            anyio.run(run, backend=args.backend)
        print(
            f"store write throughput ({args.backend}; median of {args.repeat} alternating rounds "
            f"of {args.count} writes; checkpoint add keeps 1, so each add also subsumes one)"
        )
        print(table(results))


if __name__ == "__main__":
    main()
