"""Status objects: how the fake API server reports every failure, as kube-apiserver does.

Every error is a ``Status`` (``kind: Status``, ``status: Failure``) whose ``reason`` and
``code`` clients switch on (client-go's ``IsConflict``, ``IsNotFound``, the Python client's
``ApiException.status``), and whose ``details`` name the object. The messages copy the real
server's wording, because some clients and many humans read them.
"""

from __future__ import annotations

from typing import Any

__all__ = (
    "ApiError",
    "already_exists",
    "bad_request",
    "conflict",
    "expired",
    "invalid",
    "not_found",
    "status",
    "success",
)


def status(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ``Status`` object; ``details`` left out when empty, as the server does."""
    document: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        document["details"] = details
    return document


class ApiError(Exception):
    """A request the server answers with a failure ``Status`` (and optional headers)."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        return status(self.code, self.reason, self.message, self.details)


def _details(group: str, plural: str, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = plural
    return details


def _qualified(group: str, plural: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{_qualified(group, plural)} "{name}" not found',
        _details(group, plural, name),
    )


def already_exists(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{_qualified(group, plural)} "{name}" already exists',
        _details(group, plural, name),
    )


def conflict(group: str, plural: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(group, plural)} "{name}": {why}',
        _details(group, plural, name),
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def invalid(group: str, kind: str, name: str, causes: list[dict[str, str]]) -> ApiError:
    """422 Invalid; each cause is ``{reason, message, field}``, the message says them all."""
    said = [f"{cause['field']}: {cause['message']}" for cause in causes]
    summary = said[0] if len(said) == 1 else "[" + ", ".join(said) + "]"
    qualified = f"{kind}.{group}" if group else kind
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = causes
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {summary}', details)


def expired(requested: int, oldest: int) -> dict[str, Any]:
    """The Status a watch ERROR event carries for a resourceVersion older than the history."""
    return status(410, "Expired", f"too old resource version: {requested} ({oldest})")


def success(group: str, plural: str, name: str, uid: str) -> dict[str, Any]:
    """What DELETE answers for ConfigMaps and Leases (not the deleted object)."""
    details = _details(group, plural, name)
    details["uid"] = uid
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }
