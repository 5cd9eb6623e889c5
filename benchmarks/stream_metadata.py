"""A stream's metadata as it ages: the tree's size and a takeover's cost, on every backend.

A stream of ``--batches`` micro-batches (100,000 by default) goes through the real commit path,
without Spark: each batch is a staged directory of one small file, recorded by
``stream_commit.commit_micro_batch`` (a fenced transaction that also compacts the log) and
renamed into view. At each checkpoint (1k, 10k, 100k batches, and the end) the run prints:

- records: the commit records kept (``record_ids``);
- tree: the bytes ``ha`` keeps on the backend for the cluster, the election included: on
  Kubernetes the ConfigMap's size as the API server counts it, against its limit
  (``Driver.tree_size``); elsewhere the sum of every node's path and data (walked);
- takeover: what a new active pays to learn the stream's position and go on, the median of
  ``--takeovers`` takeovers: another driver joins the election first (the old active's
  queue node and breadcrumb deleted, so its fenced writes fail from then on), counts the
  committed batches (``count_commits``) and commits the next one. Each takeover's batch is
  part of the stream; ``position`` is the count alone, the part that depends on the log;
- commit: the mean time of one micro-batch's commit since the last checkpoint.

Backends: memory, sqlite (a file in a temporary directory), ZooKeeper and etcd (Debian's
servers, started here on free ports) and Kubernetes (the FAKE API server of
``tests/support/kubeapi``, started here: no real one can run on these machines).
``etcd-compacted`` is etcd whose history is compacted every 1,000 batches, as an operator's
``--auto-compaction-mode=revision`` would (and Kubernetes' API server does for its own etcd):
etcd keeps every deleted key until its history is compacted, and a listing walks them, so
on plain etcd a takeover's listing slows as the stream ages though the log does not grow.
``--window`` is the number of records kept besides the newest (``stream_commit.WINDOW``); a
window larger than the stream keeps every record, which is what ``ha`` did before the log
compacted (on Kubernetes the ConfigMap is then full after about 5,000 batches: the run
says so and stops that backend).

    .venv/bin/python benchmarks/stream_metadata.py                       # 100,000 batches
    .venv/bin/python benchmarks/stream_metadata.py --batches 2000 --backends memory,sqlite
    .venv/bin/python benchmarks/stream_metadata.py --batches 6000 --window 1000000000

The output directories live in ``/dev/shm`` where it exists (the file system is not what is
measured). Prints one table.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ha.drivers import connect  # noqa: E402
from ha.drivers.base import Driver  # noqa: E402
from ha.drivers.kubernetes.tree import TooLarge  # noqa: E402
from ha.election.lease import Lease  # noqa: E402
from ha.election.names import Breadcrumb, ticket_for  # noqa: E402
from ha.election.nodes import ElectionNodes  # noqa: E402
from ha.errors import NoNode  # noqa: E402
from ha.pipeline.commit import STAGING, batch_dir  # noqa: E402
from ha.pipeline.commit.stream_commit import (  # noqa: E402
    WINDOW,
    commit_micro_batch,
    count_commits,
    record_ids,
)
from ha.pipeline.layout import JobLayout  # noqa: E402
from ha.stores import Writer  # noqa: E402

BACKENDS = ("memory", "sqlite", "zookeeper", "etcd", "etcd-compacted", "kubernetes")
COMPACT_EVERY = 1_000  # batches between compactions of etcd's history (etcd-compacted)
JOB = "stream"
ROWS = b"x" * 200  # a micro-batch's file: its size does not matter to the metadata


@dataclass(frozen=True, slots=True)
class Row:
    backend: str
    batches: int
    records: int
    tree_bytes: int
    limit: int | None
    takeover_ms: float
    position_ms: float
    commit_ms: float
    note: str = ""


# --- the servers ------------------------------------------------------------------------------


Maintain = Callable[[], object]


@contextlib.contextmanager
def backend_url(name: str, directory: Path) -> Iterator[tuple[str, Maintain | None]]:
    """A URL of a fresh root on ``name``, its server started here (and stopped after), and
    what the server's operator does every ``COMPACT_EVERY`` batches, if anything."""
    if name == "memory":
        yield f"memory://stream-{secrets.token_hex(4)}", None
    elif name == "sqlite":
        yield f"sqlite://{directory / 'ha.db'}", None
    elif name == "zookeeper":
        from tests.support.backends.zookeeper import ZooKeeperServer, missing_reason

        if reason := missing_reason():
            raise Unavailable(reason)
        server = ZooKeeperServer(directory)
        server.start()
        try:
            server.wait_serving()
            yield f"zk://{server.hosts}/bench?session_timeout=10", None
        finally:
            server.stop()
    elif name in ("etcd", "etcd-compacted"):
        from tests.support.backends.etcd import EtcdServer
        from tests.support.backends.etcd import missing_reason as etcd_missing

        if reason := etcd_missing():
            raise Unavailable(reason)
        etcd = EtcdServer()
        etcd.start()
        try:
            compact = etcd.compact if name == "etcd-compacted" else None
            yield f"etcd://{etcd.hosts}/bench?session_timeout=10", compact
        finally:
            etcd.remove()
    elif name == "kubernetes":
        from tests.support.backends.kubernetes import write_kubeconfig
        from tests.support.kubeapi.process import FakeKubeApi

        api = FakeKubeApi(directory / "kubeapi")
        api.start()
        try:
            api.create_namespace("bench")
            config = write_kubeconfig(directory, api.url, "bench")
            yield f"k8s://bench/stream?kubeconfig={config}&session_timeout=10", None
        finally:
            api.remove()
    else:
        raise SystemExit(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})")


