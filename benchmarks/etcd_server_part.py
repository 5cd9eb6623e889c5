"""Where the server part of a graceful handover on etcd goes, ``ha`` beside the election API.

    .venv/bin/python benchmarks/etcd_server_part.py [--rounds 20] [--kinds ha,ha-trio,api]

Three contenders per kind on one etcd (the tests' Debian server, started here), rounds
interleaved as in ``handover_share.py``; ``api`` is etcd's own election API through the gateway
(``peers_etcd/election_api.py``). The contenders are ``peers_zookeeper/traced_contender.py``:
each dates, on CLOCK_MONOTONIC, its request after ``RELEASING`` on the socket (``WRITTEN``: ha's
leave transaction, the API's resign) and its reads (``READ``: the successor's first after
``WRITTEN`` is the watch event, or the campaign's reply). Meanwhile ``tcpdump`` records the
etcd port on loopback (root and ``apt-get install tcpdump``), and the capture dates the same
handover at the wire, with the gateway's own gRPC connection to etcd (etcd 3.4's JSON gateway
is a gRPC client of its own server, over TCP on the same port) in the middle:

    client      RELEASING -> the request written (the old leader's client)
    sent        the request written -> on the wire (the capture's stamp; about 0, or less)
    gw in       the request on the wire -> the gateway's gRPC request to etcd on the wire
    etcd        -> etcd's first gRPC frame back (the transaction applied: raft, WAL fsync)
    gw out      -> the successor's bytes on the wire (its watch event; the campaign's reply)
    wake        -> the successor has read them (READ): the kernel, the scheduler, its loop
    succ        READ -> LEADER (the successor's client)
    w->r        WRITTEN -> READ: ``handover_share.py``'s "server part"
    req->r      the request on the wire -> READ: the same, without the in-process stamp's
                error (on loopback ``send`` runs the receiving side too: the sender can be
                preempted before it returns, and ``sent`` varies by -0.7..+0.8 ms a round)
    woken       other contender processes that received bytes between the request and READ
    runq        the time the successor's reading thread was runnable but waited for a CPU
                while that read was pending (``/proc/thread-self/schedstat``, read by the
                contender around the read): ``wake``'s wait, plus, for ``ha``, that of any other
                work its loop did while the watch's read was pending (an upper bound)
    runq round  the successor's run-queue wait over the whole round (all its threads, read by
                the harness before the release and when it has the ``LEADER`` line)

CLOCK_MONOTONIC is turned into the capture's CLOCK_REALTIME by one offset read at the start (a
drift of microseconds over a run). Prints the p50 of each column per kind (ms), and the load.

``--size N`` runs N contenders per kind; ``--hold-old MS`` makes the old ``ha`` leader's
process sleep (its loop blocked) for MS once its leave is on the socket, so that it takes no
CPU while the event travels (an experiment: it then reads its reply late); ``--watchers N``
adds N bystander processes watching every key (``peers_etcd/key_watcher.py``).

What it showed (issue 31, 12 rounds a run, load 1.7-5 from other work on the 2 cores, all under
``nice -n 10``; ms, p50; ``req->r`` of the API in the same run in the last column):

                             gw in   etcd  gw out   wake  req->r   API     ratio
    ha (asyncio), 3           0.64   0.87   0.33   0.77   2.79    1.76    1.59x
    ha (trio), 3              0.48   0.88   0.84   0.39   2.70            1.53x
    election API, 3           0.40   0.93   0.17   0.13   1.76
    ha, 3, old held 20 ms     0.51   0.92   0.42   0.54   2.85    1.80    1.58x
    ha-trio, 3, old held      0.48   0.80   0.77   0.32   2.21            1.23x
    ha, 2, old held 20 ms     0.49   0.83   0.23   0.29   2.11    1.90    1.11x
    ha-trio, 2, old held      0.50   0.82   0.32   0.21   2.05            1.08x
    ha, 3; 2 bystanders       0.54   0.94   0.50   0.24   2.39    2.39    1.00x
    API, 3; 2 bystanders      0.45   0.97   0.35   0.19   2.39

Earlier runs at load 3-7 gave the same picture (``ha``: ``wake`` 0.8-1.3 ms, ``w->r`` 2.2-3.2;
the API: ``wake`` 0.05-0.08, ``w->r`` 1.7-2.0).

Where the difference goes. ``etcd`` (raft and the WAL's fsync, one write each) is the same for
``ha``'s leave and the API's resign. The gateway costs ``ha`` a little more both ways:
decoding its 1.1 KB transaction (six compares, two deletes) against the resign's 150 bytes,
+0.1-0.2 ms (``gw in``), and writing the event to every watch stream and the reply, in no fixed
order, where the API writes one campaign reply first, +0.15-0.6 ms (``gw out``). The rest is
``wake``: the successor's bytes are on its socket and it waits for a CPU (``runq``). ``perf
sched timehist`` (``perf sched record -k CLOCK_MONOTONIC``) of such rounds shows who holds the
CPUs meanwhile: etcd, and the processes the same write woke, the old leader above all (its
reply and its own watch event at once, then the rest of ``quit`` and the driver's close: 1.0-1.6
ms of CPU in one run, cold), and the third contender (``ha``'s driver watches its whole prefix,
so every contender is sent the leave: 0.3-0.65 ms to read and drop it); once even with the
other core idle (the successor queued on the old leader's CPU). The API's write wakes the
successor alone (the other standby's campaign waits on the server) and its old leader's
reply comes after. Take the old leader off the CPU (``--hold-old``) and the third contender
away (``--size 2``): ``ha``'s part is 1.08-1.11x the API's; give the API the same bystanders
(``--watchers 2``): 1.00x. So the server part is not etcd's, nor the watch's: it is the CPU of
the processes one write wakes together on a shared two-core machine, which contenders on
hosts of their own would not pay.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers_zookeeper"
ROOT = HERE.parent
sys.path.insert(0, str(PEERS))
sys.path.insert(0, str(ROOT))

from contenders import Election  # noqa: E402
from rounds import percentile  # noqa: E402

TRACED = str(PEERS / "traced_contender.py")
KINDS = {  # name: the contender's command
    "ha": [sys.executable, TRACED, "etcd"],
    "ha-trio": [sys.executable, TRACED, "etcd", "--backend", "trio"],
    "api": [sys.executable, TRACED, "api"],
}
COLUMNS = (
    "client",
    "sent",
    "gw in",
    "etcd",
    "gw out",
    "wake",
    "succ",
    "w->r",
    "req->r",
    "total",
    "woken",
    "runq",
)
COLUMNS += ("runq round",)


@dataclass
class Round:
    """One handover: the monotonic stamps (ns), and the contenders' client ports."""

    old: str
    new: str = ""
    stamps: dict[str, int] = field(default_factory=dict)
    reads: list[int] = field(default_factory=list)
    waits: dict[int, int] = field(default_factory=dict)  # the successor's reads: run-queue ns
    ports: dict[int, str] = field(default_factory=dict)  # client port -> contender
    waited: dict[str, int] = field(default_factory=dict)  # contender -> run-queue wait (ns)
    pids: dict[str, int] = field(default_factory=dict)


