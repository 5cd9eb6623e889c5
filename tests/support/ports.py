"""Loopback ports for the servers the tests start, chosen outside the kernel's ephemeral range.

A port the kernel handed out with ``bind(0)`` lies in ``ip_local_port_range``, so once it is
free again any outgoing connection may take it as its local port. A ZooKeeper member stopped by
a test could then not listen on its election port again (CI: "Leaving listener thread ... after
3 errors", the JVM exits with 14), and a client that dials a port nobody listens on can
even connect to itself. Ports below that range are never given out to outgoing connections.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ("ephemeral_range", "free_port")

RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10_000  # below this sit well-known services' ports
DEFAULT_EPHEMERAL = (32_768, 60_999)  # Linux's default, when /proc cannot say

_pick = random.SystemRandom()  # xdist workers forked from one seed must not pick alike


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


def free_port(attempts: int = 200) -> int:
    """A loopback TCP port nobody listens on right now, outside the ephemeral range."""
    spans = _outside(*ephemeral_range())
    for _ in range(attempts if spans else 0):
        span = _pick.choice(spans)
        port = _pick.randrange(span.start, span.stop)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    # every port outside the range is taken (or there is none): the kernel's choice will do
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
