"""What the API server refuses, in its two stages: decoding (400) and validation (422).

Decoding fails when a body cannot become the Go type at all: not JSON, the wrong kind, a
string where an int32 goes, bad base64 in ``binaryData``, or a MicroTime that is not RFC 3339
with exactly six fractional digits (Go's ``time.Parse`` with ``RFC3339Micro`` takes no other
count). The real server answers those with 400 BadRequest "... cannot be handled as a Lease".

Validation runs on a decoded object and answers 422 Invalid, one ``cause`` per broken field:
names are DNS-1123 subdomains of at most 253 characters (namespaces: labels of at most 63),
ConfigMap keys match ``[-._a-zA-Z0-9]+``, the values of ``data`` plus ``binaryData`` (their
bytes; keys are not counted) hold at most 1 MiB and the two share no key (the duplicate is
reported on ``data[key]``: pkg/apis/core/validation/validation.go ``ValidateConfigMap``,
``core.MaxSecretSize``), a Lease's ``leaseDurationSeconds`` is > 0 (why client-go's release writes 1,
kubernetes/kubernetes#88194) and its ``leaseTransitions`` >= 0.

Events (core v1) pass the legacy rules of pkg/apis/core/validation/events.go
(``legacyValidateEvent``, all that a create through core/v1 gets): without an ``eventTime``,
``involvedObject.namespace`` must equal the Event's namespace (an empty one: the Event's
namespace is "" or ``default``); with one, an empty ``involvedObject.namespace`` is allowed
only in ``default`` and ``kube-system``, and ``reportingComponent`` (a qualified name),
``reportingInstance`` (at most 128), ``action`` (at most 128) and ``reason`` (at most 128) are
required, and ``message`` holds at most 1024 characters.
"""

from __future__ import annotations

import base64
import binascii
import re
from datetime import datetime
from typing import Any

from tests.support.kubeapi.resources import Resource
from tests.support.kubeapi.status import ApiError, bad_request, invalid

__all__ = ("MAX_CONFIG_BYTES", "decode", "validate")

MAX_CONFIG_BYTES = 1024 * 1024
INT32 = (-(2**31), 2**31 - 1)

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_DNS_LABEL = re.compile(_LABEL)
_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_MICRO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})")

SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or"
    " '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex"
    " used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and"
    " must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex"
    " used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
KEY_MESSAGE = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g."
    " 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is"
    " '[-._a-zA-Z0-9]+')"
)


def _undecodable(resource: Resource, why: str) -> ApiError:
    return bad_request(
        f'{resource.kind} in version "{resource.version}" cannot be handled as a'
        f" {resource.kind}: {why}"
    )


def _check_strings(resource: Resource, value: Any, where: str) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise _undecodable(
            resource, f"json: cannot unmarshal into Go value of type map[string]string ({where})"
        )


