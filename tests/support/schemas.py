"""Manifests checked against the Kubernetes API's own schema, as the official Python client
carries it (``kubernetes``, a dev extra): its models are generated from the API server's
OpenAPI document, one pydantic model per kind, which refuses unknown fields, requires what the
API requires and checks each field's type (an int-or-string too).

No kube-apiserver (and no kubeconform, which would fetch the schemas from the network) runs
where the tests run; and the FAKE API server serves the election's kinds only, not
Deployments, Services or PodDisruptionBudgets. What this does not check is what only the
server's validation code knows (a selector that must match the template's labels, value
ranges): tests/deploy/test_manifests.py checks those it relies on itself.
"""

from __future__ import annotations

import re
from typing import Any

import kubernetes.client
import pydantic

__all__ = ("schema_errors",)

# the official client's API classes by group (its names are the groups' names, camel-cased)
GROUPS = {
    "": "Core",
    "apps": "Apps",
    "policy": "Policy",
    "rbac.authorization.k8s.io": "RbacAuthorization",
    "coordination.k8s.io": "Coordination",
}


def _snake(kind: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()


def _model(api_version: str, kind: str) -> type[pydantic.BaseModel] | None:
    """The model of ``kind`` if the official client's API serves it at ``api_version``."""
    group, _, version = api_version.rpartition("/")
    api = getattr(kubernetes.client, f"{GROUPS.get(group, '?')}{version.capitalize()}Api", None)
    model = getattr(kubernetes.client, f"{version.capitalize()}{kind}", None)
    served = api is not None and (
        hasattr(api, f"create_namespaced_{_snake(kind)}") or hasattr(api, f"create_{_snake(kind)}")
    )
    return model if served and isinstance(model, type) else None


def schema_errors(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, what) for each way ``doc`` breaks its kind's schema; [] when it fits."""
    api_version, kind = str(doc.get("apiVersion")), str(doc.get("kind"))
    model = _model(api_version, kind)
    if model is None:
        return [(f"{api_version} {kind}", "not a kind the official client's API serves")]
    try:
        model.model_validate(doc)
    except pydantic.ValidationError as exc:
        found = {}
        for error in exc.errors():
            loc = [str(part) for part in error["loc"]]
            if loc and loc[-1] in ("int", "str"):  # one branch of an int-or-string
                loc = loc[:-1]
            found.setdefault(".".join(loc), error["msg"])
        return sorted(found.items())
    return []
