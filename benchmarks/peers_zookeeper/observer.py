"""The harness's own ZooKeeper client: it watches an election's queue and dates node deletions.

A contender kind names where its election keeps one ephemeral node per contender (or, for
``ha`` before protocol 2, only the leader's ``lock``) as a list of ``Queue`` candidates relative
to the election path; the first candidate holding an ephemeral child is the one watched. So one
kind setting covers a library whose layout changes between versions.

In a crash round the observer sets an exists watch on every ephemeral node of that queue just
before the kill and stamps ``CLOCK_MONOTONIC`` (in kazoo's callback) at the first deletion: the
dead session's nodes are the only ones deleted until a successor leads, since ZooKeeper removes
all of a session's ephemeral nodes at once when it expires the session. That stamp stands in
for the moment the successor learned of the expiry.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError


@dataclass(frozen=True)
class Queue:
    """Where a kind's election keeps its contenders' ephemeral nodes."""

    directory: str  # relative to the election path; "" is the path itself
    per_contender: bool = True  # False: only the leader has a node there (ha's ``lock``)


@dataclass
class Deletions:
    """One crash round's watches: the time of the first deletion among the watched nodes."""

    first: int | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def stamp(self, event: Any) -> None:  # kazoo's callback thread
        now = time.monotonic_ns()
        if event.type == "DELETED" and self.first is None:
            self.first = now
            self.done.set()


class Observer:
    def __init__(self, hosts: str, session_timeout: float) -> None:
        self.client = KazooClient(hosts=hosts, timeout=max(session_timeout, 4.0))
        self.client.start(timeout=30)

    def queue_nodes(self, path: str, queues: tuple[Queue, ...]) -> tuple[Queue, list[str]] | None:
        """The first candidate queue holding ephemeral nodes, and those nodes' full paths."""
        for queue in queues:
            directory = f"{path}/{queue.directory}".rstrip("/")
            try:
                children = self.client.get_children(directory)
            except NoNodeError:
                continue
            nodes = []
            for child in children:
                stat = self.client.exists(f"{directory}/{child}")
                if stat is not None and stat.ephemeralOwner:
                    nodes.append(f"{directory}/{child}")
            if nodes:
                return queue, nodes
        return None

    def watch(self, nodes: list[str]) -> Deletions:
        deletions = Deletions()
        for node in nodes:
            if self.client.exists(node, watch=deletions.stamp) is None:
                deletions.first = deletions.first or time.monotonic_ns()
                deletions.done.set()
        return deletions

    def close(self) -> None:
        self.client.stop()
        self.client.close()
