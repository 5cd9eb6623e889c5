"""Leader failover on etcd, side by side: graceful handover, crash failover, idle cost.

The etcd counterpart of ``zookeeper_failover.py``, on its parts: three contender processes per
kind join one election on one etcd server (started here on loopback, default timers: 100 ms
heartbeat, 1 s election timeout, so the smallest lease is 2 s), session 2 s, and speak the line
protocol of ``peers_zookeeper/protocol.py``; ``peers_zookeeper/contenders.py`` runs them and
their rounds. Rounds are interleaved across kinds (the order rotates each round). A round is
one graceful handover of every kind, then one crash (SIGKILL of the leader) of every kind that
can be crashed in reasonable time:

- graceful: the next leader's ``LEADER`` minus the old leader's ``RELEASING``;
- crash: ``kill -> leader`` = the next ``LEADER`` minus the kill; ``seen -> leader`` = the next
  ``LEADER`` minus the moment the dead lease's key was deleted, dated by the harness's own
  watch (``peers_etcd/observer_etcd.py``): what the client adds once etcd expired the lease.
  etcd checks leases every 500 ms, so ``kill -> leader`` lies in TTL + 0..500 ms + the client.

Kinds: ``ha`` on asyncio and on trio (``ha.Elector``, fencing by breadcrumb as always); etcd's
own server-side election API through the gateway (``election-api``, the reference of the
ratios); ``etcdctl elect`` (graceful only: its session TTL is fixed at 60 s); tooz's
``etcd3+http`` driver (a lock: tooz has no election on etcd), from its own virtualenv
(``--peers-python``, default ``$HA_PEERS_PYTHON`` or ``.venv-peers/bin/python``; made with
``python -m venv .venv-peers && .venv-peers/bin/pip install tooz etcd3gw``). A kind that cannot
run is listed with the reason.

Before the rounds, with every election settled, the standbys' idle cost is read from
``/proc``: CPU over ``--idle`` seconds (utime + stime, the process and its children, as a share
of one core) and RSS, averaged over the two standbys of each kind; beside them the RSS floor of
any contender on anyio (``anyio floor``: the loop running on asyncio or trio, one worker
thread, nothing else), which the election API's contender (threads, no event loop) is below. After the rounds, ``ha``
holds ``--many`` elections (each its own path) on one driver in one process: the time from
starting the electors until all lead (``peers_etcd/ha_many_etcd.py``; the process's start, its
imports and its connection are not counted), with the CPU time that took, the steadier figure
on a loaded machine. Last, the client's own cost of one request
(``--requests``): that many ``kv/range`` calls in a row through ``ha``'s gateway, on asyncio
and on trio, as CPU per request (``time.process_time``) and latency p50; the bound of
``--many`` (every election is a few requests) and part of every handover.

    .venv/bin/python benchmarks/etcd_failover.py [--rounds 50] [--kinds ha,election-api,...]
    .venv/bin/python benchmarks/etcd_failover.py --quick          # a smoke run: 5 rounds
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers_etcd"
ROOT = HERE.parent
sys.path.insert(0, str(HERE / "peers_zookeeper"))
sys.path.insert(0, str(PEERS))

from contenders import Election  # noqa: E402
from observer_etcd import Keys, Observer  # noqa: E402
from rounds import Results, percentile, run_rounds  # noqa: E402

TIMERS = (100, 1000)  # etcd's heartbeat interval and election timeout, ms (its defaults)
EXPIRY_STEP = 0.5  # etcd's lessor looks for expired leases every 500 ms
CONCURRENCY = Keys("PATH/<lease>", lambda path: path + "/")  # etcd's Go election recipe
HA_QUEUE = Keys("n", lambda path: f"/hab/{path.count('/') + 2:03d}{path}/n/")  # ha_etcd.PREFIX


@dataclass
class Kind:
    name: str
    command: Callable[[], list[str] | str]  # the command of one contender, or why not here
    keys: tuple[Keys, ...] = (CONCURRENCY,)
    crash: bool = True
    env: dict[str, str] = field(default_factory=dict)


def python(
    interpreter: str, script: str, module: str, *extra: str
) -> Callable[[], list[str] | str]:
    def command() -> list[str] | str:
        if not os.path.exists(interpreter):
            return f"{interpreter} not found"
        probe = subprocess.run(
            [interpreter, "-c", f"import {module}"], capture_output=True, text=True, cwd=ROOT
        )
        if probe.returncode:
            return f"cannot import {module}: {probe.stderr.strip().splitlines()[-1]}"
        return [interpreter, str(PEERS / script), *extra]

    return command


def etcdctl() -> list[str] | str:
    if shutil.which("etcdctl") is None:
        return "etcdctl not found (apt-get install etcd-client)"
    return [sys.executable, str(PEERS / "etcdctl_elect.py")]


def peers_python() -> str:
    return os.environ.get("HA_PEERS_PYTHON") or str(ROOT / ".venv-peers" / "bin" / "python")


def kinds_for(peers: str) -> dict[str, Kind]:
    ha = ("ha_etcd.py", "ha.drivers.etcd")
    tooz_keys = (Keys("/tooz/locks<PATH>", lambda path: "/tooz/locks" + path, False),)
    return {
        "ha": Kind("ha (asyncio)", python(sys.executable, *ha), (HA_QUEUE,)),
        "ha-trio": Kind("ha (trio)", python(sys.executable, *ha, "--backend", "trio"), (HA_QUEUE,)),
        "election-api": Kind(
            "etcd election API", python(sys.executable, "election_api.py", "json")
        ),
        "etcdctl": Kind("etcdctl elect", etcdctl, crash=False),
        "tooz": Kind(
            "tooz etcd3+http lock", python(peers, "tooz_lock.py", "tooz.drivers.etcd3gw"), tooz_keys
        ),
    }


DEFAULT_KINDS = ("ha", "ha-trio", "election-api", "etcdctl", "tooz")


# --- measurements -----------------------------------------------------------------------------


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (etcdctl under its wrapper)."""
    found = [pid]
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as children:
                for child in children.read().split():
                    found += tree(int(child))
    except OSError:
        pass
    return found


def cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:  # gone meanwhile
        return 0
    return int(fields[11]) + int(fields[12])  # utime, stime


def rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def idle_cost(elections: dict[str, Election], seconds: float, server: int | None) -> dict[str, str]:
    """Per kind: the standbys' mean CPU (% of one core) over ``seconds``, and mean RSS (MiB)."""
    standbys = {
        key: [tree(c.process.pid) for n, c in e.contenders.items() if n != e.leader]
        for key, e in elections.items()
    }
    if server:
        standbys["etcd server"] = [[server]]

    def ticks() -> dict[str, list[int]]:
        return {k: [sum(cpu_ticks(p) for p in pids) for pids in t] for k, t in standbys.items()}

    before = ticks()
    time.sleep(seconds)
    after = ticks()
    hertz = os.sysconf("SC_CLK_TCK")
    costs = {}
    for key, trees in standbys.items():
        used = [
            (a - b) / hertz / seconds * 100 for a, b in zip(after[key], before[key], strict=True)
        ]
        rss = [sum(rss_mib(p) for p in pids) for pids in trees]
        costs[key] = f"{sum(used) / len(used):5.2f} {sum(rss) / len(rss):6.1f}"
    return costs


FLOOR = """
import sys, anyio, anyio.to_thread
async def idle() -> None:
    print("READY", flush=True)
    await anyio.to_thread.run_sync(sys.stdin.readline)  # a worker thread, as ha's contender has
anyio.run(idle, backend=sys.argv[1])
"""


