"""The REST verbs on one kind: list, get, create, update (PUT), patch, delete.

The rules kube-apiserver applies, which the driver and every client rely on. Each names where
kubernetes/kubernetes implements it; tests/kubeapi/test_updates.py and test_objects.py pin them.

- create of an existing name: 409 AlreadyExists; in a missing namespace: 404 (namespaces
  "x" not found); with ``metadata.resourceVersion`` set: 500, as the real storage layer says.
  ``generateName``: at most 58 characters of it, then 5 random characters of
  ``bcdfghjklmnpqrstvwxz2456789``, drawn again up to 8 times if the name is taken
  (apiserver/pkg/storage/names/generate.go ``simpleNameGenerator``, apimachinery
  util/rand ``String``, registry/store.go ``createWithGenerateNameRetry``);
- get, patch or delete of a missing object: 404 NotFound. A PATCH never creates
  (endpoints/handlers/patch.go: ``createNewObject`` of a merge or JSON patch is NotFound);
- update (PUT), as registry/store.go ``Store.Update`` does it, in this order:
  1. a ``metadata.uid`` in the body is a precondition (rest/update.go
     ``defaultUpdatedObjectInfo.Preconditions``), checked against the stored object before
     anything else (storage/etcd3/store.go ``GuaranteedUpdate`` → ``Preconditions.Check``):
     409 Conflict "Precondition failed: UID in precondition". A missing object has no uid,
     so a PUT carrying one never creates anything;
  2. a missing object: 404 NotFound, unless the kind allows create on update
     (``resources.py``: Leases and Events do). Then the PUT **creates** it, answered 201,
     and the body's resourceVersion is ignored (the create branch of ``Store.Update`` never
     compares it);
  3. no ``metadata.resourceVersion`` in the body: an unconditional overwrite where the kind
     allows it (ConfigMaps), else 422 "metadata.resourceVersion: Invalid value: 0x0: must be
     specified for an update" (Leases);
  4. a resourceVersion other than the stored one: 409 Conflict "the object has been modified";
- a body whose name or namespace differs from the URL: 400 BadRequest;
- an update that changes nothing writes nothing: the resourceVersion stays, no watch event;
- delete with ``preconditions.uid`` or ``.resourceVersion`` (DeleteOptions) that do not
  match: 409 Conflict, the uid first, with ``rest/delete.go`` ``BeforeDelete``'s messages
  (which name the Kind, not the resource: "Lease.coordination.k8s.io").

The caller (the HTTP layer) holds the store's lock around each call.
"""

from __future__ import annotations

import base64
import copy
import json
import secrets
from typing import Any

