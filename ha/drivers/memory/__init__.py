"""The in-memory backend: ``memory://NAME``, many sessions of one process on a named cluster.

It models a ZooKeeper server faithfully enough to test the layers above against: sessions that
the server expires ``session_timeout`` after their last heartbeat, a client that pings every
third of the timeout and declares itself disconnected after two thirds without an answer (as
ZooKeeper's client does), ephemeral nodes, versions, multi-op transactions, watches that are held
back while the client is cut off. Faults are injected on the driver (``disconnect``,
``partition``, ``freeze``, ``crash``, ``fail_next``, ``delay``) and on the cluster (``expire``).

Server time is ``time.monotonic()``, client time ``anyio.current_time()``: both are monotonic
clocks of one machine running at the same rate, which is all the timing assumption needs.

Where things are: ``cluster`` (``MemoryCluster``, the server: its tree, sessions and their
expiry, transactions, watches) and ``driver`` (``MemoryDriver``, the client: its session,
heartbeats and connection states, its faults, the node operations as requests to the server).
"""

from __future__ import annotations

from .cluster import MemoryCluster
from .driver import MemoryDriver

__all__ = ("MemoryCluster", "MemoryDriver")
