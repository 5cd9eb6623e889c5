"""The floor of many elections on etcd: what the server and a client that costs almost nothing
take to settle N one-contender elections, beside ``ha`` on the same server in the same run.

    .venv/bin/python benchmarks/etcd_many_floor.py [--counts 1000,10000] [--rounds 1]
        [--batch 60] [--gc-threshold 700]

No ``ha`` code runs in the floor's client: one asyncio process, raw sockets speaking HTTP/1.1
to etcd's JSON gateway, one lease, one watch on the whole prefix (every event decoded, as a
contender's watch would), and per election the two steps of etcd's own campaign
(``concurrency.Election``): a transaction that puts the election's key with the lease if it is
not there, and a read of the election's oldest key (is it ours?). Both are batched as ``ha``'s
driver batches them: nested transactions, ``--batch`` elections a request (etcd's 128
operations), four connections. An election is settled when its read says our key is first.

``ha``'s row is ``many_elections.py``'s child (one driver, one contender per election, a new
prefix, Python's collector as ``--gc-threshold`` says), run on the same server right after the
floor. Per row: the seconds to settle, the client's CPU seconds and the server's (etcd's
``/proc`` times: its gRPC, gateway, MVCC and raft work) from start to settled, and the server's
operations per election from the client's start to its exit (its own metrics: puts, deletes,
ranges, which count every compare, and transactions). ``x floor`` is the settle time over the
floor's in the same round.

On two cores the server and the client share the machine, so a run settles no faster than
half their CPU together. Starts its own etcd (Debian's package, as the tests do).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from many_elections import SERVER_PID, server_cpu  # noqa: E402

METRICS = ("etcd_mvcc_put_total", "etcd_mvcc_delete_total", "etcd_mvcc_range_total")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def prefix_end(prefix: bytes) -> bytes:
    return prefix[:-1] + bytes([prefix[-1] + 1])


# --- the floor's client: raw HTTP/1.1 -----------------------------------------------------------


class Connection:
    """One keep-alive HTTP/1.1 connection, one request at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        return cls(*await asyncio.open_connection(host, port))

    def send(self, path: str, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        head = f"POST {path} HTTP/1.1\r\nHost: etcd\r\nContent-Length: {len(data)}\r\n\r\n"
        self.writer.write(head.encode() + data)

    async def head(self) -> dict[str, str]:
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")[1:]
        return {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}

    async def chunk(self) -> bytes:
        size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
        data = await self.reader.readexactly(size + 2)
        return data[:-2]

    async def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.send(path, body)
        headers = await self.head()
        if "content-length" in headers:
            data = await self.reader.readexactly(int(headers["content-length"]))
        else:
            parts = []
            while part := await self.chunk():  # the last, empty, takes its CRLF (no trailers)
                parts.append(part)
            data = b"".join(parts)
        reply: dict[str, Any] = json.loads(data)
        if "error" in reply or "code" in reply:
            raise RuntimeError(f"{path}: {str(reply)[:200]}")
        return reply


async def floor_child(hosts: str, prefix: str, count: int, batch: int, senders: int) -> None:
    host, port = hosts.split(",")[0].rsplit(":", 1)
    root = prefix.encode()
    control = await Connection.open(host, int(port))
    lease = int((await control.call("/v3/lease/grant", {"TTL": 30}))["ID"])
    events = [0]

    async def watch() -> None:
        stream = await Connection.open(host, int(port))
        stream.send(
            "/v3/watch",
            {"create_request": {"key": b64(root), "range_end": b64(prefix_end(root))}},
        )
        await stream.head()
        buffer = b""
        while part := await stream.chunk():
            buffer += part
            *messages, buffer = buffer.split(b"\n")
            for message in messages:
                if message.strip():
                    events[0] += len(json.loads(message)["result"].get("events", ()))

    watcher = asyncio.create_task(watch())
    started, cpu, server = time.monotonic(), time.process_time(), server_cpu()
    keys = [root + f"/e{i}/{lease:x}".encode() for i in range(count)]
    queue: asyncio.Queue[list[int]] = asyncio.Queue()
    for first in range(0, count, batch):
        queue.put_nowait(list(range(first, min(count, first + batch))))
    settled = [0]

    async def sender() -> None:
        connection = await Connection.open(host, int(port))
        while not queue.empty():
            ids = queue.get_nowait()
            campaign = [
                {
                    "request_txn": {
                        "compare": [
                            {"key": b64(keys[i]), "target": "CREATE", "create_revision": "0"}
                        ],
                        "success": [
                            {
                                "request_put": {
                                    "key": b64(keys[i]),
                                    "value": b64(b"identity"),
                                    "lease": lease,
                                }
                            }
                        ],
                        "failure": [{"request_range": {"key": b64(keys[i])}}],
                    }
                }
                for i in ids
            ]
            await connection.call("/v3/kv/txn", {"success": campaign})
            oldest = []
            for i in ids:
                election = root + f"/e{i}/".encode()
                read = {
                    "key": b64(election),
                    "range_end": b64(prefix_end(election)),
                    "sort_order": "ASCEND",
                    "sort_target": "CREATE",
                    "limit": 1,
                }
                oldest.append({"request_txn": {"success": [{"request_range": read}]}})
            reply = await connection.call("/v3/kv/txn", {"success": oldest})
            for i, nested in zip(ids, reply["responses"], strict=True):
                kvs = nested["response_txn"]["responses"][0]["response_range"]["kvs"]
                if base64.b64decode(kvs[0]["key"]) != keys[i]:
                    raise AssertionError(f"election {i}: our key is not the oldest")
                settled[0] += 1

    await asyncio.gather(*(sender() for _ in range(senders)))
    while events[0] < count:  # every put seen on the watch (decoded), as a contender sees it
        await asyncio.sleep(0.005)
    took, cpu = time.monotonic() - started, time.process_time() - cpu
    server = server_cpu() - server
    assert settled[0] == count
    await control.call("/v3/lease/revoke", {"ID": lease})
    watcher.cancel()
    print(f"RESULT settle {took:.3f} cpu {cpu:.3f} server_cpu {server:.3f}", flush=True)


# --- the parent ---------------------------------------------------------------------------------


def server_ops(hosts: str) -> dict[str, float]:
    import urllib.request

    host = hosts.split(",")[0]
    with urllib.request.urlopen(f"http://{host}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in METRICS or (name.startswith("grpc_server_handled_total") and '"Txn"' in name):
            found[name.split("{")[0]] = found.get(name.split("{")[0], 0.0) + float(value)
    return found


def one_run(command: list[str], pid: int, hosts: str, timeout: float) -> dict[str, float] | str:
    ops, env = server_ops(hosts), {**os.environ, SERVER_PID: str(pid)}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return "timed out"
    after = server_ops(hosts)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT")), None)
    if line is None:
        return f"failed: {(done.stdout + done.stderr).strip()[-300:]}"
    words = line.split()
    got = {words[i]: float(words[i + 1]) for i in range(1, len(words) - 1, 2)}
    got.update({k: after.get(k, 0.0) - ops.get(k, 0.0) for k in after})
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", default="1000,10000")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--batch", type=int, default=60, help="elections a floor request")
    parser.add_argument("--gc-threshold", default="700", help="ha's child's gc.set_threshold")
    parser.add_argument("--limit", type=float, default=150.0, help="seconds allowed to settle")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(floor_child(args.child, args.prefix, args.count, args.batch, 4))
        return

    from tests.support.backends.etcd import EtcdServer

    etcd = EtcdServer()
    etcd.start()
    assert etcd.process is not None
    pid, hosts, here = etcd.process.pid, etcd.hosts, os.path.abspath(__file__)
    many = str(ROOT / "benchmarks" / "many_elections.py")
    heads = ("kind", "count", "settle s", "cpu s", "server cpu s", "x floor")
    heads += ("puts/el", "deletes/el", "ranges/el", "txns/el")
    widths = (16, 7, 10, 8, 14, 9, 9, 11, 11, 9)
    try:
        print(
            "".join(
                f"{h:<{w}}" if i == 0 else f"{h:>{w}}"
                for i, (h, w) in enumerate(zip(heads, widths, strict=True))
            )
        )
        run = 0
        for count in (int(c) for c in args.counts.split(",")):
            for _ in range(args.rounds):
                run += 1
                floor = [sys.executable, here, "--child", hosts, "--count", str(count)]
                floor += ["--prefix", f"/floor-{os.getpid()}-{run}", "--batch", str(args.batch)]
                url = f"etcd://{hosts}/many-{os.getpid()}-{run}?session_timeout=4"
                ha = [sys.executable, many, "--child", url, "--count", str(count)]
                ha += ["--loop", "asyncio", "--idle", "0", "--limit", str(args.limit)]
                ha += ["--gc", args.gc_threshold]
                base: dict[str, float] | None = None
                for kind, command in (("floor", floor), ("ha (asyncio)", ha)):
                    got = one_run(command, pid, hosts, args.limit * 2 + 60)
                    if isinstance(got, str):
                        print(f"{kind:<16}{count:>7}  {got}")
                        continue
                    base = got if kind == "floor" else base
                    ratio = got["settle"] / base["settle"] if base else float("nan")
                    per = [
                        got.get(m, 0.0) / count
                        for m in (*METRICS[:1], METRICS[1], METRICS[2], "grpc_server_handled_total")
                    ]
                    print(
                        f"{kind:<16}{count:>7}{got['settle']:>10.2f}{got['cpu']:>8.2f}"
                        f"{got['server_cpu']:>14.2f}{ratio:>9.2f}"
                        + "".join(f"{p:>{w}.2f}" for p, w in zip(per, widths[6:], strict=True)),
                        flush=True,
                    )
        gc.collect()
        print(f"load average {os.getloadavg()}; ha's gc threshold {args.gc_threshold}")
    finally:
        etcd.remove()


if __name__ == "__main__":
    main()
