"""The floor of a handover's client share on anyio: the task switches any elector built of an
input loop and a term task makes, with no election logic, no JSON and no server.

    .venv/bin/python benchmarks/handover_floor.py [--rounds 2000] [--loops asyncio,trio]
        [--gap MS]

``ha``'s client share (``handover_share.py``) is two parts, and each has a least shape that a
contender on anyio cannot avoid while it keeps its guarantees:

- the old leader, ``quit -> written``: the quit reaches the elector's loop (a task: the caller
  may be anywhere), which cancels the term's task and its watchdog's and waits until the work
  has returned (a deposed leader never acts), then writes its leave to the socket;
- the successor, ``read -> active``: the reader task gets the event's bytes and hands them to
  the elector's loop (a task: it decides), which starts the term in a task of its own (the
  work is cancelled apart from the loop).

This runs exactly those steps, on one loop, over a loopback TCP connection between the two
sides, and prints the p50 and p90 of each part and of their sum per round (``share``), in
microseconds, per loop and shape: ``running`` (the old leader's work runs until cancelled, as
``ha run``'s does) and ``returned`` (its ``become_active`` has returned, as the contenders of
``handover_share.py`` and ``etcd_failover.py`` do: the quit cancels nothing and waits for
nothing). Beside ``handover_share.py``'s table it says how much of ``ha``'s share is the
structure (this) and how much is ``ha``'s own work. Prints the load average.

``--gap MS`` idles the process that long before each round (default 0: back to back, warm).
A contender idles between handovers: its code and data are out of the CPU's caches when the
event comes, and each step costs several times its warm cost (``handover_share.py``). With a
gap of half a second or more this floor is the cold one, the one ``handover_share.py``'s
figures are to be held against.

What it showed (issue 31, quiet machine, 2 cores; us, p50 of the share):

    shape, loop            warm (2,000 rounds)   cold (--gap 500, 100 rounds)
    returned, asyncio      169                   301
    returned, trio         204                   327
    running, asyncio       325                   572
    running, trio          407                   460

``handover_share.py`` measures the ``returned`` shape, cold: the issue's 0.3 ms for ``ha``'s
whole share is what this structure alone costs there, with nothing left for the machine, the
lease, the report, the driver's request and the event's HTTP and JSON. ``ha``'s share in the
same session was 1.39-1.76 ms.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import anyio
import anyio.abc

PAYLOAD = b"x" * 180  # about a leave transaction's request


async def rounds(count: int, returned: bool, gap: float) -> list[tuple[float, float]]:
    """``count`` handovers of the least shape; per round (quit->written, read->active) in us."""
    results: list[tuple[float, float]] = []
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        accepted: list[anyio.abc.SocketStream] = []

        async def accept(stream: anyio.abc.SocketStream) -> None:
            accepted.append(stream)
            await anyio.sleep_forever()

        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, accept)
            old_side = await anyio.connect_tcp("127.0.0.1", port)
            while not accepted:
                await anyio.sleep(0.001)
            new_side = accepted[0]
            for _ in range(count):
                if gap:
                    await anyio.sleep(gap)
                results.append(await one(tg, old_side, new_side, returned))
            tg.cancel_scope.cancel()
    return results


async def one(
    tg: anyio.abc.TaskGroup,
    old_side: anyio.abc.SocketStream,
    new_side: anyio.abc.SocketStream,
    returned: bool,
) -> tuple[float, float]:
    clock = time.perf_counter_ns
    stamps: dict[str, int] = {}
    inbox_send, inbox = anyio.create_memory_object_stream[str](math.inf)
    next_send, next_inbox = anyio.create_memory_object_stream[bytes](math.inf)
    term, watch, done = anyio.CancelScope(), anyio.CancelScope(), anyio.Event()
    led = anyio.Event()

    async def work() -> None:  # the old leader's term
        try:
            with term:
                await anyio.sleep_forever()
        finally:
            done.set()

    async def watchdog() -> None:
        with watch:
            await anyio.sleep(3600)

    async def old_loop() -> None:  # the old leader's elector: a quit stops the work, then leave
        await inbox.receive()
        if not returned:
            term.cancel()
            watch.cancel()
            await done.wait()
        await old_side.send(PAYLOAD)
        stamps["written"] = clock()

    async def reader() -> None:  # the successor's driver
        data = await new_side.receive()
        stamps["read"] = clock()
        next_send.send_nowait(data)

    async def new_term() -> None:
        stamps["active"] = clock()
        led.set()

    async def new_loop() -> None:  # the successor's elector: starts the term in a task
        await next_inbox.receive()
        tg.start_soon(new_term, name="term")

    if not returned:
        tg.start_soon(work, name="work")
        tg.start_soon(watchdog, name="watchdog")
    tg.start_soon(old_loop, name="old loop")
    tg.start_soon(reader, name="reader")
    tg.start_soon(new_loop, name="new loop")
    await anyio.sleep(0.002)  # every task waits
    stamps["quit"] = clock()
    inbox_send.send_nowait("quit")
    await led.wait()
    return (
        (stamps["written"] - stamps["quit"]) / 1000,
        (stamps["active"] - stamps["read"]) / 1000,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--loops", default="asyncio,trio")
    parser.add_argument("--gap", type=float, default=0.0, help="ms idle before each round")
    args = parser.parse_args()
    print(f"{'':<20}{'quit->written':>16}{'read->active':>16}{'share':>10}{'share p90':>11}")
    for loop in args.loops.split(","):
        for shape in ("running", "returned"):
            found = anyio.run(
                rounds, args.rounds, shape == "returned", args.gap / 1000, backend=loop
            )[10:]  # the first warm up
            quit_written = statistics.median(q for q, _ in found)
            read_active = statistics.median(r for _, r in found)
            shares = sorted(q + r for q, r in found)
            p50, p90 = statistics.median(shares), shares[int(len(shares) * 0.9)]
            print(
                f"{loop + ', ' + shape:<20}{quit_written:16.1f}{read_active:16.1f}{p50:10.1f}"
                f"{p90:11.1f}"
            )
    print(
        f"us, p50 of {args.rounds} rounds (share: per round, then p50), {args.gap:g} ms idle"
        f" before each; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )


if __name__ == "__main__":
    main()
