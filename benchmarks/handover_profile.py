"""Where a graceful handover's client microseconds go: counts per handover, from a profile.

    .venv/bin/python benchmarks/handover_profile.py [--rounds 100] [--backends zookeeper,etcd]
        [--loops asyncio,trio] [--top 12]

One process, one loop, two drivers on one server (started here): the leader's elector on one,
its successor's on the other. Each round the leader quits; cProfile runs from ``quit()`` until
the successor's ``become_active`` is entered, so it sees both clients' work on the loop's
thread (kazoo's threads are not profiled; the wait for the server is idle time). A fresh
elector then joins on the old leader's driver as the next standby, outside the profile.

Per handover (totals / rounds), per backend and loop: Python function calls; the profiled
time on the loop's thread less the loop's wait in ``epoll``; wake-ups (callbacks the asyncio
loop schedules, each task step among them; trio's ``reschedule`` of a task); tasks spawned;
cancel scopes entered; memory object stream sends; events set; JSON encodes and decodes and base64 calls
(the etcd gateway's); and the ``--top`` functions by own time. cProfile inflates times by about
2-3x, so the counts are the result; the times only rank. The load average is printed too.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.environ.get("HA_ROOT") or str(ROOT))

IDLE = ("<method 'poll' of 'select.epoll' objects>",)  # the loop waiting for the server
COUNTED = {  # label: (file fragment, function name) of pstats keys
    "wake-ups": [("asyncio/base_events.py", "_call_soon"), ("trio/_core/_run.py", "reschedule")],
    "task spawns": [("anyio/_backends", "_spawn"), ("trio/_core/_run.py", "spawn_impl")],
    "cancel scopes": [
        ("anyio/_backends/_asyncio.py", "__enter__"),
        ("trio/_core/_run.py", "__enter__"),
    ],
    "stream sends": [("anyio/streams/memory.py", "send_nowait")],
    "events set": [("anyio/_backends", "set")],
    "json": [("json/__init__.py", "dumps"), ("json/__init__.py", "loads")],
    "base64": [("base64.py", "b64encode"), ("base64.py", "b64decode")],
}


async def handovers(url: str, rounds: int, profile: cProfile.Profile) -> None:
    import anyio

    import ha

    class Probe:
        def __init__(self) -> None:
            self.active = anyio.Event()

        async def become_active(self, lease: ha.Lease) -> None:
            profile.disable()
            self.active.set()

    async with ha.connect(url) as one, ha.connect(url) as two, anyio.create_task_group() as tg:
        drivers = [one, two]

        async def join(index: int) -> tuple[ha.Elector, Probe]:
            probe = Probe()
            elector = ha.Elector(drivers[index % 2], "/profiled", f"c{index}")
            await tg.start(elector.run, probe)
            return elector, probe

        leader, probe = await join(0)
        await probe.active.wait()
        standby, next_probe = await join(1)
        for index in range(2, rounds + 2):
            await anyio.sleep(0.05)  # the standby's watch is set; the loop is quiet
            profile.enable()
            leader.quit()
            await next_probe.active.wait()  # the profile stops in become_active
            leader, probe = standby, next_probe
            standby, next_probe = await join(index)
        tg.cancel_scope.cancel()


def counts(stats: pstats.Stats, rounds: int) -> dict[str, float]:
    raw = stats.stats  # type: ignore[attr-defined]
    result = {"calls": sum(v[1] for v in raw.values()) / rounds}
    idle = sum(v[2] for k, v in raw.items() if k[2] in IDLE)
    result["profiled us (no poll)"] = (sum(v[2] for v in raw.values()) - idle) / rounds * 1e6
    for label, keys in COUNTED.items():
        total = 0
        for (path, _, name), value in raw.items():
            if any(fragment in path and name == wanted for fragment, wanted in keys):
                total += value[0]
        result[label] = total / rounds
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--backends", default="zookeeper,etcd")
    parser.add_argument("--loops", default="asyncio,trio")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--session-timeout", type=float, default=2.0)
    args = parser.parse_args()
    import anyio

    from tests.support.backends.etcd import EtcdServer
    from tests.support.backends.zookeeper import ZooKeeperServer

    servers: dict[str, str] = {}
    zk = etcd = None
    if "zookeeper" in args.backends:
        zk = ZooKeeperServer(Path(tempfile.mkdtemp(prefix="profile-zk-")))
        zk.start()
        zk.wait_serving()
        servers["zookeeper"] = f"zk://{zk.hosts}/profile"
    if "etcd" in args.backends:
        etcd = EtcdServer()
        etcd.start()
        servers["etcd"] = f"etcd://{etcd.hosts}/profile"
    try:
        for backend, base in servers.items():
            for loop in args.loops.split(","):
                profile = cProfile.Profile()
                url = f"{base}-{loop}?session_timeout={args.session_timeout:g}"
                anyio.run(handovers, url, args.rounds, profile, backend=loop)
                stats = pstats.Stats(profile)
                found = counts(stats, args.rounds)
                print(f"== ha-{backend} ({loop}), per handover (mean of {args.rounds}):")
                print("   " + ", ".join(f"{k} {v:.1f}" for k, v in found.items()))
                own = sorted(
                    stats.stats.items(),  # type: ignore[attr-defined]
                    key=lambda kv: kv[1][2],
                    reverse=True,
                )
                own = [kv for kv in own if kv[0][2] not in IDLE]
                for (path, line, name), value in own[: args.top]:
                    where = "/".join(Path(path).parts[-2:])
                    share = value[2] / args.rounds * 1e6
                    print(
                        f"   {share:8.1f} us own {value[1] / args.rounds:6.1f} calls  {where}:{line} {name}"
                    )
    finally:
        if zk is not None:
            zk.stop()
        if etcd is not None:
            etcd.remove()
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
