"""The kinds the fake API server serves: Namespaces, ConfigMaps (core v1), Leases
(coordination.k8s.io/v1), Events (core v1, as the API server validates them), and Pods (their
objects only, for label patches).

One ``Resource`` per kind says where it lives in the URL space, whether it is namespaced and
what discovery advertises for it, and the two update rules its registry strategy sets in
kube-apiserver (``AllowCreateOnUpdate``, ``AllowUnconditionalUpdate``, read by
staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go ``Store.Update``):

============  ==================  ========================  ==========================================
kind          create on update    update without version    strategy (kubernetes/kubernetes)
============  ==================  ========================  ==========================================
Namespace     no                  yes                       pkg/registry/core/namespace/strategy.go
ConfigMap     no                  yes                       pkg/registry/core/configmap/strategy.go
Event         yes                 yes                       pkg/registry/core/event/strategy.go
Lease         **yes**             **no** (422)              pkg/registry/coordination/lease/strategy.go
Pod           no                  yes                       pkg/registry/core/pod/strategy.go
============  ==================  ========================  ==========================================

Pods are served as objects only (no scheduling, no status, no validation of their spec): what
a test needs to see a client patch a pod's labels (``ha/drivers/kubernetes/announce.py``).

Everything else (storage, validation, routing) looks kinds up here, so serving another kind
starts with one row.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ("RESOURCES", "Resource", "find")

VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    # fields a fieldSelector may name beyond metadata.name and metadata.namespace
    fields: tuple[str, ...] = ()
    # the strategy's AllowCreateOnUpdate: a PUT to a missing name creates the object (201)
    create_on_update: bool = False
    # the strategy's AllowUnconditionalUpdate: a PUT without metadata.resourceVersion
    # overwrites; where False it is 422 ("must be specified for an update")
    unconditional_update: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """The storage prefix, as the real server's /registry/<plural>."""
        return f"{self.group}/{self.plural}"

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


RESOURCES: tuple[Resource, ...] = (
    Resource("", "v1", "namespaces", "namespace", "Namespace", False, ("ns",), ("status.phase",)),
    Resource("", "v1", "configmaps", "configmap", "ConfigMap", True, ("cm",)),
    Resource(
        "",
        "v1",
        "events",
        "event",
        "Event",
        True,
        ("ev",),
        (
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ),
        create_on_update=True,
    ),
    Resource("", "v1", "pods", "pod", "Pod", True, ("po",), ("status.phase", "spec.nodeName")),
    Resource(
        "coordination.k8s.io",
        "v1",
        "leases",
        "lease",
        "Lease",
        True,
        create_on_update=True,
        unconditional_update=False,
    ),
)


def find(group: str, version: str, plural: str) -> Resource | None:
    for resource in RESOURCES:
        if (resource.group, resource.version, resource.plural) == (group, version, plural):
            return resource
    return None
