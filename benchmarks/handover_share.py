"""The client's share of a graceful handover, traced at the sockets, on ZooKeeper and etcd.

    .venv/bin/python benchmarks/handover_share.py [--rounds 30] [--kinds zk,zk-trio,etcd,etcd-trio]
        [--ha-root DIR [--ha-root DIR2]] [--steps]

Three ``ha`` contenders per kind (``peers_zookeeper/traced_contender.py``) on one election;
rounds interleave the kinds (the order rotates). In each round the leader is asked to step
down and four moments are dated on CLOCK_MONOTONIC:

    quit      the old leader's ``RELEASING`` line written, just before ``elector.quit()``
              (``QUIT``; ``RELEASING`` itself is dated before that line's write to the pipe)
    written   its leave request is on the socket
    read      the successor reads the event's bytes
    active    the successor's ``become_active`` is entered (``LEADER``)

and the table gives the p50 of ``quit -> written`` (the old leader's client), ``written ->
read`` (the server and the loopback: the floor no client removes), ``read -> active`` (the
successor's client), their ``share`` (the two client parts, summed per round) with its p90,
and the whole handover. The old leader's process is then replaced and the election settles
before the next kind runs. Starts its own ZooKeeper and etcd (the tests' Debian packages);
session 2 s; ``--ha-root`` imports ``ha`` from another tree (``git archive COMMIT | tar -x -C
DIR``); given twice, each kind runs from both trees, interleaved in the same rounds (rows
``A:`` and ``B:``, before and after a change). Prints the load average with the table; results
are not kept.

``--steps`` also dates the steps inside ``ha`` (``peers_zookeeper/traced_steps.py``: each
wrapped call as it begins, ``>``, and returns, ``<``) and prints, per kind, the p50 of each
step's first time after ``quit`` (the old leader) and after ``read`` (the successor), in
microseconds: where the two client parts go. The wrappers add about a microsecond each.

Where they went (issue 31, 12 rounds, load 2-3; each process is cold at a handover, so a step
costs 3-10 times its warm cost): on etcd the old leader's 0.5 ms were quit() 45 us, the
loop's task switch 40, the machine 60, stopping a term whose work had returned 40-60 (a
running one adds its task's unwinding and a switch), the report 25, reaching the leave's
transaction 80-100 (the op timeout's scope), building it (compares, base64) 115-130, the
batcher and the gateway 80, then HTTP and the socket; the successor's 0.55-0.7 ms were the
event's HTTP chunk and JSON 105, the rest of the message and the switch to the elector's
loop 170-190, the machine 70, the contact check 35, the term's start (scope, events, lease,
task) 135-155, the report 25-35, then the switch to the term's task and its deadline 60-90.
On ZooKeeper each side also waits for a thread hop of kazoo's (0.35-0.5 ms, the GIL).
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers_zookeeper"
ROOT = HERE.parent
sys.path.insert(0, str(PEERS))
sys.path.insert(0, str(ROOT))

from contenders import Election  # noqa: E402
from rounds import percentile  # noqa: E402

KINDS = {  # name: (backend of the server, loop)
    "zk": ("zk", "asyncio"),
    "zk-trio": ("zk", "trio"),
    "etcd": ("etcd", "asyncio"),
    "etcd-trio": ("etcd", "trio"),
}
PARTS = ("quit->written", "written->read", "read->active", "share", "total")


def traced_round(election: Election) -> dict[str, float]:
    """One graceful handover: milliseconds of each part (see the module's doc)."""
    old = election.leaving = election.leader
    assert old is not None
    election._tell_release(old)
    stamps: dict[str, int] = {}
    reads: list[int] = []
    steps: list[tuple[bool, str, int]] = []  # (the old leader's, label, ns)
    exited = False
    while not (exited and "LEADER" in stamps and "QUIT" in stamps):
        name, word, stamp = election.next_line()
        if name == old and word in ("RELEASING", "QUIT", "WRITTEN"):
            stamps[word] = stamp
        elif name == old and word == "EXITED":
            exited = True
        elif name != old and word == "LEADER":
            stamps["LEADER"] = stamp
        elif name != old and word == "READ":
            reads.append(stamp)
        elif word.startswith("STEP:"):
            steps.append((name == old, word[5:], stamp))
    time.sleep(0.05)  # the successor's READ lines follow its LEADER at once
    while True:
        try:
            name, word, stamp = election.lines.get_nowait()
        except queue.Empty:
            break
        if name != old and word == "READ":
            reads.append(stamp)
        elif word.startswith("STEP:"):
            steps.append((name == old, word[5:], stamp))
    election.replace(old)
    written = stamps.get("WRITTEN")
    later = [r for r in reads if written is not None and r > written]
    if written is None or not later:
        raise RuntimeError(f"round not traced: {stamps} reads {reads}")
    read = min(later)
    ms = {
        "quit->written": (written - stamps["QUIT"]) / 1e6,
        "written->read": (read - written) / 1e6,
        "read->active": (stamps["LEADER"] - read) / 1e6,
        "total": (stamps["LEADER"] - stamps["RELEASING"]) / 1e6,
    }
    ms["share"] = ms["quit->written"] + ms["read->active"]
    for mine, label, stamp in steps:  # each step's first time in its part, in ms
        start, end = (stamps["QUIT"], written) if mine else (read, stamps["LEADER"])
        key = f"{'old' if mine else 'new'} {label}"
        if start <= stamp <= end and key not in ms:
            ms[key] = (stamp - start) / 1e6
    return ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument(
        "--ha-root", type=Path, action="append", help="import ha from this tree (twice: A and B)"
    )
    parser.add_argument("--session-timeout", type=float, default=2.0)
    parser.add_argument("--steps", action="store_true", help="date the steps inside ha too")
    args = parser.parse_args()
    roots: list[Path | None] = list(args.ha_root or [None])
    if len(roots) > 2:
        parser.error("--ha-root at most twice")
    tags = ["A:", "B:"] if len(roots) == 2 else [""]
    kinds = [tag + kind for kind in args.kinds.split(",") for tag in tags]
    from tests.support.backends.etcd import EtcdServer
    from tests.support.backends.zookeeper import ZooKeeperServer

    zk = ZooKeeperServer(Path(tempfile.mkdtemp(prefix="share-zk-")))
    zk.start()
    zk.wait_serving()
    etcd = EtcdServer()
    etcd.start()
    log = Path(tempfile.mkdtemp(prefix="share-")) / "contenders.log"
    elections: dict[str, Election] = {}
    results: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    try:
        for kind in kinds:
            tag, _, base = kind.rpartition(":")
            server, loop = KINDS[base]
            root = roots[tags.index(tag + ":") if tag else 0]
            env = {"HA_ROOT": str(root)} if root else {}
            if args.steps:
                env["HA_TRACE_STEPS"] = "1"
            hosts = zk.hosts if server == "zk" else etcd.hosts
            command = [sys.executable, str(PEERS / "traced_contender.py"), server]
            election = Election(
                [*command, "--backend", loop],
                hosts,
                args.session_timeout,
                log,
                observer=None,  # type: ignore[arg-type]  # no queue to watch: settle by time
                queues=(),
                env=env,
            )
            election.start()
            elections[kind] = election
        for round_ in range(args.rounds):
            shift = round_ % len(kinds)
            for kind in kinds[shift:] + kinds[:shift]:
                results[kind].append(traced_round(elections[kind]))
            print(f"round {round_ + 1}/{args.rounds}", file=sys.stderr, flush=True)
    finally:
        for election in elections.values():
            election.close()
        zk.stop()
        etcd.remove()
    print(f"{'':<21}" + "".join(f"{p:>15}" for p in PARTS) + f"{'share p90':>11}")
    for kind, rounds in results.items():
        if not rounds:
            continue
        p50 = [percentile([r[p] for r in rounds], 0.5) for p in PARTS]
        p90 = percentile([r["share"] for r in rounds], 0.9)
        tag, _, base = kind.rpartition(":")
        server, loop = KINDS[base]
        name = f"{tag + ' ' if tag else ''}ha-{server} ({loop})"
        print(f"{name:<21}" + "".join(f"{v:15.3f}" for v in p50) + f"{p90:11.3f}")
    tree = "ha from " + (
        ", ".join(f"{t} {r}" for t, r in zip(tags, roots, strict=True))
        if args.ha_root
        else "this tree"
    )
    if args.steps:
        print_steps(results)
    print(
        f"ms, p50 of {args.rounds} rounds (share: per round, then p50); session"
        f" {args.session_timeout:g} s; {tree}; load average"
        f" {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )


def print_steps(results: dict[str, list[dict[str, float]]]) -> None:
    """Per kind: each step's p50 time after quit (old) and after read (new), in us."""
    for kind, rounds in results.items():
        found: dict[str, list[float]] = {}
        for round_ in rounds:
            for key, value in round_.items():
                if key.startswith(("old ", "new ")):
                    found.setdefault(key, []).append(value * 1e3)
        p50 = {key: percentile(values, 0.5) for key, values in found.items()}
        print(f"{kind}: steps, us after quit (old) / read (new), p50 (rounds seen)")
        for key in sorted(p50, key=lambda k: (k[:3] == "new", p50[k])):
            print(f"    {key:<18}{p50[key]:9.1f}  ({len(found[key])})")


if __name__ == "__main__":
    main()