class Unavailable(Exception):
    """The backend's server is not installed here."""


# --- the stream -------------------------------------------------------------------------------


async def take_lead(driver: Driver, election: str) -> Lease:
    """Lead as the elector does once the older leaders are gone: their queue nodes deleted
    (their fenced writes fail from now on), ours joins first; its creation order is the epoch."""
    nodes = ElectionNodes(election)
    for entry in await nodes.entries(driver):
        with contextlib.suppress(NoNode):
            await driver.delete(nodes.node(entry.name))
    for ticket in await driver.children(nodes.crumbs) if await driver.exists(nodes.crumbs) else []:
        with contextlib.suppress(NoNode):  # fenced: the elector clears them so
            await driver.delete(nodes.crumb(ticket))
    ticket = ticket_for(b"bench", secrets.token_hex(4))
    node = nodes.node(await nodes.join(driver, ticket, Breadcrumb(b"bench")))
    _, stat = await driver.get(node)
    session = driver.session_id or 0
    return Lease(election, b"bench", stat.created, session, node, _on_fenced=lambda: None)


def stage(output: Path, batch_id: int) -> Path:
    staging = output / STAGING / f"batch-{batch_id:05d}.{secrets.token_hex(4)}"
    staging.mkdir(parents=True)
    (staging / "part-00000.parquet").write_bytes(ROWS)
    return staging


async def tree_bytes(driver: Driver, root: str) -> tuple[int, int | None]:
    """The bytes ``ha`` keeps under ``root``, and the backend's limit on them (if any)."""
    size = await driver.tree_size()
    if size is not None:
        return size.used, size.limit
    total, pending = 0, [root]
    while pending:
        path = pending.pop()
        try:
            data, _ = await driver.get(path)
            names = await driver.children(path)
        except NoNode:
            continue
        total += len(path) + len(data)
        pending += [f"{path.rstrip('/')}/{name}" for name in names]
    return total, None


@contextlib.asynccontextmanager
async def drivers(url: str) -> AsyncIterator[tuple[Driver, Driver]]:
    async with connect(url) as first, connect(url) as second:
        yield first, second


