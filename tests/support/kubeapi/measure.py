"""``python -m tests.support.kubeapi.measure [ROUNDS]``: what the fake costs, as a table.

Start time (to the first ``/healthz`` answer), resident memory idle and after the rounds,
and per-request latency over one kept-alive connection: Lease create, GET, PUT with
resourceVersion, a stale PUT (409), and the time from a PUT's answer to its watch event.
These describe the fake, not a real control plane: a kube-apiserver adds etcd's fsync,
admission and authorization to each write.
"""

from __future__ import annotations

import json
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

import httpx

from tests.support.kubeapi.process import FakeKubeApi

LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def next_event(reader: BinaryIO) -> Any:
    """One watch event: the server sends each in a chunk of its own."""
    size = int(reader.readline(), 16)
    event = json.loads(reader.read(size))
    reader.read(2)  # the chunk's CRLF
    return event


def timed(call: object) -> float:
    began = time.perf_counter()
    call()  # type: ignore[operator]
    return (time.perf_counter() - began) * 1000


def main(rounds: int) -> None:
    server = FakeKubeApi()
    began = time.perf_counter()
    server.start()
    start_ms = (time.perf_counter() - began) * 1000
    assert server.process is not None
    pid = server.process.pid
    idle = rss_mb(pid)
    rows: dict[str, list[float]] = {"create": [], "get": [], "put": [], "stale put (409)": []}
    rows["watch event after PUT"] = []
    try:
        with httpx.Client(base_url=server.url) as http:
            for index in range(rounds):
                body = {"metadata": {"name": f"l{index}"}, "spec": {"leaseDurationSeconds": 2}}
                rows["create"].append(timed(lambda b=body: http.post(LEASES, json=b)))
                rows["get"].append(timed(lambda i=index: http.get(f"{LEASES}/l{i}")))
            lease = http.get(f"{LEASES}/l0").json()
            url = f"{server.url}{LEASES}?watch=true&fieldSelector=metadata.name%3Dl0"
            url += f"&resourceVersion={lease['metadata']['resourceVersion']}"
            with socket.create_connection(("127.0.0.1", server.port or 0)) as watch:
                path = url.split(str(server.port), 1)[1]
                watch.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                reader = watch.makefile("rb")
                while reader.readline() not in (b"\r\n", b""):
                    pass  # the status line and headers
                for index in range(rounds):
                    lease["spec"]["holderIdentity"] = f"h{index}"
                    answer = http.put(f"{LEASES}/l0", json=lease)
                    answered = time.perf_counter()
                    event = next_event(reader)
                    rows["watch event after PUT"].append((time.perf_counter() - answered) * 1000)
                    stale = dict(lease)
                    rows["stale put (409)"].append(
                        timed(lambda s=stale: http.put(f"{LEASES}/l0", json=s))
                    )
                    lease = answer.json()
                    assert (
                        event["object"]["metadata"]["resourceVersion"]
                        == lease["metadata"]["resourceVersion"]
                    )
                    lease["spec"]["holderIdentity"] = (
                        f"g{index}"  # a change: an unchanged PUT writes nothing
                    )
                    rows["put"].append(timed(lambda n=lease: http.put(f"{LEASES}/l0", json=n)))
                    lease = next_event(reader)["object"]
        loaded = rss_mb(pid)
    finally:
        server.remove()
    print(f"fake kube API server, {rounds} rounds, loopback")
    print(
        f"start to first answer: {start_ms:.0f} ms; RSS idle {idle:.1f} MB, after {loaded:.1f} MB"
    )
    print(f"{'request':<24}{'p50 ms':>8}{'p90 ms':>8}{'p99 ms':>8}")
    for name, values in rows.items():
        q = statistics.quantiles(values, n=100)
        print(f"{name:<24}{q[49]:>8.2f}{q[89]:>8.2f}{q[98]:>8.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
