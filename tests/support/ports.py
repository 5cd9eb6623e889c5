"""Loopback ports for the servers the tests start, chosen outside the kernel's ephemeral range.

A port the kernel handed out with ``bind(0)`` lies in ``ip_local_port_range``, so once it is
free again any outgoing connection may take it as its local port. A ZooKeeper member stopped by
a test could then not listen on its election port again (CI: "Leaving listener thread ... after
3 errors", the JVM exits with 14), and a client that dials a port nobody listens on can
even connect to itself. Ports below that range are never given out to outgoing connections.

Nothing reserves a port between the check here and the server's own bind, so two servers must
not be handed the same one: a process never hands out a port twice (until it has handed out
half its share), and each xdist worker draws from its own residue class of the port numbers
(CI: an etcd member of one worker's cluster found its port taken, "bind: address already in
use", when both workers drew from the 4,536 ports above the range).
"""

from __future__ import annotations

import os
import random
import socket
from collections import deque
from pathlib import Path

__all__ = ("ephemeral_range", "free_port", "worker_share")

RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10_000  # below this sit well-known services' ports
DEFAULT_EPHEMERAL = (32_768, 60_999)  # Linux's default, when /proc cannot say

_pick = random.SystemRandom()  # xdist workers forked from one seed must not pick alike
_given: deque[int] = deque()  # oldest first
_given_set: set[int] = set()


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for the local ports of outgoing connections (first, last)."""
    try:
        first, last = RANGE_FILE.read_text().split()
        return int(first), int(last)
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL


def _outside(first: int, last: int) -> list[range]:
    spans = [range(LOWEST, first), range(last + 1, 65_536)]
    return [span for span in spans if len(span) > 0]


def worker_share() -> tuple[int, int]:
    """(index, count): this xdist worker's residue class of port numbers; (0, 1) outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    try:
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        index = int(name[2:]) if name.startswith("gw") else 0
    except ValueError:
        return 0, 1
    return (index, count) if 0 <= index < count else (0, 1)


def _candidates() -> list[int]:
    index, count = worker_share()
    return [port for span in _outside(*ephemeral_range()) for port in span if port % count == index]


def _remember(port: int, share: int) -> None:
    _given.append(port)
    _given_set.add(port)
    while len(_given) > share // 2:  # a long session may reuse the ports it handed out first
        _given_set.discard(_given.popleft())


def free_port(attempts: int = 200) -> int:
    """A loopback TCP port nobody listens on right now, outside the ephemeral range, and not one
    this process handed out recently."""
    candidates = _candidates()
    for _ in range(attempts if candidates else 0):
        port = _pick.choice(candidates)  # uniform over all of them, whichever span holds it
        if port in _given_set:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _remember(port, len(candidates))
        return port
    # every port outside the range is taken (or there is none): the kernel's choice will do
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
