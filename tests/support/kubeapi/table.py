"""Server-side printing: the ``Table`` kubectl asks for (``Accept: ...;as=Table;...``).

``kubectl get lease`` shows NAME, HOLDER and AGE because the API server sends those columns,
not because kubectl knows Leases. The fake prints the columns the real server prints for the
kinds it serves (Lease: Name, Holder, Age; ConfigMap: Name, Data, Age; Namespace: Name,
Status, Age; Event: Name, Age), so what a user sees through kubectl matches a cluster.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.support.kubeapi.resources import Resource

__all__ = ("table", "wants_table")


def wants_table(accept: str) -> bool:
    return any("as=Table" in part and "g=meta.k8s.io" in part for part in accept.split(","))


def age(timestamp: str | None) -> str:
    """kubectl's short human durations: 42s, 5m, 3h, 2d."""
    if not timestamp:
        return "<unknown>"
    created = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    seconds = max(0, int((datetime.now(UTC) - created).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _columns(resource: Resource) -> list[tuple[str, str]]:
    middle = {
        "Lease": [("Holder", "The holder of the lease")],
        "ConfigMap": [("Data", "Number of entries")],
        "Namespace": [("Status", "The status of the namespace")],
    }.get(resource.kind, [])
    return [("Name", "Name of the object"), *middle, ("Age", "Time since creation")]


def _cells(resource: Resource, obj: dict[str, Any]) -> list[Any]:
    metadata = obj["metadata"]
    middle: list[Any] = []
    if resource.kind == "Lease":
        middle = [(obj.get("spec") or {}).get("holderIdentity") or ""]
    elif resource.kind == "ConfigMap":
        middle = [len(obj.get("data") or {}) + len(obj.get("binaryData") or {})]
    elif resource.kind == "Namespace":
        middle = [(obj.get("status") or {}).get("phase", "")]
    return [metadata["name"], *middle, age(metadata.get("creationTimestamp"))]


def table(resource: Resource, objects: list[dict[str, Any]], version: str) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table with one row per object (each carrying its metadata)."""
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": version},
        "columnDefinitions": [
            {
                "name": name,
                "type": "integer" if name == "Data" else "string",
                "format": "name" if name == "Name" else "",
                "description": description,
                "priority": 0,
            }
            for name, description in _columns(resource)
        ],
        "rows": [
            {
                "cells": _cells(resource, obj),
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj["metadata"],
                },
            }
            for obj in objects
        ],
    }
