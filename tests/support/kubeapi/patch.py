"""PATCH bodies: JSON merge patch (RFC 7386), strategic merge patch, JSON patch (RFC 6902).

For ConfigMaps and Leases a strategic merge patch is a merge patch: neither kind has lists
with merge keys. Server-side apply is not implemented; the server answers it with 415, as it
answers any media type it does not take, so a client that needs it fails loudly.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.support.kubeapi.status import ApiError, bad_request

__all__ = ("MERGE_TYPES", "PATCH_TYPES", "apply_patch")

JSON_PATCH = "application/json-patch+json"
MERGE_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")
PATCH_TYPES = (JSON_PATCH, *MERGE_TYPES)


def unsupported(media_type: str) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format ({media_type or 'none'}) - accepted"
        f" media types include: {', '.join(PATCH_TYPES)}",
    )


def merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _failed(message: str) -> ApiError:
    # the real server reports a patch that cannot apply to this object as 422
    return ApiError(422, "Invalid", message)


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise _failed(f"doc is missing path: {path!r}")
    return node


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    node = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(node, dict) and last in node:
        return node[last]
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        return node[int(last)]
    raise _failed(f"doc is missing path: {path!r}")


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    value = _get(doc, path)
    node = _parent(doc, parts, path)
    if isinstance(node, dict):
        del node[parts[-1]]
    else:
        del node[int(parts[-1])]
    return value


def _add(doc: Any, path: str, value: Any, *, replace: bool) -> Any:
    parts = _pointer(path)
    if not parts:
        return copy.deepcopy(value)
    if replace:
        _get(doc, path)  # replace needs the target to exist
    node = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(node, dict):
        node[last] = copy.deepcopy(value)
    elif isinstance(node, list):
        if last == "-":
            node.append(copy.deepcopy(value))
        elif last.isdigit() and int(last) <= len(node):
            if replace:
                node[int(last)] = copy.deepcopy(value)
            else:
                node.insert(int(last), copy.deepcopy(value))
        else:
            raise _failed(f"invalid array index in {path!r}")
    else:
        raise _failed(f"doc is missing path: {path!r}")
    return doc


def json_patch(doc: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise bad_request("a JSON patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for operation in operations:
        if not isinstance(operation, dict) or not isinstance(operation.get("path"), str):
            raise bad_request(f"invalid JSON patch operation: {operation!r}")
        op, path = operation.get("op"), operation["path"]
        if op in ("add", "replace", "test") and "value" not in operation:
            raise bad_request(f"JSON patch operation {op!r} needs a value")
        if op in ("move", "copy") and not isinstance(operation.get("from"), str):
            raise bad_request(f"JSON patch operation {op!r} needs 'from'")
        if op == "add":
            doc = _add(doc, path, operation["value"], replace=False)
        elif op == "replace":
            doc = _add(doc, path, operation["value"], replace=True)
        elif op == "remove":
            _remove(doc, path)
        elif op == "test":
            if _get(doc, path) != operation["value"]:
                raise _failed(f"testing value {path} failed: test failed")
        elif op == "move":
            doc = _add(doc, path, _remove(doc, operation["from"]), replace=False)
        elif op == "copy":
            doc = _add(doc, path, _get(doc, operation["from"]), replace=False)
        else:
            raise bad_request(f"unexpected JSON patch operation {op!r}")
    return doc


def apply_patch(media_type: str, current: dict[str, Any], body: Any) -> Any:
    """The object after the patch; 415 for apply or an unknown type, 400/422 for bad patches."""
    if media_type in MERGE_TYPES:
        if not isinstance(body, dict):
            raise bad_request("a merge patch must be a JSON object")
        return merge(current, body)
    if media_type == JSON_PATCH:
        return json_patch(current, body)
    raise unsupported(media_type)
