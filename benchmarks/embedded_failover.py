"""Failover latency on the embedded (sqlite) backend, and what an idle standby costs.

Three contender processes (``python -m ha.demo worker``) share a fresh SQLite file. Each round
kills the active (SIGKILL) and measures until another contender's ``become_active`` started
(its journal record), restarts the dead one, then freezes the new active (SIGSTOP) past its
lease, measures the same way, and thaws it (SIGCONT). Then all three idle for a while and the
CPU time of each process is read from /proc.

    .venv/bin/python benchmarks/embedded_failover.py [--rounds 30] [--session-timeout 2]
        [--poll-interval 0.05] [--idle 10]

Targets (issue 4): crash p90 < 200 ms; hang within session timeout + 200 ms; an idle standby
under 1% of a core.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from urllib.parse import quote

import anyio

from ha.demo import (
    IDENTITIES,
    Failover,
    Model,
    ProcessContenders,
    check_epochs,
    crash_round,
    hang_round,
)


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def quantiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p50 = statistics.median(ordered)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return p50, p90, ordered[-1]


async def bench(url: str, workdir: str, rounds: int, idle: float) -> None:
    model = Model(IDENTITIES)
    cont = ProcessContenders(url, "/bench", model, workdir)
    failovers: list[Failover] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(cont.pump)
        try:
            for identity in IDENTITIES:
                await cont.start(identity)
            for number in range(1, rounds + 1):
                failovers.append(await crash_round(cont, model, number))
                failovers.append(await hang_round(cont, model, number))
                crash, hang = failovers[-2], failovers[-1]
                print(
                    f"round {number:3d}: crash {crash.latency * 1000:7.1f} ms,"
                    f" hang {hang.latency * 1000:7.1f} ms",
                    file=sys.stderr,
                )
            active = await model.wait_for("a settled election", model.settled)
            pids = {i: cont.pid(i) for i in IDENTITIES}
            await anyio.sleep(1.0)  # let the last rejoin's work settle
            before = {i: cpu_seconds(p) for i, p in pids.items() if p}
            t0 = time.monotonic()
            await anyio.sleep(idle)
            elapsed = time.monotonic() - t0
            after = {i: cpu_seconds(p) for i, p in pids.items() if p}
            still = model.settled()
        finally:
            await cont.aclose()
            tg.cancel_scope.cancel()
    cont.close_journal()
    problem = check_epochs(model)
    if problem:
        print(f"SAFETY PROBLEM: {problem}")

    timeout = cont.session_timeout
    print()
    print(f"embedded backend ({url.split('?')[0]}, session timeout {timeout:g}s)")
    print(f"3 contender processes, {rounds} rounds; latency = fault -> next become_active")
    print()
    print(f"{'failover':<22}{'p50':>10}{'p90':>10}{'max':>10}   target")
    crash = [f.latency * 1000 for f in failovers if f.crash]
    hang = [f.latency * 1000 for f in failovers if not f.crash]
    targets = {
        "crash (SIGKILL)": "p90 < 200 ms",
        "hang (SIGSTOP)": f"< {timeout * 1000 + 200:.0f} ms",
    }
    for name, values in (("crash (SIGKILL)", crash), ("hang (SIGSTOP)", hang)):
        p50, p90, worst = quantiles(values)
        print(f"{name:<22}{p50:>8.1f}ms{p90:>8.1f}ms{worst:>8.1f}ms   {targets[name]}")
    print()
    print(
        f"idle CPU over {elapsed:.1f}s (percent of one core); election unchanged: {still == active}"
    )
    for identity in IDENTITIES:
        role = "active" if identity == active else "standby"
        share = (after[identity] - before[identity]) / elapsed * 100
        print(f"  {identity} {role:<8} {share:5.2f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--session-timeout", type=float, default=None)
    parser.add_argument("--poll-interval", type=float, default=None)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU sampling")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="ha-bench-")
    options = []
    if args.session_timeout is not None:
        options.append(f"session_timeout={args.session_timeout:g}")
    if args.poll_interval is not None:
        options.append(f"poll_interval={args.poll_interval:g}")
    url = "sqlite://" + quote(os.path.join(workdir, "bench.db"))
    if options:
        url += "?" + "&".join(options)
    try:
        anyio.run(bench, url, workdir, args.rounds, args.idle)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
