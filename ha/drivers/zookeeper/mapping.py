"""ha's model in kazoo's terms and back: errors, stats, and the outcome of a transaction.

Every kazoo error becomes one of ``ha.errors`` at the driver's boundary (``map_errors``), named
after the path it concerns. ``NO_REPLY`` tells the errors that mean no answer came (the others
are the server's answer, and so a contact).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from kazoo import exceptions as kx

from ...errors import (
    AccessDenied,
    BadVersion,
    ConnectionLost,
    DriverError,
    NodeExists,
    NoNode,
    NotEmpty,
    SessionExpired,
    TransactionFailed,
)
from ..base import Create, Op, SetData, Stat

__all__ = ("NO_REPLY", "map_errors", "stat_of", "transaction_results", "translate")


def translate(exc: BaseException, path: str = "", version: int = -1) -> DriverError:
    """The ``ha.errors`` counterpart of a kazoo error about ``path``."""
    if isinstance(exc, kx.NoNodeError):
        return NoNode(path)
    if isinstance(exc, kx.NodeExistsError):
        return NodeExists(path)
    if isinstance(exc, kx.BadVersionError):
        return BadVersion(path, version)
    if isinstance(exc, kx.NotEmptyError):
        return NotEmpty(path)
    if isinstance(exc, kx.NoChildrenForEphemeralsError):
        return NoNode(f"{path} (ephemeral nodes cannot have children)")
    if isinstance(exc, kx.NoAuthError):
        return AccessDenied(
            f"ZooKeeper denied access to {path or 'a node'}: its ACL does not allow this client"
            " (give the credentials that created it with auth=USER:PASSWORD)"
        )
    if isinstance(exc, kx.AuthFailedError):
        return AccessDenied("ZooKeeper rejected the client's credentials (auth failed)")
    if isinstance(exc, kx.InvalidACLError):
        return AccessDenied(f"ZooKeeper refused the ACL for {path} (creator ACLs need auth=...)")
    # ConnectionClosedError is a kind of SessionExpiredError in kazoo: test it first
    if isinstance(exc, kx.ConnectionClosedError):
        return ConnectionLost("the ZooKeeper driver is closed")
    if isinstance(exc, kx.SessionExpiredError):
        return SessionExpired("the ZooKeeper session expired")
    if isinstance(exc, kx.ConnectionLoss | kx.ConnectionDropped | kx.OperationTimeoutError):
        return ConnectionLost(f"lost contact with ZooKeeper ({type(exc).__name__})")
    return DriverError(f"ZooKeeper error at {path}: {type(exc).__name__} {exc}".rstrip())


@contextmanager
def map_errors(path: str = "", version: int = -1) -> Iterator[None]:
    """Translate kazoo's errors into ``ha.errors`` at the driver's boundary."""
    try:
        yield
    except kx.KazooException as exc:
        raise translate(exc, path, version) from exc


# Errors that mean no reply came from the server (every other error is a server's answer).
NO_REPLY = (
    kx.ConnectionLoss,
    kx.ConnectionDropped,
    kx.SessionExpiredError,
    kx.OperationTimeoutError,
)


def stat_of(stat: Any) -> Stat:
    """The ``Stat`` of kazoo's ZnodeStat."""
    return Stat(
        version=stat.version,
        ephemeral_owner=stat.ephemeralOwner or None,
        mtime=stat.mtime / 1000.0,
        num_children=stat.numChildren,
        created=stat.czxid,
    )


def transaction_results(
    ops: Sequence[Op], results: Sequence[Any], rel: Callable[[str], str]
) -> list[str | Stat | None]:
    """What ``Driver.transaction`` returns for kazoo's ``results`` of ``ops`` (``rel``: a path
    without the chroot); raise TransactionFailed naming the first op that failed."""
    failed = [
        (index, result)
        for index, result in enumerate(results)
        if isinstance(result, Exception)
        and not isinstance(result, kx.RolledBackError | kx.RuntimeInconsistency)
    ]
    if failed or any(isinstance(result, Exception) for result in results):
        index, error = failed[0] if failed else (0, results[0])
        op = ops[index]
        cause = translate(error, op.path, getattr(op, "version", -1))
        if isinstance(cause, BadVersion | NoNode | NodeExists | NotEmpty):
            raise TransactionFailed(index, cause)
        raise cause
    out: list[str | Stat | None] = []
    for op, result in zip(ops, results, strict=True):
        if isinstance(op, Create):
            out.append(rel(str(result)))
        elif isinstance(op, SetData):
            out.append(stat_of(result))
        else:
            out.append(None)
    return out
