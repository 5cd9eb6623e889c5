"""Leader retrieval latency: from a new leader's publication to a retrieval seeing it.

Two contender processes' worth of HA services (each its own driver, so its own session) run
one component, ``dispatcher``, in this process. Its ``grant_leadership`` confirms at once;
publication is the moment ``confirm_leadership`` returns (the ``LeaderInfo`` written). A
retrieval (``leader_retrieval("dispatcher")``) notes ``time.monotonic_ns()`` for every value
it yields. Each round the leader closes its component (its published address is deleted and
its election lock released), the other contender takes over, grants, confirms; the round's
sample is the time from that publication to the retrieval yielding the same session id. The
old leader then rejoins as a standby, so every round is a real change of leader.

- memory: both sides in this process (the memory backend is in-process only); the retrieval
  is a task on its own driver.
- zookeeper: a real server (Debian's ZooKeeper 3.8 on a free loopback port, as the tests start
  it, unless ``--hosts`` is given); the retrieval runs in a subprocess (this script with
  ``--retrieve``) that prints a monotonic timestamp per value it sees. ``CLOCK_MONOTONIC`` is
  one clock for every process of the machine, so the two sides' stamps compare directly.

Columns, in ms (p50 / p99 / max over ``--rounds`` changes of leader; p99 is nearest-rank):

- publication -> seen: ``confirm_leadership`` returned -> the retrieval yielded the new info
  (the issue's target: under 10 ms at p99 on ZooKeeper on loopback). It can be slightly
  negative: the server may notify the watcher before the writer has read its own reply;
- grant -> seen: ``grant_leadership`` called -> seen (adds the publication's own write);
- event -> seen (ZooKeeper only): the retrieval's driver emitting its node event for the path
  (the watch fired and was re-armed) -> the retrieval yielding, i.e. its own read.

    .venv/bin/python benchmarks/services_retrieval.py [--rounds 200] [--only memory|zookeeper]
        [--hosts 127.0.0.1:2181] [--backend asyncio|trio]

Prints one table; results are not kept.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.text import TextReceiveStream

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import ha  # noqa: E402
from ha.services import HAServices, LeaderElection  # noqa: E402

COMPONENT = "dispatcher"
CLUSTER = "bench"
TIMING = ha.Timing(backoff=ha.Backoff(initial=0.005, maximum=0.05), hook_timeout=2.0)
WAIT = 30.0  # liveness bound on any one step, seconds


@dataclass
class Publication:
    session_id: uuid.UUID
    granted: int  # monotonic ns
    confirmed: int  # monotonic ns, confirm_leadership returned


@dataclass
class Sample:
    publication: Publication
    seen: int
    event: int | None = None  # the retrieval's node event, when known


class Component:
    """Confirms every grant at once and reports the publication."""

    def __init__(self, name: str, send: Callable[[Publication], None]) -> None:
        self.name = name
        self.address = f"{name}.bench:8081"
        self.send = send
        self.election: LeaderElection | None = None

    async def grant_leadership(self, session_id: uuid.UUID) -> None:
        granted = time.monotonic_ns()
        assert self.election is not None
        await self.election.confirm_leadership(session_id, self.address)
        confirmed = time.monotonic_ns()
        if self.election.has_leadership(session_id):
            self.send(Publication(session_id, granted, confirmed))

    async def revoke_leadership(self) -> None:
        pass


@dataclass
class Sightings:
    """What the retrieval saw: session id -> (seen ns, node event ns or None)."""

    seen: dict[uuid.UUID, tuple[int, int | None]] = field(default_factory=dict)
    changed: anyio.Event = field(default_factory=anyio.Event)
    values: int = 0

    def add(self, session_id: uuid.UUID | None, stamp: int, event: int | None) -> None:
        self.values += 1
        if session_id is not None:
            self.seen.setdefault(session_id, (stamp, event))
        self.changed.set()
        self.changed = anyio.Event()

    async def wait_for(self, session_id: uuid.UUID) -> tuple[int, int | None]:
        with anyio.fail_after(WAIT):
            while session_id not in self.seen:
                await self.changed.wait()
        return self.seen[session_id]


async def rounds(
    url_or_drivers: Callable[[], Any], sightings: Sightings, count: int
) -> list[Sample]:
    """Two contenders; ``count`` changes of leader; one sample per change."""
    send, receive = anyio.create_memory_object_stream[Publication](math.inf)
    samples: list[Sample] = []
    async with AsyncExitStack() as stack:
        members: list[tuple[HAServices, Component]] = []
        for name in ("a", "b"):
            svc = await stack.enter_async_context(
                ha.open_services(url_or_drivers(), CLUSTER, identity=name, timing=TIMING)
            )
            members.append((svc, Component(name, send.send_nowait)))

        async def join(member: tuple[HAServices, Component]) -> None:
            svc, component = member
            component.election = svc.leader_election(COMPONENT)
            await component.election.start(component)

        async def next_publication() -> Publication:
            with anyio.fail_after(WAIT):
                return await receive.receive()

        await join(members[0])
        first = await next_publication()
        await sightings.wait_for(first.session_id)
        await join(members[1])
        await anyio.sleep(0.2)  # let the standby's elector settle
        leader = members[0]
        for _ in range(count):
            assert leader[1].election is not None
            await leader[1].election.close()  # unpublish, release the lock: the other wins
            publication = await next_publication()
            seen, event = await sightings.wait_for(publication.session_id)
            samples.append(Sample(publication, seen, event))
            await join(leader)  # rejoin as standby
            leader = members[1] if leader is members[0] else members[0]
            await anyio.sleep(0.01)  # let the standby's watch on the lock be armed
    return samples


# --- memory: everything in this process ------------------------------------------------------


async def measure_memory(count: int) -> list[Sample]:
    url = f"memory://bench-retrieval-{uuid.uuid4().hex[:8]}"
    sightings = Sightings()
    async with ha.open_services(url, CLUSTER, identity="reader") as reader:
        async with anyio.create_task_group() as tg:

            async def retrieve(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                async with reader.leader_retrieval(COMPONENT) as retrieval:
                    task_status.started()
                    async for info in retrieval:
                        stamp = time.monotonic_ns()
                        sightings.add(info.session_id if info else None, stamp, None)

            await tg.start(retrieve)
            samples = await rounds(lambda: url, sightings, count)
            tg.cancel_scope.cancel()
    return samples


# --- zookeeper: the retrieval in a subprocess ------------------------------------------------


async def retrieve_main(url: str) -> None:
    """The subprocess: print ``SEEN <ns> <event ns|-> <session id|none>`` per value yielded."""
    last_event: list[int | None] = [None]
    async with ha.open_services(url, CLUSTER, identity="reader") as reader:
        retrieval = reader.leader_retrieval(COMPONENT)
        with reader.driver.subscribe(
            retrieval.path, lambda _e: last_event.__setitem__(0, time.monotonic_ns())
        ):
            async with retrieval:
                async for info in retrieval:
                    stamp = time.monotonic_ns()
                    event, last_event[0] = last_event[0], None
                    sid = str(info.session_id) if info else "none"
                    print(f"SEEN {stamp} {event if event is not None else '-'} {sid}", flush=True)


@asynccontextmanager
async def retriever_process(url: str, backend: str) -> AsyncIterator[Sightings]:
    sightings = Sightings()
    command = [sys.executable, __file__, "--retrieve", url, "--backend", backend]
    async with await anyio.open_process(command, stderr=None) as process:
        assert process.stdout is not None
        ready = anyio.Event()

        async def read() -> None:
            buffer = ""
            async for chunk in TextReceiveStream(process.stdout):  # type: ignore[arg-type]
                buffer += chunk
                *lines, buffer = buffer.split("\n")
                for line in lines:
                    word, stamp, event, sid = (line.split() + ["", "", "", ""])[:4]
                    if word != "SEEN":
                        continue
                    sightings.add(
                        None if sid == "none" else uuid.UUID(sid),
                        int(stamp),
                        None if event == "-" else int(event),
                    )
                    ready.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            with anyio.fail_after(WAIT):
                await ready.wait()  # its first value (None): it is watching
            try:
                yield sightings
            finally:
                process.terminate()
                tg.cancel_scope.cancel()


async def measure_zookeeper(hosts: str, count: int, backend: str) -> list[Sample]:
    url = f"zk://{hosts}/bench-retrieval-{uuid.uuid4().hex[:8]}?session_timeout=5"
    from ha.drivers import connect

    async with connect(url) as driver:  # create the chroot before the retrieval starts
        await driver.ensure_path("/ha")
    async with retriever_process(url, backend) as sightings:
        return await rounds(lambda: url, sightings, count)


def start_server(directory: Path) -> tuple[str, Callable[[], None]]:
    from tests.support.backends.zookeeper import ZooKeeperServer, missing_reason

    reason = missing_reason()
    if reason:
        raise SystemExit(f"cannot start ZooKeeper: {reason}")
    server = ZooKeeperServer(directory)
    server.start()
    try:
        server.wait_serving()
    except BaseException:
        server.stop()
        raise
    return server.hosts, server.stop


# --- the table --------------------------------------------------------------------------------


def stats(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p99 = ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]
    return statistics.median(ordered), p99, ordered[-1]


def cells(values: list[float]) -> str:
    if not values:
        return f"{'-':>8} {'-':>8} {'-':>8}"
    p50, p99, top = stats(values)
    return f"{p50:8.2f} {p99:8.2f} {top:8.2f}"


def table(results: dict[str, list[Sample]]) -> str:
    head = (
        f"{'backend':<26} {'n':>4}   {'publication -> seen':^26}   {'grant -> seen':^26}"
        f"   {'event -> seen':^26}"
    )
    sub = f"{'':<26} {'':>4}   " + "   ".join([f"{'p50':>8} {'p99':>8} {'max':>8}"] * 3)
    lines = [head, sub, "-" * len(sub)]
    for name, samples in results.items():
        published = [(s.seen - s.publication.confirmed) / 1e6 for s in samples]
        granted = [(s.seen - s.publication.granted) / 1e6 for s in samples]
        event = [(s.seen - s.event) / 1e6 for s in samples if s.event is not None]
        lines.append(
            f"{name:<26} {len(samples):>4}   {cells(published)}   {cells(granted)}   {cells(event)}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=200, help="changes of leader per backend")
    parser.add_argument("--only", choices=["memory", "zookeeper"], help="one backend only")
    parser.add_argument("--hosts", help="an existing ZooKeeper (default: start one)")
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    parser.add_argument("--retrieve", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.retrieve:
        try:
            anyio.run(retrieve_main, args.retrieve, backend=args.backend)
        except KeyboardInterrupt:
            pass
        return
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")

    results: dict[str, list[Sample]] = {}
    if args.only in (None, "memory"):
        print(f"memory: {args.rounds} changes of leader...", file=sys.stderr)
        results["memory (one process)"] = anyio.run(
            measure_memory, args.rounds, backend=args.backend
        )
    if args.only in (None, "zookeeper"):
        with tempfile.TemporaryDirectory(prefix="ha-retrieval-") as tmp:
            stop: Callable[[], None] = lambda: None  # noqa: E731
            hosts = args.hosts
            if not hosts:
                hosts, stop = start_server(Path(tmp) / "zookeeper")
            try:
                print(f"zookeeper: {args.rounds} changes of leader...", file=sys.stderr)
                results["zookeeper (2 processes)"] = anyio.run(
                    measure_zookeeper, hosts, args.rounds, args.backend, backend=args.backend
                )
            finally:
                stop()

    print(
        f"\nleader retrieval latency ({args.backend}; {args.rounds} changes of leader by a"
        " graceful close; ms)"
    )
    print(table(results))


if __name__ == "__main__":
    main()
