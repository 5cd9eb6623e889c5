"""The Kubernetes backend: ``k8s://NAMESPACE/NAME``, on the API server with httpx.

Where things are: ``driver`` (``KubernetesDriver``: a facade that owns the parts below and
starts and closes them; the node operations, each a read of the tree's ConfigMap and a write
with its resourceVersion), ``transport`` (the requests, where things are in the namespace,
the fault gate), ``store`` (the tree's ConfigMap read, written, updated), ``tree`` (the nodes as
one ConfigMap; transactions as pure functions on it), ``session`` (the session's Lease,
renewed; the connection states), ``liveness`` (other sessions expired by their peers,
client-go style), ``watches`` (node events from a watch on the ConfigMap, resumed, or re-read
and diffed after a 410), ``leaders`` (a Lease per election showing its active to ``kubectl get
lease``: information only), ``api`` (HTTP to the API server, its errors in ha's terms),
``config`` (kubeconfig and in-cluster credentials), ``settings`` (the URL and the options).
The test faults are ``ha.drivers._faults.ClientFaults`` over the transport's gate.
"""

from __future__ import annotations

from .driver import KubernetesDriver

__all__ = ("KubernetesDriver",)
