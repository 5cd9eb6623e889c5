"""The Kubernetes backend: ``k8s://NAMESPACE/NAME``, on the API server with httpx.

Where things are: ``driver`` (``KubernetesDriver``: the node operations, each a read of the
tree's ConfigMap and a write with its resourceVersion), ``tree`` (the nodes as one ConfigMap;
transactions as pure functions on it), ``session`` (the session's Lease, renewed; the
connection states; the lifecycle), ``liveness`` (other sessions expired by their peers,
client-go style), ``watches`` (node events from a watch on the ConfigMap, resumed, or re-read
and diffed after a 410), ``api`` (HTTP to the API server, its errors in ha's terms),
``config`` (kubeconfig and in-cluster credentials), ``settings`` (the URL and the options),
``faults`` (the test hooks behind ``ha.testing.faults``), ``leaders`` (a Lease per election
showing its active to ``kubectl get lease``: information only).
"""

from __future__ import annotations

from .driver import KubernetesDriver

__all__ = ("KubernetesDriver",)
