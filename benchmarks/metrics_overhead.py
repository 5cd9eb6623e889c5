"""What measuring costs: ha.metrics beside prometheus_client, and a measured driver beside a bare one.

    .venv/bin/python benchmarks/metrics_overhead.py [--n 200000] [--ops 20000] [--backend trio]

- record: one counter increment and one histogram observation with two labels, through a
  cached child (as the elector's metrics and the backend wrapper hold them), ns each;
- scrape: render the registry of one `ha run` (an elector's metrics and 7 operations' latency
  histograms, every series present) against prometheus_client's generate_latest of the same
  series, µs each;
- backend op: `exists` on the memory driver, bare and wrapped by BackendMetrics.measure, µs each
  (the extra cost an elector pays per backend call: two clock readings and one observation).

Ratios are ha / peer (below 1: ha is cheaper) and measured / bare.
"""

from __future__ import annotations

import argparse
import time

import anyio
import prometheus_client as pc

from ha.drivers.memory import MemoryDriver
from ha.election.machine import State
from ha.metrics import LATENCY_BUCKETS, BackendMetrics, Registry
from ha.metrics.backend import OPERATIONS

LABELS = {"election": "/svc", "identity": "host-a"}


def per_call(fn: object, n: int) -> float:
    call = fn  # type: ignore[assignment]
    start = time.perf_counter()
    for _ in range(n):
        call()  # type: ignore[operator]
    return (time.perf_counter() - start) / n


def record(n: int) -> list[tuple[str, float, float]]:
    ours = Registry()
    c = ours.counter("x_total", "x", tuple(LABELS)).labels(**LABELS)
    h = ours.histogram("x_seconds", "x", tuple(LABELS)).labels(**LABELS)
    theirs = pc.CollectorRegistry()
    pc_c = pc.Counter("x", "x", tuple(LABELS), registry=theirs).labels(**LABELS)
    pc_h = pc.Histogram("x_seconds", "x", tuple(LABELS), buckets=LATENCY_BUCKETS, registry=theirs)
    pc_hl = pc_h.labels(**LABELS)
    return [
        ("counter inc (ns)", per_call(c.inc, n) * 1e9, per_call(pc_c.inc, n) * 1e9),
        ("histogram observe (ns)", per_call(lambda: h.observe(0.003), n) * 1e9,
         per_call(lambda: pc_hl.observe(0.003), n) * 1e9),
    ]  # fmt: skip


def scrape(n: int) -> tuple[str, float, float]:
    ours = Registry()
    theirs = pc.CollectorRegistry()
    g = ours.gauge("ha_elector_state", "s", (*LABELS, "state"))
    pg = pc.Gauge("ha_elector_state", "s", (*LABELS, "state"), registry=theirs)
    for state in State:
        g.labels(**LABELS, state=state.value).set(1.0)
        pg.labels(**LABELS, state=state.value).set(1.0)
    h = ours.histogram("ha_backend_operation_seconds", "o", ("backend", "op"))
    ph = pc.Histogram("ha_backend_operation_seconds", "o", ("backend", "op"),
                      buckets=LATENCY_BUCKETS, registry=theirs)  # fmt: skip
    for op in OPERATIONS:
        h.labels(backend="memory", op=op).observe(0.001)
        ph.labels(backend="memory", op=op).observe(0.001)
    return ("scrape render (µs)", per_call(ours.render, n) * 1e6,
            per_call(lambda: pc.generate_latest(theirs), n) * 1e6)  # fmt: skip


async def backend_op(ops: int) -> tuple[str, float, float]:
    async with MemoryDriver("bench-metrics") as bare, MemoryDriver("bench-metrics") as measured:
        BackendMetrics(Registry()).measure(measured)
        await bare.ensure_path("/x")
        best = {"bare": float("inf"), "measured": float("inf")}
        for _ in range(5):  # alternated, the best of five: the loop's warm-up counts for neither
            for name, driver in (("bare", bare), ("measured", measured)):
                start = time.perf_counter()
                for _ in range(ops):
                    await driver.exists("/x")
                best[name] = min(best[name], (time.perf_counter() - start) / ops * 1e6)
    return ("memory exists: measured vs bare (µs)", best["measured"], best["bare"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--ops", type=int, default=20_000)
    parser.add_argument("--backend", default="asyncio")
    args = parser.parse_args()
    rows = [*record(args.n), scrape(max(1, args.n // 100))]
    rows.append(anyio.run(backend_op, args.ops, backend=args.backend))
    print("| what | ha | peer | ratio |\n|---|---|---|---|")
    for what, ours, peer in rows:
        print(f"| {what} | {ours:.2f} | {peer:.2f} | {ours / peer:.2f}x |")
    print("\npeer: prometheus_client for the first three rows; the bare driver for the last")


if __name__ == "__main__":
    main()
