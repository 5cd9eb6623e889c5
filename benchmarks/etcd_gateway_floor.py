"""The floor of a graceful handover through etcd's JSON gateway, with clients that cost nothing.

    .venv/bin/python benchmarks/etcd_gateway_floor.py [--rounds 50] [--watchers 3] [--txn]

No ``ha`` code runs here: each contender is a raw socket speaking HTTP/1.1, one blocking request
at a time, in a process of its own, on one etcd started here (``etcd_failover.py``'s timers).
Rounds interleave two paths, and each prints the time from the leader's request on the wire to
the moment the successor holds the news:

- **api**: etcd's own election (v3election): the leader sends ``election/resign``; the
  successor's blocked ``election/campaign`` returns. This is what ``etcd_failover.py``'s
  ``election-api`` peer does, without its ``http.client`` and threads;
- **watch**: what ``ha``'s etcd driver does: the leader deletes a key (``kv/deleterange``, or
  with ``--txn`` a transaction shaped like ``ha``'s leave: six compares, two deletes) and the
  successor's watch stream brings the DELETE; ``--watchers`` processes watch, as the contenders
  of ``etcd_failover.py`` each do.

The ratio watch/api is the best any client of the gateway can do against the election API; a
client's own costs (the elector, its task hops) come on top. Times are CLOCK_MONOTONIC, shared
by the processes of the machine.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

LOCK = threading.Lock()


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def say(*words: object) -> None:
    with LOCK:  # a reader thread and the main thread both print
        sys.stdout.write(" ".join(map(str, words)) + "\n")
        sys.stdout.flush()


class Raw:
    """One HTTP/1.1 connection to the gateway."""

    def __init__(self, hosts: str) -> None:
        host, port = hosts.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.file = self.sock.makefile("rb")

    def send(self, path: str, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        head = f"POST {path} HTTP/1.1\r\nHost: etcd\r\nContent-Length: {len(data)}\r\n\r\n"
        self.sock.sendall(head.encode() + data)

    def head(self) -> dict[str, str]:
        self.file.readline()  # the status line
        headers = {}
        while (line := self.file.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        return headers

    def chunks(self) -> Iterator[bytes]:
        while size := int(self.file.readline().strip(), 16):
            yield self.file.read(size)
            self.file.readline()
        self.file.readline()

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.send(path, body)
        headers = self.head()
        if "content-length" in headers:
            raw = self.file.read(int(headers["content-length"]))
        else:
            raw = b"".join(self.chunks())
        reply: dict[str, Any] = json.loads(raw)
        return reply


def leave_txn(key: str) -> dict[str, Any]:
    """A transaction shaped like ``ha``'s graceful leave: per key, one compare that it exists and
    two that other keys do not, then both deleted."""
    compares = []
    for name in (key + "-crumb", key):
        compares += [
            {"key": b64(name), "target": "CREATE", "result": "GREATER", "create_revision": "0"},
            {"key": b64("i" + name), "target": "CREATE", "result": "EQUAL", "create_revision": "0"},
            {"key": b64(name + "/"), "range_end": b64(name + "0"), "target": "CREATE",
             "result": "EQUAL", "create_revision": "0"},
        ]  # fmt: skip
    deletes = [{"request_delete_range": {"key": b64(k)}} for k in (key + "-crumb", key)]
    return {"compare": compares, "success": deletes}


def campaigner(hosts: str, election: str) -> None:
    """Commands on stdin: ``campaign`` (returns at once; WON is said when it is won), ``resign``."""
    raw = Raw(hosts)
    lease = raw.call("/v3/lease/grant", {"TTL": 3600})["ID"]
    leader: dict[str, Any] = {}

    def campaign() -> None:
        body = {"name": b64(election), "lease": lease, "value": b64("x")}
        reply = Raw(hosts).call("/v3/election/campaign", body)
        now = time.monotonic()
        leader.update(reply["leader"])
        say("WON", now)

    for line in sys.stdin:
        if line.strip() == "campaign":
            threading.Thread(target=campaign, daemon=True).start()
        elif line.strip() == "resign":
            now = time.monotonic()
            raw.call("/v3/election/resign", {"leader": leader})
            say("SENT", now)


def watcher(hosts: str, prefix: str, txn: bool) -> None:
    """Watches ``prefix`` (says GOT at each DELETE); commands: ``put KEY``, ``delete KEY``."""
    raw, stream = Raw(hosts), Raw(hosts)
    stream.send(
        "/v3/watch", {"create_request": {"key": b64(prefix), "range_end": b64(prefix[:-1] + "0")}}
    )
    stream.head()

    def read() -> None:
        pending = b""
        for chunk in stream.chunks():
            now = time.monotonic()
            pending += chunk
            try:
                message = json.loads(pending)
            except ValueError:
                continue
            pending = b""
            events = (message.get("result") or {}).get("events") or []
            if any(event.get("type") == "DELETE" for event in events):
                say("GOT", now)

    threading.Thread(target=read, daemon=True).start()
    for line in sys.stdin:
        command, key = line.split()
        if command == "put":
            for name in (key, key + "-crumb"):
                raw.call("/v3/kv/put", {"key": b64(name), "value": b64("x")})
            say("OK", 0)
        else:
            now = time.monotonic()
            if txn:
                raw.call("/v3/kv/txn", leave_txn(key))
            else:
                raw.call("/v3/kv/deleterange", {"key": b64(key)})
            say("SENT", now)


class Child:
    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--child", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def tell(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def hear(self) -> tuple[str, float]:
        assert self.process.stdout is not None
        word, value = self.process.stdout.readline().split()
        return word, float(value)

    def expect(self, word: str) -> float:
        while True:
            heard, value = self.hear()
            if heard == word:
                return value

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


def measure(hosts: str, rounds: int, watchers: int, txn: bool) -> tuple[list[float], list[float]]:
    tag = f"floor-{os.getpid()}"
    a, b = Child(hosts, "campaign", tag + "-e"), Child(hosts, "campaign", tag + "-e")
    watching = [Child(hosts, "watch", tag + "-k/", str(txn)) for _ in range(max(2, watchers))]
    children = [a, b, *watching]
    try:
        time.sleep(1.0)  # every stream open
        a.tell("campaign")
        a.expect("WON")
        leader, other = a, b
        api: list[float] = []
        watch: list[float] = []
        for index in range(rounds):
            other.tell("campaign")
            time.sleep(0.05)  # blocked in the server
            leader.tell("resign")
            won = other.expect("WON")
            api.append(won - leader.expect("SENT"))
            leader, other = other, leader
            key = f"{tag}-k/{index}"
            watching[0].tell(f"put {key}")
            watching[0].expect("OK")
            time.sleep(0.05)
            watching[0].tell(f"delete {key}")
            heard = dict(watching[0].hear() for _ in range(2))  # SENT and GOT, either order
            for extra in watching[2:]:
                extra.expect("GOT")
            watch.append(watching[1].expect("GOT") - heard["SENT"])
        return api, watch
    finally:
        for child in children:
            child.close()


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        hosts, role, name = sys.argv[2:5]
        if role == "campaign":
            campaigner(hosts, name)
        else:
            watcher(hosts, name, sys.argv[5] == "True")
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--watchers", type=int, default=3, help="processes watching (>= 2)")
    parser.add_argument("--txn", action="store_true", help="the leader deletes as ha's leave does")
    args = parser.parse_args()
    from etcd_failover import start_server

    hosts, _, _, remove = start_server()
    load = os.getloadavg()
    try:
        api, watch = measure(hosts, args.rounds, args.watchers, args.txn)
    finally:
        remove()

    def cells(values: list[float]) -> str:
        ordered = sorted(v * 1e3 for v in values)
        return f"{statistics.median(ordered):7.2f} {ordered[int(0.9 * len(ordered))]:7.2f}"

    how = "a leave-shaped txn" if args.txn else "kv/deleterange"
    print(f"etcd gateway floor, {args.rounds} interleaved rounds, ms; {args.watchers} watchers")
    print(f"{'path':<48}{'p50':>7} {'p90':>7}")
    print(f"{'api: resign sent -> campaign returns':<48}{cells(api)}")
    print(f"{'watch: ' + how + ' sent -> DELETE read':<48}{cells(watch)}")
    ratio = statistics.median(watch) / statistics.median(api)
    print(
        f"watch / api at p50: {ratio:.2f}x; load average before {load[0]:.2f}, after {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