def _check_int32(resource: Resource, value: Any, where: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not INT32[0] <= value <= INT32[1]:
        raise _undecodable(
            resource, f"json: cannot unmarshal {value!r} into Go struct field {where} of type int32"
        )


def _check_micro_time(resource: Resource, value: Any, where: str) -> None:
    if value is None:
        return
    ok = isinstance(value, str) and _MICRO_TIME.fullmatch(value) is not None
    if ok:
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            ok = False
    if not ok:
        raise _undecodable(
            resource, f'parsing time {value!r} as "2006-01-02T15:04:05.000000Z07:00" ({where})'
        )


def decode(resource: Resource, body: Any) -> dict[str, Any]:
    """The object a request body holds, or 400 BadRequest; kind and apiVersion filled in."""
    if not isinstance(body, dict):
        raise bad_request("the body of the request is not a JSON object")
    for field, expected in (("kind", resource.kind), ("apiVersion", resource.api_version)):
        if body.get(field) not in (None, "", expected):
            raise bad_request(
                f"the object provided is unrecognized (must be of type {resource.kind}):"
                f" {field} {body[field]!r} is not {expected!r}"
            )
    metadata = body.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise _undecodable(resource, "json: cannot unmarshal metadata into ObjectMeta")
    for field in ("name", "generateName", "namespace", "resourceVersion", "uid"):
        if metadata.get(field) is not None and not isinstance(metadata[field], str):
            raise _undecodable(resource, f"json: cannot unmarshal metadata.{field} into string")
    _check_strings(resource, metadata.get("labels"), "metadata.labels")
    _check_strings(resource, metadata.get("annotations"), "metadata.annotations")
    obj = {
        **body,
        "kind": resource.kind,
        "apiVersion": resource.api_version,
        "metadata": dict(metadata),
    }
    if resource.kind == "ConfigMap":
        _check_strings(resource, obj.get("data"), "data")
        binary = obj.get("binaryData")
        _check_strings(resource, binary, "binaryData")
        for key, value in (binary or {}).items():
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise _undecodable(resource, f"illegal base64 data in binaryData[{key}]") from None
    if resource.kind == "Event":
        if not isinstance(obj.get("involvedObject") or {}, dict):
            raise _undecodable(
                resource, "json: cannot unmarshal involvedObject into ObjectReference"
            )
        _check_int32(resource, obj.get("count"), "Event.count")
        if obj.get("eventTime"):
            _check_micro_time(resource, obj["eventTime"], "eventTime")
    if resource.kind == "Lease":
        spec = obj.get("spec")
        if spec is None:
            spec = obj["spec"] = {}
        if not isinstance(spec, dict):
            raise _undecodable(resource, "json: cannot unmarshal spec into LeaseSpec")
        for field in ("holderIdentity", "strategy", "preferredHolder"):
            if spec.get(field) is not None and not isinstance(spec[field], str):
                raise _undecodable(resource, f"json: cannot unmarshal spec.{field} into string")
        for field in ("leaseDurationSeconds", "leaseTransitions"):
            _check_int32(resource, spec.get(field), f"LeaseSpec.spec.{field}")
        for field in ("acquireTime", "renewTime"):
            _check_micro_time(resource, spec.get(field), f"spec.{field}")
    return obj


def _cause(
    field: str, value: Any, message: str, reason: str = "FieldValueInvalid"
) -> dict[str, str]:
    shown = f'"{value}"' if isinstance(value, str) else str(value)
    return {"reason": reason, "message": f"Invalid value: {shown}: {message}", "field": field}


def _name_causes(resource: Resource, name: str) -> list[dict[str, str]]:
    if resource.kind == "Namespace":
        if len(name) > 63:
            return [_cause("metadata.name", name, "must be no more than 63 characters")]
        if not _DNS_LABEL.fullmatch(name):
            return [_cause("metadata.name", name, LABEL_MESSAGE)]
        return []
    if len(name) > 253:
        return [_cause("metadata.name", name, "must be no more than 253 characters")]
    if not _SUBDOMAIN.fullmatch(name):
        return [_cause("metadata.name", name, SUBDOMAIN_MESSAGE)]
    return []


def _config_map_causes(obj: dict[str, Any]) -> list[dict[str, str]]:
    causes: list[dict[str, str]] = []
    data: dict[str, str] = obj.get("data") or {}
    binary: dict[str, str] = obj.get("binaryData") or {}
    size = 0
    for field, entries in (("data", data), ("binaryData", binary)):
        for key, value in entries.items():
            where = f"{field}[{key}]"
            if len(key) > 253:
                causes.append(_cause(where, key, "must be no more than 253 characters"))
            elif not _CONFIG_KEY.fullmatch(key):
                causes.append(_cause(where, key, KEY_MESSAGE))
            elif key in (".", ".."):
                causes.append(_cause(where, key, f"must not be '{key}'"))
            if field == "data" and key in binary:
                causes.append(_cause(where, key, "duplicate of key present in binaryData"))
            # the values' bytes only, never the keys (ValidateConfigMap's totalSize)
            size += len(value.encode()) if field == "data" else len(base64.b64decode(value))
    if size > MAX_CONFIG_BYTES:
        causes.append(
            {
                "reason": "FieldValueTooLong",
                "message": f"Too long: must have at most {MAX_CONFIG_BYTES} bytes",
                "field": "[]",
            }
        )
    return causes


def _lease_causes(spec: dict[str, Any]) -> list[dict[str, str]]:
    causes = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and duration <= 0:
        causes.append(_cause("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if transitions is not None and transitions < 0:
        causes.append(
            _cause("spec.leaseTransitions", transitions, "must be greater than or equal to 0")
        )
    strategy = spec.get("strategy")
    if strategy is not None and strategy != "OldestEmulationVersion":
        causes.append(
            {
                "reason": "FieldValueNotSupported",
                "message": f'Unsupported value: "{strategy}": supported values: "OldestEmulationVersion"',
                "field": "spec.strategy",
            }
        )
    if spec.get("preferredHolder") and not strategy:
        causes.append(
            {
                "reason": "FieldValueForbidden",
                "message": "Forbidden: preferredHolder can only be set if strategy is set",
                "field": "spec.preferredHolder",
            }
        )
    return causes


def _required(field: str) -> dict[str, str]:
    return {"reason": "FieldValueRequired", "message": "Required value", "field": field}


def _too_long(field: str, limit: int) -> dict[str, str]:
    message = f'Invalid value: "": can have at most {limit} characters'
    return {"reason": "FieldValueInvalid", "message": message, "field": field}


_QUALIFIED = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def _event_causes(obj: dict[str, Any]) -> list[dict[str, str]]:
    namespace = obj["metadata"].get("namespace") or ""
    involved = obj.get("involvedObject") or {}
    theirs = involved.get("namespace") or ""
    mismatch = _cause("involvedObject.namespace", theirs, "does not match event.namespace")
    causes = []
    if not obj.get("eventTime"):
        if (namespace not in ("", "default")) if not theirs else namespace != theirs:
            causes.append(mismatch)
    else:
        if not theirs and namespace not in ("default", "kube-system"):
            causes.append(mismatch)
        component = obj.get("reportingComponent") or ""
        if not component:
            causes.append(_required("reportingComponent"))
        elif (
            len(component) > 63
            and "/" not in component
            or not _QUALIFIED.fullmatch(component.rsplit("/", 1)[-1])
        ):
            causes.append(_cause("reportingComponent", component, "must be a qualified name"))
        for field, limit in (("reportingInstance", 128), ("action", 128), ("reason", 128)):
            value = obj.get(field) or ""
            if not value:
                causes.append(_required(field))
            elif len(value) > limit:
                causes.append(_too_long(field, limit))
        if len(obj.get("message") or "") > 1024:
            causes.append(_too_long("message", 1024))
    return causes


def validate(resource: Resource, obj: dict[str, Any]) -> None:
    """Raise 422 Invalid listing every broken field of a decoded object with its name set."""
    name = obj["metadata"].get("name") or ""
    causes = _name_causes(resource, name)
    if resource.kind == "ConfigMap":
        causes += _config_map_causes(obj)
    if resource.kind == "Lease":
        causes += _lease_causes(obj["spec"])
    if resource.kind == "Event":
        causes += _event_causes(obj)
    if causes:
        raise invalid(resource.group, resource.kind, name, causes)
