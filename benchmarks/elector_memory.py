"""What an idle elector holds, beside the floor of its shape in anyio.

    .venv/bin/python benchmarks/elector_memory.py [--count 2000] [--loops asyncio,trio] [--sites 12]

An elector is one task that waits for its next input inside a task group of its own (for its
term and its background writes). That shape alone costs what the ``floor`` row shows; no
elector of this design can cost less. Rows, each in a fresh process, bytes per unit from
``tracemalloc`` (live Python allocations after a collection, not the allocator's slack that
resident memory adds; ``many_elections.py`` measures that):

- ``task``: a bare task asleep;
- ``floor``: a task in its own task group waiting on an ``anyio.Event``;
- ``stream``: the same waiting on an empty memory object stream instead (the elector's inbox
  until issue 31);
- ``leader``: an ``ha.Elector`` on the memory driver, ``count`` elections with one leader each
  (its ``become_active`` returned), measured once all lead;
- ``standby``: then one more elector per election, on a second driver, measured once all
  stand by. (The drivers' session timeout is 600 s: a snapshot stalls the loop.)

The memory cluster's own nodes are the server's, not the client's, and are left out: what was
allocated under ``ha/drivers/memory/cluster.py``, and what the client allocated and handed to
it to keep (the paths and data of its nodes: a real server holds copies of its own). ``--sites N`` prints, for the elector rows,
the N sites whose allocations are held the most (the innermost frame in ``ha``).
"""

from __future__ import annotations

import argparse
import gc
import logging
import math
import os
import subprocess
import sys
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.environ.get("HA_ROOT") or str(ROOT))

import anyio  # noqa: E402

KINDS = ("task", "floor", "stream", "leader", "standby")
SERVER = "/ha/drivers/memory/cluster.py"


class Returns:
    """A contender whose work returns at once: its term holds no task (the cheapest leader)."""

    async def become_active(self, lease: object) -> None:
        return None


def _held(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, count: int) -> float:
    return sum(stat.size_diff for stat in after.compare_to(before, "filename")) / count


def _sites(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, count: int, top: int) -> None:
    held: Counter[str] = Counter()
    for stat in after.compare_to(before, "traceback"):
        if any(frame.filename.endswith(SERVER) for frame in stat.traceback):
            continue
        ours = [frame for frame in stat.traceback if "/ha/" in frame.filename]
        where = ours[-1] if ours else stat.traceback[-1]
        held[f"{where.filename.split('/ha/')[-1]}:{where.lineno}"] += stat.size_diff
    for site, size in held.most_common(top):
        print(f"SITE {size / count:8.0f} B  {site}", flush=True)


def _client(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, count: int) -> float:
    """Like ``_held``, leaving out what the memory cluster (the server) allocated."""
    held = 0
    for stat in after.compare_to(before, "traceback"):
        if not any(frame.filename.endswith(SERVER) for frame in stat.traceback):
            held += stat.size_diff
    return held / count


def _handed_over(cluster: object) -> int:
    """Bytes the client allocated and handed to the memory cluster, which keeps them: the
    paths it stores nodes under and the nodes' data (a real server holds its own copies).
    Counted by the allocation each object came from, when it was traced outside the cluster."""
    nodes: dict[str, Any] = cluster.nodes  # type: ignore[attr-defined]
    kept: dict[int, object] = {}
    for path, node in nodes.items():
        for held in (path, node.data, *node.children):
            kept[id(held)] = held
    for paths in (*cluster.ephemerals.values(), cluster.watchers):  # type: ignore[attr-defined]
        for held in paths:
            kept[id(held)] = held
    size = 0
    for held in kept.values():
        traceback = tracemalloc.get_object_traceback(held)
        if traceback is not None and not any(f.filename.endswith(SERVER) for f in traceback):
            size += sys.getsizeof(held)
    return size


