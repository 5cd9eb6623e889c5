"""The REST verbs on one kind: list, get, create, update (PUT), patch, delete.

The rules kube-apiserver applies, which the driver and every client rely on:

- create of an existing name: 409 AlreadyExists; in a missing namespace: 404 (namespaces
  "x" not found); with ``metadata.resourceVersion`` set: 500, as the real storage layer says;
- get, update, patch or delete of a missing object: 404 NotFound (ConfigMaps and Leases do
  not create on update);
- update or patch whose object carries a ``resourceVersion`` other than the stored one: 409
  Conflict. **Without one, the update is an unconditional overwrite**, as on the real server;
- a body whose name or namespace differs from the URL: 400 BadRequest;
- an update that changes nothing writes nothing: the resourceVersion stays, no watch event;
- delete with ``preconditions.resourceVersion`` or ``.uid`` that do not match: 409 Conflict.

The caller (the HTTP layer) holds the store's lock around each call.
"""

from __future__ import annotations

import base64
import copy
import json
import secrets
import string
from typing import Any

from tests.support.kubeapi.patch import apply_patch
from tests.support.kubeapi.resources import RESOURCES, Resource
from tests.support.kubeapi.selectors import matcher
from tests.support.kubeapi.status import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    not_found,
    success,
)
from tests.support.kubeapi.store import Key, Store
from tests.support.kubeapi.validation import decode, validate

__all__ = ("Rest",)

