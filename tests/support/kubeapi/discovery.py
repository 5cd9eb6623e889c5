"""Discovery documents: what ``kubectl`` reads before it can ``get lease``.

kubectl first asks ``/api`` and ``/apis`` which groups exist, then each group version for its
resources (names, kinds, short names, verbs), and ``/version``. Without these it stops with
"couldn't get current server API group list". The aggregated discovery format (v2) is not
served: kubectl falls back to these legacy documents when the answer is plain JSON.
"""

from __future__ import annotations

from typing import Any

from tests.support.kubeapi.resources import RESOURCES, VERBS

__all__ = ("document", "VERSION")

VERSION = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.0-fake",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.24",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def _groups() -> list[str]:
    return sorted({resource.group for resource in RESOURCES if resource.group})


def _group(name: str) -> dict[str, Any]:
    version = {"groupVersion": f"{name}/v1", "version": "v1"}
    return {"name": name, "versions": [version], "preferredVersion": version}


def _resource_list(group: str, version: str) -> dict[str, Any] | None:
    served = [r for r in RESOURCES if (r.group, r.version) == (group, version)]
    if not served:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": [
            {
                "name": r.plural,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": list(VERBS),
                **({"shortNames": list(r.short_names)} if r.short_names else {}),
            }
            for r in served
        ],
    }


def document(path: str, address: str) -> dict[str, Any] | None:
    """The discovery document at ``path`` (no trailing slash), or None if it is not one."""
    if path == "/version":
        return VERSION
    if path == "/api":
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
        }
    if path == "/apis":
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [_group(name) for name in _groups()],
        }
    if path == "/api/v1":
        return _resource_list("", "v1")
    parts = path.split("/")[1:]
    if len(parts) == 2 and parts[0] == "apis" and parts[1] in _groups():
        return {"kind": "APIGroup", "apiVersion": "v1", **_group(parts[1])}
    if len(parts) == 3 and parts[0] == "apis":
        return _resource_list(parts[1], parts[2])
    return None
