"""The etcd backend through etcd's v3 JSON gateway: ``etcd://h1:2379,h2:2379/prefix``.

Where things are: ``driver`` (``EtcdDriver``: a facade that owns the parts below and starts
and closes them), ``transport`` (the requests: two gateways, the batchers, the fault gate),
``session`` (the lease, its keepalives and the connection states), ``watches`` (node events
from one watch on the prefix, resumed, or re-read and diffed after a compaction),
``operations`` (the node operations), ``mapping`` (ha's transactions as etcd transactions:
read, decide, write if nothing moved), ``single`` (one op in one round trip), ``subtree``
(recursive deletes), ``reads`` and ``writes`` (concurrent callers' requests batched into shared
transactions; ``batching`` what both share), ``keys`` (the nodes as keys and values),
``gateway`` (requests to etcd, its errors in ha's terms, endpoint failover), ``http``
(HTTP/1.1 on anyio streams), ``settings`` (the URL and the options). The test faults are
``ha.drivers._faults.ClientFaults`` over the transport's gate.
"""

from __future__ import annotations

from .driver import EtcdDriver

__all__ = ("EtcdDriver",)