async def stream(
    name: str,
    url: str,
    maintain: Maintain | None,
    output: Path,
    checkpoints: list[int],
    args: Args,
) -> list[Row]:
    layout = JobLayout("bench", "/ha")
    election = f"{layout.root}/election"
    rows: list[Row] = []
    async with drivers(url) as (first, second):
        await first.ensure_path(layout.root)
        writer = Writer(first, await take_lead(first, election))
        spent, done = 0.0, 0
        n = 0

        async def commit(writer: Writer, batch_id: int) -> float:
            staged = stage(output, batch_id)
            start = time.perf_counter()
            await commit_micro_batch(
                writer, layout, JOB, batch_id, staged, str(output), window=args.window
            )
            took = time.perf_counter() - start
            if batch_id:
                shutil.rmtree(batch_dir(output, batch_id - 1), ignore_errors=True)
            return took

        for mark in checkpoints:
            try:
                while n < mark:
                    spent += await commit(writer, n)
                    n, done = n + 1, done + 1
                    if maintain is not None and n % COMPACT_EVERY == 0:  # not timed
                        await anyio.to_thread.run_sync(maintain)
            except TooLarge as exc:
                used, limit = await tree_bytes(first, "/")
                records = len(await record_ids(first, layout, JOB))
                print(f"  {name}: the tree is full at batch {n}: {exc}", file=sys.stderr)
                nan = float("nan")
                rows.append(Row(name, n, records, used, limit, nan, nan, 0.0, "full"))
                return rows
            commit_ms = 1000 * spent / max(done, 1)
            spent, done = 0.0, 0
            records = len(await record_ids(first, layout, JOB))
            used, limit = await tree_bytes(first, "/")
            takeovers, positions = [], []
            for _ in range(args.takeovers):  # each on the other driver, one batch each
                first, second = second, first
                start = time.perf_counter()
                writer = Writer(first, await take_lead(first, election))
                counted = time.perf_counter()
                position = await count_commits(first, layout, JOB)
                positions.append(time.perf_counter() - counted)
                assert position == n, (position, n)
                await commit(writer, n)
                takeovers.append(time.perf_counter() - start)
                n += 1
            takeover = 1000 * statistics.median(takeovers)
            position_ms = 1000 * statistics.median(positions)
            rows.append(Row(name, mark, records, used, limit, takeover, position_ms, commit_ms))
            print(  # the row as it is measured: a long run stopped early keeps its rows
                f"  {name}: {mark} batches, {records} records, {used} bytes, takeover"
                f" {takeover:.2f} ms (position {position_ms:.2f}), commit {commit_ms:.2f} ms",
                file=sys.stderr,
                flush=True,
            )
    return rows


# --- the run ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Args:
    batches: int
    window: int
    takeovers: int


def checkpoints_for(batches: int) -> list[int]:
    marks = [m for m in (1_000, 10_000, 100_000) if m < batches]
    return [*marks, batches]


def output_root() -> Path:
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="ha-stream-metadata-", dir=base))


async def run_backend(name: str, args: Args) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix=f"ha-bench-{name}-") as tmp:
        output = output_root()
        try:
            with backend_url(name, Path(tmp)) as (url, maintain):
                marks = checkpoints_for(args.batches)
                return await stream(name, url, maintain, output / "out", marks, args)
        except Unavailable as exc:
            print(f"  {name}: skipped ({exc})", file=sys.stderr)
            return []
        finally:
            shutil.rmtree(output, ignore_errors=True)


def table(rows: list[Row], args: Args) -> str:
    head = (
        f"{'backend':<14} {'batches':>8} {'records':>8} {'tree bytes':>11} {'limit':>9}"
        f" {'used':>6} {'takeover ms':>12} {'position ms':>12} {'commit ms':>10}"
    )
    lines = [
        f"stream commit log, window {args.window}, {args.takeovers} takeovers per checkpoint",
        head,
        "-" * len(head),
    ]
    for r in rows:
        limit = "-" if r.limit is None else str(r.limit)
        used = "-" if r.limit is None else f"{r.tree_bytes / r.limit:.1%}"
        takeover = r.note or f"{r.takeover_ms:.2f}"
        position = r.note or f"{r.position_ms:.2f}"
        lines.append(
            f"{r.backend:<14} {r.batches:>8} {r.records:>8} {r.tree_bytes:>11} {limit:>9}"
            f" {used:>6} {takeover:>12} {position:>12} {r.commit_ms:>10.2f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=100_000, help="micro-batches per backend")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated")
    parser.add_argument(
        "--window", type=int, default=WINDOW, help="records kept besides the newest"
    )
    parser.add_argument("--takeovers", type=int, default=5, help="per checkpoint (median)")
    parser.add_argument("--backend", default="asyncio", choices=("asyncio", "trio"))
    ns = parser.parse_args()
    if ns.batches < 1 or ns.takeovers < 1 or ns.window < 1:
        parser.error("--batches, --takeovers and --window must be at least 1")
    args = Args(ns.batches, ns.window, ns.takeovers)
    rows: list[Row] = []
    for name in [b.strip() for b in ns.backends.split(",") if b.strip()]:
        if name not in BACKENDS:
            parser.error(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})")
        print(f"{name}: {args.batches} batches", file=sys.stderr)
        started = time.monotonic()
        rows += anyio.run(run_backend, name, args, backend=ns.backend)
        print(f"  {name}: {time.monotonic() - started:.0f} s", file=sys.stderr)
    print(table(rows, args))


if __name__ == "__main__":
    main()