async def _shapes(kind: str, count: int) -> float:
    async def asleep(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        task_status.started()
        await anyio.sleep_forever()

    async def shaped(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with anyio.create_task_group():
            task_status.started()
            await anyio.Event().wait()

    async def streamed(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        send, receive = anyio.create_memory_object_stream[object](math.inf)
        with send, receive:
            async with anyio.create_task_group():
                task_status.started()
                await receive.receive()

    body = {"task": asleep, "floor": shaped, "stream": streamed}[kind]
    async with anyio.create_task_group() as tg:
        await tg.start(body)  # the first of a kind warms anyio's caches
        gc.collect()
        before = tracemalloc.take_snapshot()
        for _ in range(count):
            await tg.start(body)
        await anyio.sleep(0.2)
        gc.collect()
        held = _held(before, tracemalloc.take_snapshot(), count)
        tg.cancel_scope.cancel()
    return held


def _start_tracing() -> tracemalloc.Snapshot:
    """Trace from now on (after the imports and warm-up: fewer traces to group)."""
    gc.collect()
    tracemalloc.start(30)
    return tracemalloc.take_snapshot()


async def _electors(kind: str, count: int, sites: int) -> float:
    import ha
    from ha.drivers.memory import MemoryDriver

    logging.disable(logging.WARNING)

    first, second = (MemoryDriver("mem-bench", session_timeout=600.0) for _ in "ab")
    await first.start()
    await second.start()
    async with anyio.create_task_group() as tg:
        warm = ha.Elector(first, "/warm", "a")
        await tg.start(warm.run, Returns())
        await warm.wait_active()
        leaders = [ha.Elector(first, f"/e{i}", "a") for i in range(count)]
        standbys = [ha.Elector(second, f"/e{i}", "b") for i in range(count)]
        measured = leaders if kind == "leader" else standbys
        for elector in leaders:
            if elector is leaders[0] and measured is leaders:
                before = _start_tracing()
            await tg.start(elector.run, Returns())
        for elector in leaders:
            await elector.wait_active()
        if measured is standbys:
            before = _start_tracing()
            for elector in standbys:
                await tg.start(elector.run, Returns())
            for elector in standbys:
                await elector.wait_state(ha.State.STANDBY)
        await anyio.sleep(0.5)
        gc.collect()
        after = tracemalloc.take_snapshot()
        held = _client(before, after, count) - _handed_over(first.cluster) / count
        if sites:
            _sites(before, after, count, sites)
        tg.cancel_scope.cancel()
    await first.aclose()
    await second.aclose()
    return held


def child(kind: str, loop: str, count: int, sites: int) -> None:
    if kind in ("task", "floor", "stream"):
        tracemalloc.start()  # the elector rows start it themselves, after their warm-up
    measure = (
        _shapes(kind, count)
        if kind in ("task", "floor", "stream")
        else _electors(kind, count, sites)
    )

    async def main() -> float:
        return await measure

    held = anyio.run(main, backend=loop)
    print(f"RESULT {held:.0f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--loops", default="asyncio,trio")
    parser.add_argument("--sites", type=int, default=0)
    parser.add_argument("--child", nargs=2, metavar=("KIND", "LOOP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.count, args.sites)
        return
    print(f"{'loop':<9}{'kind':<10}{'bytes':>9}{'KiB':>8}{'x floor':>9}", flush=True)
    for loop in args.loops.split(","):
        floor = 0.0
        for kind in KINDS:
            argv = [sys.executable, __file__, "--child", kind, loop, "--count", str(args.count)]
            if args.sites and kind in ("standby", "leader"):
                argv += ["--sites", str(args.sites)]
            out = subprocess.run(argv, capture_output=True, text=True, check=False)
            lines = out.stdout.splitlines()
            results = [line for line in lines if line.startswith("RESULT ")]
            if not results:
                print(f"{loop:<9}{kind:<10} failed: {out.stderr.strip()[-300:]}", flush=True)
                continue
            held = float(results[0].split()[1])
            floor = held if kind == "floor" else floor
            ratio = f"{held / floor:.2f}" if floor else "-"
            print(f"{loop:<9}{kind:<10}{held:>9.0f}{held / 1024:>8.1f}{ratio:>9}", flush=True)
            for line in lines:
                if line.startswith("SITE "):
                    print(f"    {line[5:]}", flush=True)


if __name__ == "__main__":
    main()