def client_ports(election: Election, server_port: int) -> dict[int, str]:
    """The local ports of the contenders' connections to etcd (``ss``), by contender."""
    pids = {c.process.pid: name for name, c in election.contenders.items()}
    out = subprocess.run(
        ["ss", "-tnpH", "state", "established", f"dport = :{server_port}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    ports: dict[int, str] = {}
    for line in out.splitlines():
        fields = line.split()
        local = fields[2] if len(fields) > 2 else ""
        for pid, name in pids.items():
            if f"pid={pid}," in line:
                ports[int(local.rpartition(":")[2])] = name
    return ports


def run_queue_wait(pid: int) -> int:
    """The time the threads of ``pid`` have waited for a CPU while runnable, in ns
    (``/proc/PID/task/*/schedstat``: on CPU, waiting, slices)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total


def handover(election: Election, server_port: int) -> Round:
    """One graceful handover of ``election``, its stamps and ports; then the old leader is
    replaced and the election settles."""
    old = election.leaving = election.leader
    assert old is not None
    result = Round(old, ports=client_ports(election, server_port))
    pids = result.pids = {name: c.process.pid for name, c in election.contenders.items()}
    before = {name: run_queue_wait(pid) for name, pid in pids.items()}
    election._tell_release(old)
    exited = False
    while not (exited and "LEADER" in result.stamps and "WRITTEN" in result.stamps):
        name, word, stamp = election.next_line()
        if name == old and word in ("RELEASING", "WRITTEN"):
            result.stamps[word] = stamp
        elif name == old and word == "EXITED":
            exited = True
        elif name != old and word == "LEADER":
            result.stamps["LEADER"], result.new = stamp, name
            result.waited[name] = run_queue_wait(pids[name]) - before[name]
        elif name != old and word == "READ":
            result.reads.append(stamp)
        elif name != old and word.startswith("WAITED:"):
            result.waits[int(word[7:])] = stamp
    time.sleep(0.05)  # the successor's READ lines follow its LEADER
    while not election.lines.empty():
        name, word, stamp = election.lines.get_nowait()
        if name != old and word == "READ":
            result.reads.append(stamp)
        elif name != old and word.startswith("WAITED:"):
            result.waits[int(word[7:])] = stamp
    election.replace(old)
    return result


# --- the capture ----------------------------------------------------------------------------

Packet = tuple[int, int, int, bytes]  # (realtime ns, source port, destination port, payload)


def packets(path: Path) -> list[Packet]:
    """The TCP segments with a payload in a pcap file (nanosecond stamps, Linux cooked or
    Ethernet or null link)."""
    import struct

    data = path.read_bytes()
    nano = data[:4] == b"\x4d\x3c\xb2\xa1"
    link = struct.unpack("<I", data[20:24])[0]
    skip = {1: 14, 113: 16, 0: 4, 276: 20}.get(link, 0)
    found: list[Packet] = []
    offset = 24
    while offset + 16 <= len(data):
        sec, frac, size, _ = struct.unpack("<IIII", data[offset : offset + 16])
        frame = data[offset + 16 + skip : offset + 16 + size]
        offset += 16 + size
        ip_length = (frame[0] & 15) * 4
        tcp = frame[ip_length:]
        source, destination = struct.unpack(">HH", tcp[:4])
        payload = tcp[(tcp[12] >> 4) * 4 :]
        if payload:
            found.append(
                (sec * 10**9 + (frac if nano else frac * 1000), source, destination, payload)
            )
    return found


def first(found: list[Packet], after: int, test: object) -> int | None:
    for stamp, source, destination, payload in found:
        if stamp >= after and test(source, destination, payload):  # type: ignore[operator]
            return stamp
    return None


def parts(found: list[Packet], r: Round, offset: int, port: int, api: bool) -> dict[str, float]:
    """One round's columns (ms), or {} if the capture does not show it whole."""
    old_ports = {p for p, name in r.ports.items() if name == r.old}
    new_ports = {p for p, name in r.ports.items() if name == r.new}
    released = r.stamps["RELEASING"] + offset
    written = r.stamps["WRITTEN"]
    later = [read for read in r.reads if read > written]
    if not later:
        return {}
    read = min(later)
    verb = b"POST /v3/election/resign" if api else b"POST /v3/kv/txn"
    request = first(found, released, lambda s, d, p: s in old_ports and p.startswith(verb))
    if request is None:
        return {}
    # the gateway's connection to etcd speaks HTTP/2: its frames begin with a zero byte
    grpc_in = first(found, request, lambda s, d, p: d == port and p[0] == 0 and len(p) > 60)
    if grpc_in is None:
        return {}
    grpc_out = first(found, grpc_in, lambda s, d, p: s == port and p[0] == 0 and len(p) > 60)
    event = b"HTTP/1.1 200" if api else b'"events"'
    delivered = first(found, request, lambda s, d, p: d in new_ports and event in p[:400])
    if grpc_out is None or delivered is None:
        return {}
    woken = {
        r.ports[d]
        for stamp, s, d, _ in found
        if request <= stamp <= read + offset and d in r.ports and r.ports[d] != r.new
    }
    ms = 1e-6
    return {
        "client": (written - r.stamps["RELEASING"]) * ms,
        "sent": (request - written - offset) * ms,
        "gw in": (grpc_in - request) * ms,
        "etcd": (grpc_out - grpc_in) * ms,
        "gw out": (delivered - grpc_out) * ms,
        "wake": (read + offset - delivered) * ms,
        "succ": (r.stamps["LEADER"] - read) * ms,
        "w->r": (read - written) * ms,
        "req->r": (read + offset - request) * ms,
        "total": (r.stamps["LEADER"] - r.stamps["RELEASING"]) * ms,
        "woken": float(len(woken)),
        "runq": r.waits.get(read, 0) * ms,
        "runq round": r.waited[r.new] * ms,
    }


def clock_offset() -> int:
    """CLOCK_REALTIME minus CLOCK_MONOTONIC, in ns (the tightest of a few readings)."""
    readings = []
    for _ in range(20):
        before = time.monotonic_ns()
        now = time.time_ns()
        after = time.monotonic_ns()
        readings.append((after - before, now - (before + after) // 2))
    return min(readings)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--session-timeout", type=float, default=2.0)
    parser.add_argument("--size", type=int, default=3, help="contenders per kind")
    parser.add_argument(
        "--hold-old",
        type=float,
        default=0.0,
        help="ms the old ha leader's process sleeps once its leave is written (an experiment)",
    )
    parser.add_argument(
        "--watchers", type=int, default=0, help="bystanders watching every key (key_watcher.py)"
    )
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    if unknown := [k for k in kinds if k not in KINDS]:
        parser.error(f"unknown kinds: {', '.join(unknown)} (known: {', '.join(KINDS)})")
    from shutil import which

    if which("tcpdump") is None or os.geteuid() != 0:
        sys.exit("etcd_server_part.py needs tcpdump (apt-get install tcpdump) and root")
    from tests.support.backends.etcd import EtcdServer

    etcd = EtcdServer()
    directory = Path(tempfile.mkdtemp(prefix="server-part-"))
    capture = directory / "etcd.pcap"
    dump = subprocess.Popen(
        ["tcpdump", "-i", "lo", "-s", "2048", "--time-stamp-precision=nano", "-U"]
        + ["-w", str(capture), f"tcp port {etcd.port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1)  # tcpdump is listening
    etcd.start()
    offset = clock_offset()
    watcher = [sys.executable, str(HERE / "peers_etcd" / "key_watcher.py"), etcd.hosts]
    bystanders = [subprocess.Popen(watcher) for _ in range(args.watchers)]
    elections: dict[str, Election] = {}
    results: dict[str, list[Round]] = {k: [] for k in kinds}
    try:
        for kind in kinds:
            elections[kind] = Election(
                KINDS[kind],
                etcd.hosts,
                args.session_timeout,
                directory / "contenders.log",
                observer=None,  # type: ignore[arg-type]  # no queue to watch: settle by time
                queues=(),
                size=args.size,
                env={"HA_TRACE_WAITS": "1", "HA_TRACE_HOLD": str(args.hold_old / 1000)},
            )
            elections[kind].start()
        for round_ in range(args.rounds):
            shift = round_ % len(kinds)
            for kind in kinds[shift:] + kinds[:shift]:
                results[kind].append(handover(elections[kind], etcd.port))
            print(f"round {round_ + 1}/{args.rounds}", file=sys.stderr, flush=True)
    finally:
        for election in elections.values():
            election.close()
        for bystander in bystanders:
            bystander.kill()
            bystander.wait()
        time.sleep(0.5)
        dump.send_signal(signal.SIGINT)
        dump.wait(timeout=30)
        etcd.remove()
    found = packets(capture)
    kept = [{"kind": kind, **asdict(r)} for kind in kinds for r in results[kind]]
    kept_all = {"offset": offset, "port": etcd.port, "rounds": kept}
    (directory / "rounds.json").write_text(json.dumps(kept_all, indent=1))
    print(f"{'':<9}" + "".join(f"{c:>11}" for c in COLUMNS) + f"{'rounds':>8}")
    for kind in kinds:
        rows = [
            p for r in results[kind] if (p := parts(found, r, offset, etcd.port, kind == "api"))
        ]
        if rows:
            p50 = [percentile([row[c] for row in rows], 0.5) for c in COLUMNS]
            print(f"{kind:<9}" + "".join(f"{v:11.3f}" for v in p50) + f"{len(rows):8d}")
    print(
        f"ms, p50 of {args.rounds} rounds, {args.size} contenders per kind,"
        f" {args.watchers} bystanders, old ha leader held {args.hold_old:g} ms (woken: contender processes); capture and rounds.json in {directory};"
        f" load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )


if __name__ == "__main__":
    main()
