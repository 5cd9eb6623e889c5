"""What a caller hands a driver, checked at the driver's boundary: node data and transaction ops.

A driver checks them before it sends anything, so that a caller's mistake is a
``ConfigurationError`` of ``ha.errors`` (as ``ha.drivers.base`` requires of every error), never a
``TypeError`` from deep inside a backend library, and never half of a ``makepath``. Data is
copied: a caller's bytearray that changes later must not change what the backend stores.
"""

from __future__ import annotations

from ..errors import ConfigurationError
from .base import Check, Create, Delete, Op, SetData, validate_path

__all__ = ("checked_op", "node_data")


def node_data(data: object) -> bytes:
    """A copy of bytes-like ``data`` (bytes, bytearray, memoryview); anything else is refused."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ConfigurationError(f"node data must be bytes, not {type(data).__name__}")
    return bytes(data)


def checked_op(op: object) -> Op:
    """``op`` with its data copied, if it is a well-formed operation; else ConfigurationError.

    The root cannot be deleted: with a chroot, deleting it would remove the driver's whole
    namespace, and every later operation would fail.
    """
    if not isinstance(op, Check | Create | SetData | Delete):
        raise ConfigurationError(f"not a transaction operation: {op!r}")
    validate_path(op.path)
    if isinstance(op, Delete) and op.path == "/":
        raise ConfigurationError("the root node cannot be deleted")
    if isinstance(op, Create):
        return Create(op.path, node_data(op.data), op.ephemeral, op.sequential)
    if isinstance(op, SetData):
        return SetData(op.path, node_data(op.data), op.version)
    return op
