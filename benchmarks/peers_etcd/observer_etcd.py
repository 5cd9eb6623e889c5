"""The harness's own etcd client: it finds an election's keys and dates their deletion.

The etcd counterpart of ``peers_zookeeper/observer.py``, with the same two calls that
``peers_zookeeper/contenders.py``'s ``Election`` makes. A kind names where its contenders'
keys are (``Keys``: a key prefix computed from the election path); only keys attached to a
lease count. In a crash round a watch on that prefix is opened (from the revision the keys
were read at, so no deletion is missed) before the kill, and a thread stamps
``CLOCK_MONOTONIC`` at the first DELETE of one of them: etcd deletes a lease's keys when it
expires the lease, and sends the DELETE to every watcher of the key from that same revision,
so the stamp stands in for the moment the successor could learn of the expiry.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def range_end(prefix: bytes) -> bytes:
    return prefix[:-1] + bytes([prefix[-1] + 1])


@dataclass(frozen=True)
class Keys:
    """Where a kind's election keeps its contenders' keys."""

    directory: str  # shown in the table ("seen" was dated on PATH/<directory>)
    prefix: Callable[[str], str]  # election path -> the keys' prefix
    per_contender: bool = True  # False: only the leader has a key (a lock)


@dataclass
class Deletions:
    """One crash round's watch: the time of the first deletion among the watched keys."""

    first: int | None = None
    done: threading.Event = field(default_factory=threading.Event)
    ready: threading.Event = field(default_factory=threading.Event)


class Observer:
    def __init__(self, hosts: str) -> None:
        self.base = f"http://{hosts.split(',')[0]}/v3"
        self.client = httpx.Client(timeout=30, trust_env=False)
        self._revisions: dict[str, int] = {}  # prefix -> revision of the last read

    def _post(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        reply: dict[str, Any] = self.client.post(f"{self.base}/{method}", json=body).json()
        return reply

    def queue_nodes(self, path: str, queues: tuple[Keys, ...]) -> tuple[Keys, list[str]] | None:
        """The first candidate holding keys on a lease, and those keys."""
        for queue in queues:
            prefix = queue.prefix(path).encode()
            reply = self._post(
                "kv/range", {"key": b64(prefix), "range_end": b64(range_end(prefix))}
            )
            revision = int(reply["header"]["revision"])
            kvs = reply.get("kvs") or []
            keys = [base64.b64decode(kv["key"]).decode() for kv in kvs if kv.get("lease")]
            if keys:
                self._revisions[queue.prefix(path)] = revision
                return queue, keys
        return None

    def watch(self, keys: list[str]) -> Deletions:
        deletions = Deletions()
        prefix = min(keys)
        start = next((r for p, r in self._revisions.items() if prefix.startswith(p)), 0)
        wanted = {key.encode() for key in keys}
        # one watch over every key from the lowest to the highest watched one
        body = {
            "create_request": {
                "key": b64(min(wanted)),
                "range_end": b64(max(wanted) + b"\0"),
                "start_revision": str(start + 1),
                "filters": ["NOPUT"],
            }
        }
        threading.Thread(target=self._follow, args=(body, wanted, deletions), daemon=True).start()
        deletions.ready.wait(10)
        return deletions

    def _follow(self, body: dict[str, Any], wanted: set[bytes], deletions: Deletions) -> None:
        with httpx.Client(timeout=httpx.Timeout(10, read=60), trust_env=False) as client:
            with client.stream("POST", f"{self.base}/watch", json=body) as response:
                for line in response.iter_lines():
                    result = json.loads(line).get("result") or {}
                    if result.get("created"):
                        deletions.ready.set()
                    for event in result.get("events") or []:
                        key = base64.b64decode(event["kv"]["key"])
                        if event.get("type") == "DELETE" and key in wanted:
                            deletions.first = time.monotonic_ns()
                            deletions.done.set()
                            return
                    if result.get("canceled"):
                        deletions.ready.set()
                        return

    def close(self) -> None:
        self.client.close()
