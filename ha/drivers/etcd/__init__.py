"""The etcd backend through etcd's v3 JSON gateway: ``etcd://h1:2379,h2:2379/prefix``.

Where things are: ``driver`` (``EtcdDriver``: the node operations), ``session`` (the lease,
its keepalives and the connection states; the lifecycle), ``watches`` (node events from one
watch on the prefix, resumed, or re-read and diffed after a compaction), ``mapping`` (ha's
transactions as etcd transactions: read, decide, write if nothing moved), ``single`` (one op
in one round trip), ``keys`` (the nodes as keys and values), ``gateway`` (HTTP to etcd with
httpx, its errors in ha's terms, endpoint failover), ``settings`` (the URL and the options),
``faults`` (the test hooks behind ``ha.testing.faults``).
"""

from __future__ import annotations

from .driver import EtcdDriver

__all__ = ("EtcdDriver",)