from tests.support.kubeapi.patch import apply_patch
from tests.support.kubeapi.resources import RESOURCES, Resource
from tests.support.kubeapi.selectors import matcher
from tests.support.kubeapi.status import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    invalid,
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
GENERATED = 63 - 5  # names.simpleNameGenerator: room for the 5 random characters
RANDOM = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery util/rand: no vowels, no 0, 1, 3
NAME_ATTEMPTS = 8  # registry/store.go maxNameGenerationCreateAttempts


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
            metadata["name"] = self._generated_name(resource, namespace, metadata["generateName"])
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
        self._check_namespace(resource, namespace)
        key = self._key(resource, namespace, metadata["name"])
        if self.store.get(key) is not None:
            raise already_exists(resource.group, resource.plural, metadata["name"])
        return self._insert(resource, key, obj)

    def _check_namespace(self, resource: Resource, namespace: str | None) -> None:
        if resource.namespaced and self.store.get((NAMESPACES.key, "", namespace or "")) is None:
            raise not_found("", "namespaces", namespace or "")

    def _generated_name(self, resource: Resource, namespace: str | None, base: str) -> str:
        """``base`` (cut to 58 characters) and 5 random ones, a name not taken yet."""
        for _ in range(NAME_ATTEMPTS):
            name = base[:GENERATED] + "".join(secrets.choice(RANDOM) for _ in range(5))
            if self.store.get(self._key(resource, namespace, name)) is None:
                return name
        raise ApiError(  # apimachinery errors.NewGenerateNameConflict
            409,
            "AlreadyExists",
            f'{_qualified(resource.group, resource.plural)} "{name}" already exists, the server'
            " was not able to generate a unique name for the object",
            {**_details(resource, name), "retryAfterSeconds": 1},
        )

    def _insert(self, resource: Resource, key: Key, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a new object: its uid and creation time are the server's."""
        metadata = obj["metadata"]
        for field in ("uid", "creationTimestamp", "deletionTimestamp"):
            metadata.pop(field, None)
        if resource.kind == "Namespace":
            obj = {**_namespace_object(metadata["name"]), **obj}
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = metadata[
                "name"
            ]
        return self.store.create(key, obj)

    def _check_version(self, resource: Resource, obj: dict[str, Any], old: dict[str, Any]) -> None:
        """The resourceVersion rules of ``Store.Update`` for an existing object."""
        name = old["metadata"]["name"]
        sent = obj["metadata"].get("resourceVersion")
        if not sent and not resource.unconditional_update:
            # registry/store.go: NewInvalid(GroupKind{group, resource}, ...), hence "leases"
            cause = {
                "reason": "FieldValueInvalid",
                "message": "Invalid value: 0x0: must be specified for an update",
                "field": "metadata.resourceVersion",
            }
            raise invalid(resource.group, resource.plural, name, [cause])
        if sent and sent != old["metadata"]["resourceVersion"]:
            raise conflict(resource.group, resource.plural, name, MODIFIED)

    def _write(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        obj: dict[str, Any],
        old: dict[str, Any],
    ) -> dict[str, Any]:
        """The shared tail of update and patch: validation, the write."""
        metadata = obj["metadata"]
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
    ) -> tuple[dict[str, Any], bool]:
        """A PUT: the object written, and True if the PUT created it (the answer is 201)."""
        obj = decode(resource, body)
        self._check_identity(resource, namespace, obj, name)
        metadata = obj["metadata"]
        metadata["name"] = name
        key = self._key(resource, namespace, name)
        old = self.store.get(key)
        uid = metadata.get("uid")
        stored = old["metadata"]["uid"] if old is not None else ""
        if uid and uid != stored:
            raise conflict(
                resource.group,
                resource.plural,
                name,
                _invalid_object(
                    resource,
                    namespace,
                    name,
                    f"Precondition failed: UID in precondition: {uid}, UID in object meta: {stored}",
                ),
            )
        if old is None:
            if not resource.create_on_update:
                raise not_found(resource.group, resource.plural, name)
            metadata.pop("resourceVersion", None)  # the create branch never looks at it
            self._check_namespace(resource, namespace)
            validate(resource, obj)
            return self._insert(resource, key, obj), True
        self._check_version(resource, obj, old)
        return self._write(resource, namespace, name, obj, old), False

    def patch(
        self, resource: Resource, namespace: str | None, name: str, media_type: str, body: Any
    ) -> dict[str, Any]:
        old = self._existing(resource, namespace, name)  # a patch never creates
        patched = apply_patch(media_type, copy.deepcopy(old), body)
        obj = decode(resource, patched)
        self._check_identity(resource, namespace, obj, name)
        obj["metadata"]["name"] = name
        uid = obj["metadata"].get("uid")
        if uid and uid != old["metadata"]["uid"]:  # ValidateObjectMetaUpdate
            cause = {
                "reason": "FieldValueInvalid",
                "message": f'Invalid value: "{uid}": field is immutable',
                "field": "metadata.uid",
            }
            raise invalid(resource.group, resource.kind, name, [cause])
        self._check_version(resource, obj, old)
        return self._write(resource, namespace, name, obj, old)

    def delete(
        self, resource: Resource, namespace: str | None, name: str, body: Any
    ) -> dict[str, Any]:
        old = self._existing(resource, namespace, name)
        preconditions = (body or {}).get("preconditions") or {} if isinstance(body, dict) else {}
        want_rv, want_uid = preconditions.get("resourceVersion"), preconditions.get("uid")
        # rest/delete.go BeforeDelete: the uid first, and the Kind in the message
        if want_uid and want_uid != old["metadata"]["uid"]:
            raise conflict(
                resource.group,
                resource.kind,
                name,
                f"the UID in the precondition ({want_uid}) does not match the UID in record"
                f" ({old['metadata']['uid']}). The object might have been deleted and then"
                " recreated",
            )
        if want_rv and want_rv != old["metadata"]["resourceVersion"]:
            raise conflict(
                resource.group,
                resource.kind,
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


def _qualified(group: str, plural: str) -> str:
    return f"{plural}.{group}" if group else plural


def _details(resource: Resource, name: str) -> dict[str, Any]:
    group = {"group": resource.group} if resource.group else {}
    return {"name": name, **group, "kind": resource.plural}


def _invalid_object(resource: Resource, namespace: str | None, name: str, why: str) -> str:
    """How the storage layer words a failed precondition (storage/errors.go
    ``NewInvalidObjError``), keyed by the object's etcd key."""
    key = "/".join(part for part in ("/registry", resource.plural, namespace, name) if part)
    return f"StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: {why}"