def floors() -> dict[str, str]:
    """RSS of the least any contender on anyio is: the loop running, a worker thread, idle
    (ha's contender is that plus ha, its connection and the protocol's reader thread)."""
    found = {}
    for backend in ("asyncio", "trio"):
        process = subprocess.Popen(
            [sys.executable, "-c", FLOOR, backend],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert process.stdout is not None
            if process.stdout.readline().startswith("READY"):
                found[f"anyio floor ({backend})"] = f"{'-':>5} {rss_mib(process.pid):6.1f}"
        finally:
            process.kill()
            process.wait()
    return found


def many_elections(hosts: str, count: int, backend: str, metrics: str | None) -> str:
    """``ha``: one process holding ``count`` elections on one driver; settle time, its CPU
    time (and the GC's part) and memory, and with ``metrics`` (the server started here) the requests etcd served per elector."""
    done = subprocess.run(
        [sys.executable, str(PEERS / "ha_many_etcd.py"), "--hosts", hosts, "--count", str(count)]
        + ["--backend", backend]
        + (["--metrics", metrics] if metrics else []),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PEERS,
    )
    lines = done.stdout.strip().splitlines()
    requests = ""
    if lines and lines[0].startswith("REQUESTS "):
        txn, writes = (float(w) for w in lines.pop(0).split()[2:5:2])
        requests = f"; etcd served {txn:.2f} Txn per elector ({writes:.2f} writes)"
    words = lines[-1].split() if lines else []
    if words[:1] == ["UNSETTLED"]:
        return lines[-1].removeprefix("UNSETTLED ") + requests
    if done.returncode or len(words) < 12:
        return f"failed: {done.stderr.strip()[-300:]}"
    settled, rss, base, cpu, in_gc = (float(words[i]) for i in (1, 3, 5, 7, 9))
    cpu_note = f"{cpu:.2f} s of CPU, {in_gc:.2f} s of it in the GC ({words[11]} full runs)"
    memory = f"RSS {rss:.0f} MiB ({rss - base:+.0f} MiB for the electors)"
    return f"settled in {settled:.2f} s ({cpu_note}), {memory}{requests}"


def client_cost(hosts: str, count: int) -> list[str]:
    """``ha``'s gateway: client CPU (us) and latency p50 (ms) of ``count`` kv/range in a row
    (``ha`` of this tree: ``HA_ROOT`` is for the contender processes only)."""
    sys.path.insert(0, str(ROOT))
    import anyio

    from ha.drivers.etcd.gateway import Gateway
    from ha.drivers.etcd.settings import Settings

    async def measure() -> tuple[float, float]:
        gateway = Gateway(Settings.check(hosts, "/bench-client"))
        gateway.open()
        try:
            await gateway.call("kv/range", {"key": "L3g="}, 5)  # the connection made
            took, cpu = [], time.process_time()
            for _ in range(count):
                start = time.perf_counter()
                await gateway.call("kv/range", {"key": "L3g="}, 5)
                took.append(time.perf_counter() - start)
            cpu = time.process_time() - cpu
        finally:
            await gateway.aclose()
        return cpu / count * 1e6, percentile(took, 0.5) * 1e3

    lines = []
    for backend in ("asyncio", "trio"):
        cpu, p50 = anyio.run(measure, backend=backend)
        lines.append(
            f"ha ({backend}), {count} kv/range in a row through the gateway:"
            f" client CPU {cpu:.0f} us a request, latency p50 {p50:.3f} ms"
        )
    return lines


def start_server() -> tuple[str, int, str, Callable[[], None]]:
    """A server on loopback: its hosts, pid, metrics URL and how to remove it."""
    sys.path.insert(0, str(ROOT))
    from tests.support.backends.etcd import EtcdServer, missing_reason

    reason = missing_reason()
    if reason:
        raise SystemExit(f"cannot start etcd: {reason}")
    server = EtcdServer(timers=TIMERS)
    server.start()
    assert server.process is not None
    metrics = f"http://127.0.0.1:{server.metrics_port}/metrics"
    return server.hosts, server.process.pid, metrics, server.remove


# --- the table --------------------------------------------------------------------------------


def cells(values: list[float], reference: list[float], digits: int) -> str:
    if not values:
        return f"{'-':>7} {'-':>7} {'-':>7} {'':>6}"
    p50, p90 = percentile(values, 0.5), percentile(values, 0.9)
    ratio = f"{p50 / percentile(reference, 0.5):.2f}x" if reference else "-"
    return f"{p50:7.{digits}f} {p90:7.{digits}f} {max(values):7.{digits}f} {ratio:>6}"


def table(
    kinds: dict[str, Kind],
    results: dict[str, Results],
    idle: dict[str, str],
    skipped: dict[str, str],
) -> None:
    api = results.get("election-api", Results())
    head = f"{'graceful handover':^30}{'crash: kill -> leader':^30}{'crash: seen -> leader':^30}"
    print(f"{'':<22}{head}{'idle standby':^14}")
    print(f"{'contender':<22}" + f"{'p50':>7} {'p90':>7} {'max':>7} {'x api':>6} " * 3, end="")
    print(f"{'CPU %':>6} {'RSS MiB':>7}")
    for key, result in results.items():
        row = f"{kinds[key].name:<22}{cells(result.graceful, api.graceful, 2)} "
        row += f"{cells(result.crash, api.crash, 0)} {cells(result.seen, [], 1)} "
        print(row + idle.get(key, f"{'-':>6} {'-':>7}"))
        counts = (len(result.graceful), len(result.crash), len(result.seen))
        if result.failed:
            print(f"{'':<22}samples {counts[0]}/{counts[1]}/{counts[2]} {result.failed}")
    if "etcd server" in idle:
        print(f"{'etcd server (idle)':<22}{'':>90}{idle['etcd server']}")
    for key in (k for k in idle if k.startswith("anyio floor")):
        print(f"{key:<22}{'':>90}{idle[key]}")
    for key, why in skipped.items():
        print(f"{kinds[key].name:<22}not run: {why}")


def verdicts(results: dict[str, Results], ttl: float) -> None:
    api, bound = results.get("election-api"), (ttl + EXPIRY_STEP + 0.05) * 1000
    for key in ("ha", "ha-trio"):
        result = results.get(key)
        if result is None or not result.graceful or not result.crash:
            continue
        line = f"{key}: crash p90 {percentile(result.crash, 0.9):.0f} ms"
        line += f" (target <= TTL + {EXPIRY_STEP:g} s + 50 ms = {bound:.0f} ms)"
        if api and api.graceful:
            ratio = percentile(result.graceful, 0.5) / percentile(api.graceful, 0.5)
            line = f"{key}: graceful p50 {ratio:.2f}x the election API (target <= 0.80x); " + line
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 5 rounds, --many 50, --requests 200"
    )
    parser.add_argument("--kinds", help=f"comma-separated (default: {','.join(DEFAULT_KINDS)})")
    parser.add_argument("--hosts", help="an existing etcd, HOST:PORT (default: start one)")
    parser.add_argument("--session-timeout", type=float, default=2.0)
    parser.add_argument("--many", type=int, default=1000, help="elections in one ha process")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU reading")
    parser.add_argument("--requests", type=int, default=1000, help="requests of the client cost")
    parser.add_argument("--peers-python", default=peers_python(), help="the interpreter with tooz")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.many, args.idle = 5, min(args.many, 50), min(args.idle, 2.0)
        args.requests = min(args.requests, 200)
    kinds = kinds_for(args.peers_python)
    chosen = [k.strip() for k in (args.kinds or ",".join(DEFAULT_KINDS)).split(",") if k.strip()]
    unknown = set(chosen) - set(kinds)
    if unknown:
        raise SystemExit(f"unknown kinds {sorted(unknown)}; known: {', '.join(kinds)}")

    load_before = os.getloadavg()
    started = time.monotonic()
    results: dict[str, Results] = {}
    skipped: dict[str, str] = {}
    idle: dict[str, str] = {}
    many: list[str] = []
    with tempfile.TemporaryDirectory(prefix="etcd-failover-") as tmp:
        stop: Callable[[], None] = lambda: None  # noqa: E731
        hosts, server, metrics = args.hosts, None, None
        if not hosts:
            hosts, server, metrics, stop = start_server()
        elections: dict[str, Election] = {}
        observer = Observer(hosts)
        try:
            for key in chosen:
                kind = kinds[key]
                command = kind.command()
                if isinstance(command, str):
                    skipped[key] = command
                    print(f"{kind.name}: not run ({command})", file=sys.stderr)
                    continue
                log = Path(tmp) / f"{key}.log"
                election = Election(
                    command,
                    hosts,
                    args.session_timeout,
                    log,
                    observer,
                    kind.keys,
                    kind.env,  # type: ignore[arg-type]
                )
                elections[key] = election
                results[key] = Results()
                election.start()
            print(
                f"{len(elections)} kinds settled; idle cost over {args.idle:g} s...",
                file=sys.stderr,
            )
            idle = idle_cost(elections, args.idle, server) | floors()
            print(f"{args.rounds} rounds...", file=sys.stderr)
            graceful_only = [key for key, kind in kinds.items() if not kind.crash]
            run_rounds(elections, args.rounds, results, graceful_only)
            for key, backend in (("ha", "asyncio"), ("ha-trio", "trio")):
                if key in results and args.many:
                    print(f"ha ({backend}): {args.many} elections in one process", file=sys.stderr)
                    result = many_elections(hosts, args.many, backend, metrics)
                    many.append(f"ha ({backend}), {args.many} elections on one driver: {result}")
            if args.requests and ("ha" in results or "ha-trio" in results):
                print(f"ha: {args.requests} requests in a row", file=sys.stderr)
                many += client_cost(hosts, args.requests)
        finally:
            for election in elections.values():
                election.close()
            observer.close()
            stop()

    minutes = (time.monotonic() - started) / 60
    print(
        f"\netcd failover, one server (etcd {TIMERS[0]}/{TIMERS[1]} ms timers), 3 contender"
        f" processes per kind, session/TTL {args.session_timeout:g} s, {args.rounds} interleaved"
        " rounds, ms (x api: p50 ratio to the etcd election API)"
    )
    table(kinds, results, idle, skipped)
    if "etcdctl" in results:
        print("etcdctl elect: graceful only (its session TTL is fixed at 60 s)")
    verdicts(results, args.session_timeout)
    for line in many:
        print(line)
    load_after = os.getloadavg()
    print(
        f"{os.cpu_count()} CPUs; load average (1/5/15 min) {'/'.join(f'{x:.2f}' for x in load_before)}"
        f" before, {'/'.join(f'{x:.2f}' for x in load_after)} after; {minutes:.1f} min"
    )


if __name__ == "__main__":
    main()
