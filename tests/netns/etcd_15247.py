"""etcd-io/etcd#15247 on this machine's etcd: a leader stuck in its raft loop, and leases.

    python -m tests.netns.etcd_15247 [--attempts 3]

A 3-member cluster on hosts of its own (tests/netns). Client A keeps a lease alive through the
leader, client B through a follower, each with a key on its lease, every 0.4 s, each answer
logged. Then strace holds every fdatasync of the leader for 5 s (a slow disk: its raft loop
waits in the WAL's sync while its HTTP side serves on) and a write makes it sync. Seen, per
lease:

- A (through the stuck leader): answered with a TTL *after* its key was gone from the other
  members (the new leader, hearing no keepalive, revoked it): the old leader's lessor still
  renews (part 2 of the issue);
- B (through a follower, every keepalive answered with a TTL): its key gone anyway, once the
  stuck leader came back and its lessor's revocation went through (part 1, #12528).

A phase of the stall decides what happens, so it tries up to ``--attempts`` times. Needs root
and strace. What ha does about each: tests/netns/README.md.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.netns import servers
from tests.netns.hosts import Network


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def call(member: servers.Daemon, method: str, body: dict[str, Any], timeout: float = 1.0) -> Any:
    return servers.etcd_call(member.host.address, method, body, timeout=timeout)


def attempt(members: list[servers.Daemon], number: int) -> dict[str, Any]:
    leader = servers.etcd_leader(members)
    assert leader is not None, "no etcd leader"
    old, other = members[leader], members[(leader + 1) % 3]
    a = int(call(old, "lease/grant", {"TTL": 2})["ID"])
    b = int(call(other, "lease/grant", {"TTL": 2})["ID"])
    call(old, "kv/put", {"key": b64(f"/{number}/a"), "value": "", "lease": str(a)})
    call(other, "kv/put", {"key": b64(f"/{number}/b"), "value": "", "lease": str(b)})
    started, stop = time.monotonic(), threading.Event()
    answers: list[tuple[float, str, bool]] = []  # (time, lease, answered with a TTL)
    gone: dict[str, float] = {}

    def keep(member: servers.Daemon, lease: int, name: str) -> None:
        while not stop.is_set():
            try:
                reply = call(member, "lease/keepalive", {"ID": str(lease)}, timeout=0.6)
                alive = bool(reply.get("result", {}).get("TTL"))
            except (OSError, ValueError):
                alive = False
            answers.append((time.monotonic() - started, name, alive))
            time.sleep(0.4)

    def look() -> None:  # on the members other than the stuck one
        while not stop.is_set():
            for member in members:
                if member is old:
                    continue
                with contextlib.suppress(OSError, ValueError):
                    prefix = f"/{number}/"
                    end = prefix[:-1] + "0"
                    reply = call(member, "kv/range", {"key": b64(prefix), "range_end": b64(end)})
                    keys = {base64.b64decode(kv["key"]).decode()[-1] for kv in reply.get("kvs", [])}
                    for name in "ab":
                        if name not in keys:
                            gone.setdefault(name, time.monotonic() - started)
            time.sleep(0.1)

    threads = [
        threading.Thread(target=keep, args=(old, a, "a")),
        threading.Thread(target=keep, args=(other, b, "b")),
        threading.Thread(target=look),
    ]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    assert old.pid is not None
    strace = subprocess.Popen(
        ["strace", "-q", "-f", "-p", str(old.pid), "-o", "/dev/null", "-e", "trace=fdatasync"]
        + ["-e", "inject=fdatasync:delay_enter=5000000"]
    )
    time.sleep(0.5)
    stalled = time.monotonic() - started
    with contextlib.suppress(OSError, ValueError):  # a write to the leader: it syncs, and stalls
        call(old, "kv/put", {"key": b64(f"/{number}/x"), "value": ""}, timeout=0.3)
    time.sleep(9)
    strace.terminate()
    strace.wait()
    released = time.monotonic() - started
    time.sleep(4)
    stop.set()
    for thread in threads:
        thread.join()
    late = [t for t, name, alive in answers if name == "a" and alive and t > gone.get("a", 1e9)]
    b_refused = [
        t for t, name, alive in answers if name == "b" and not alive and t < gone.get("b", 1e9)
    ]
    return {
        "stalled": stalled,
        "released": released,
        "gone": gone,
        "a answered after its key was gone": late,
        "b refused before its key was gone": b_refused,
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.netns.etcd_15247", description=__doc__)
    parser.add_argument("--attempts", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("strace") is None:
        print("needs strace (apt-get install strace)")
        return 2
    directory = Path(tempfile.mkdtemp(prefix="ha-15247-"))
    network = Network()
    members = servers.etcd_cluster([network.host(f"e{i}") for i in (1, 2, 3)], directory)
    seen = {"part 2": False, "part 1": False}
    try:
        for member in members:
            member.start(wait=False)
        for member in members:
            member.wait()
        version = servers.etcd_call(members[0].host.address, "maintenance/status", {})
        print(f"etcd {version.get('version')}")
        for number in range(args.attempts):
            with contextlib.suppress(RuntimeError):
                for member in members:
                    member.wait()
            time.sleep(2)  # a leader again
            found = attempt(members, number)
            late, gone = found["a answered after its key was gone"], found["gone"]
            part2 = bool(late)
            part1 = "b" in gone and not found["b refused before its key was gone"]
            seen["part 2"] |= part2
            seen["part 1"] |= part1
            print(
                f"attempt {number + 1}: stall at +{found['stalled']:.1f}s, released at "
                f"+{found['released']:.1f}s; a's key gone at +{gone.get('a', float('nan')):.1f}s, "
                f"then {len(late)} keepalive(s) through the stuck leader answered with a TTL "
                f"(last +{max(late, default=float('nan')):.1f}s); b's key "
                + (
                    f"gone at +{gone['b']:.1f}s though every keepalive was answered with a TTL"
                    if part1
                    else "kept"
                    if "b" not in gone
                    else f"gone at +{gone['b']:.1f}s after a refused keepalive"
                ),
                flush=True,
            )
            if all(seen.values()):
                break
    finally:
        for member in members:
            member.kill()
        network.close()
        shutil.rmtree(directory, ignore_errors=True)
    print(
        "reproduced: "
        + (", ".join(k for k, v in seen.items() if v) or "neither part")
        + " (part 2: a stuck leader renews leases the new leader revokes; "
        "part 1: a stuck leader's revocation lands after it comes back)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