NAMESPACES = next(r for r in RESOURCES if r.plural == "namespaces")
MODIFIED = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def _namespace_object(name: str) -> dict[str, Any]:
    return {
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


class Rest:
    def __init__(self, store: Store) -> None:
        self.store = store

    def ensure_namespace(self, name: str) -> None:
        """Create a namespace unless it exists (``default`` at start, as in every cluster)."""
        key = (NAMESPACES.key, "", name)
        if self.store.get(key) is None:
            self.store.create(key, _namespace_object(name))

    def _key(self, resource: Resource, namespace: str | None, name: str) -> Key:
        return (resource.key, namespace or "", name)

    def _existing(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self.store.get(self._key(resource, namespace, name))
        if obj is None:
            raise not_found(resource.group, resource.plural, name)
        return obj

    def list(
        self, resource: Resource, namespace: str | None, query: dict[str, str]
    ) -> dict[str, Any]:
        match = matcher(resource, query.get("labelSelector"), query.get("fieldSelector"))
        items = [obj for obj in self.store.select(resource.key, namespace) if match(obj)]
        start = query.get("continue")
        if start:
            try:
                after = json.loads(base64.urlsafe_b64decode(start))["after"]
            except (ValueError, KeyError, TypeError):
                raise bad_request(f"invalid continue token {start!r}") from None
            items = [obj for obj in items if _order(obj) > tuple(after)]
        metadata: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        limit = int(query.get("limit") or 0)
        if limit > 0 and len(items) > limit:
            items = items[:limit]
            token = json.dumps({"after": list(_order(items[-1]))}).encode()
            metadata["continue"] = base64.urlsafe_b64encode(token).decode()
            metadata["remainingItemCount"] = 0  # not tracked; clients must not rely on it
        for item in items:  # typed lists carry kind and apiVersion once, not per item
            item.pop("kind", None)
            item.pop("apiVersion", None)
        return {
            "kind": resource.list_kind,
            "apiVersion": resource.api_version,
            "metadata": metadata,
            "items": items,
        }

    def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        return self._existing(resource, namespace, name)

    def _check_identity(
        self, resource: Resource, namespace: str | None, obj: dict[str, Any], name: str | None
    ) -> None:
        metadata = obj["metadata"]
        if name is not None and metadata.get("name") not in (None, "", name):
            raise bad_request(
                f"the name of the object ({metadata['name']}) does not match the name on the URL ({name})"
            )
        if resource.namespaced:
            if metadata.get("namespace") not in (None, "", namespace):
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            metadata["namespace"] = namespace
        else:
            metadata.pop("namespace", None)

    def create(self, resource: Resource, namespace: str | None, body: Any) -> dict[str, Any]:
        obj = decode(resource, body)
        self._check_identity(resource, namespace, obj, None)
        metadata = obj["metadata"]
        if not metadata.get("name") and metadata.get("generateName"):
            alphabet = string.ascii_lowercase + string.digits
            metadata["name"] = metadata["generateName"] + "".join(
                secrets.choice(alphabet) for _ in range(5)
            )
        if not metadata.get("name"):
            raise ApiError(
                422,
                "Invalid",
                f'{resource.kind} "" is invalid: metadata.name: Required value: name or generateName is required',
                {
                    "kind": resource.kind,
                    "causes": [
                        {
                            "reason": "FieldValueRequired",
                            "message": "Required value: name or generateName is required",
                            "field": "metadata.name",
                        }
                    ],
                },
            )
        validate(resource, obj)
        if metadata.get("resourceVersion"):
            raise ApiError(
                500,
                "InternalError",
                "Internal error occurred: resourceVersion should not be set on objects to be created",
            )
        if resource.namespaced and self.store.get((NAMESPACES.key, "", namespace or "")) is None:
            raise not_found("", "namespaces", namespace or "")
        key = self._key(resource, namespace, metadata["name"])
        if self.store.get(key) is not None:
            raise already_exists(resource.group, resource.plural, metadata["name"])
        for field in ("uid", "creationTimestamp", "deletionTimestamp"):
            metadata.pop(field, None)
        if resource.kind == "Namespace":
            obj = {**_namespace_object(metadata["name"]), **obj}
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = metadata[
                "name"
            ]
        return self.store.create(key, obj)

    def _write(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        obj: dict[str, Any],
        old: dict[str, Any],
    ) -> dict[str, Any]:
        """The shared tail of update and patch: preconditions, validation, the write."""
        self._check_identity(resource, namespace, obj, name)
        metadata = obj["metadata"]
        metadata["name"] = name
        sent = metadata.get("resourceVersion")
        if sent and sent != old["metadata"]["resourceVersion"]:
            raise conflict(resource.group, resource.plural, name, MODIFIED)
        if metadata.get("uid") and metadata["uid"] != old["metadata"]["uid"]:
            raise conflict(
                resource.group,
                resource.plural,
                name,
                f"Precondition failed: UID in precondition: {metadata['uid']}, UID in object meta: {old['metadata']['uid']}",
            )
        validate(resource, obj)
        if resource.kind == "ConfigMap" and old.get("immutable"):
            for field in ("data", "binaryData", "immutable"):
                if obj.get(field) != old.get(field):
                    raise ApiError(
                        422,
                        "Invalid",
                        f'ConfigMap "{name}" is invalid: {field}: Forbidden: field is immutable when `immutable` is set',
                        {
                            "name": name,
                            "kind": "ConfigMap",
                            "causes": [
                                {
                                    "reason": "FieldValueForbidden",
                                    "message": "Forbidden: field is immutable when `immutable` is set",
                                    "field": field,
                                }
                            ],
                        },
                    )
        for field in ("uid", "creationTimestamp", "resourceVersion"):
            metadata[field] = old["metadata"][field]
        if obj == old:  # nothing changed: no write, the resourceVersion stays
            return old
        return self.store.update(self._key(resource, namespace, name), obj)

    def update(
        self, resource: Resource, namespace: str | None, name: str, body: Any
    ) -> dict[str, Any]:
        obj = decode(resource, body)
        old = self._existing(resource, namespace, name)
        return self._write(resource, namespace, name, obj, old)

    def patch(
        self, resource: Resource, namespace: str | None, name: str, media_type: str, body: Any
    ) -> dict[str, Any]:
        old = self._existing(resource, namespace, name)
        patched = apply_patch(media_type, copy.deepcopy(old), body)
        obj = decode(resource, patched)
        return self._write(resource, namespace, name, obj, old)

    def delete(
        self, resource: Resource, namespace: str | None, name: str, body: Any
    ) -> dict[str, Any]:
        old = self._existing(resource, namespace, name)
        preconditions = (body or {}).get("preconditions") or {} if isinstance(body, dict) else {}
        want_rv, want_uid = preconditions.get("resourceVersion"), preconditions.get("uid")
        if want_uid and want_uid != old["metadata"]["uid"]:
            raise conflict(
                resource.group,
                resource.plural,
                name,
                f"Precondition failed: UID in precondition: {want_uid}, UID in object meta: {old['metadata']['uid']}",
            )
        if want_rv and want_rv != old["metadata"]["resourceVersion"]:
            raise conflict(
                resource.group,
                resource.plural,
                name,
                f"the ResourceVersion in the precondition ({want_rv}) does not match the"
                f" ResourceVersion in record ({old['metadata']['resourceVersion']}). The object"
                " might have been modified",
            )
        if resource.kind == "Namespace":  # the namespace controller's work, done at once
            for other in RESOURCES:
                if other.namespaced:
                    for obj in self.store.select(other.key, name):
                        self.store.delete((other.key, name, obj["metadata"]["name"]))
            gone = self.store.delete(self._key(resource, namespace, name))
            gone["status"] = {"phase": "Terminating"}
            return gone
        self.store.delete(self._key(resource, namespace, name))
        return success(resource.group, resource.plural, name, old["metadata"]["uid"])

    def delete_collection(
        self, resource: Resource, namespace: str | None, query: dict[str, str], body: Any
    ) -> dict[str, Any]:
        """DELETE on a collection: every object the selectors match; the list of them."""
        if resource.kind == "Namespace":
            raise ApiError(405, "MethodNotAllowed", "namespaces cannot be deleted as a collection")
        listed = self.list(resource, namespace, {**query, "limit": ""})
        for item in listed["items"]:
            item_namespace = item["metadata"].get("namespace")
            self.delete(resource, item_namespace, item["metadata"]["name"], body)
        listed["metadata"]["resourceVersion"] = str(self.store.rv)
        return listed


def _order(obj: dict[str, Any]) -> tuple[str, str]:
    return (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
