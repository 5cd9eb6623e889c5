"""The one error tree of `ha`.

Failure is never a bool: every operation that can fail raises one of these. Drivers translate
their library's errors into this tree at their boundary (one ``map_errors`` per driver).
"""

from __future__ import annotations

__all__ = (
    "AccessDenied",
    "BadVersion",
    "ConfigurationError",
    "ConnectionLost",
    "ContenderError",
    "CorruptData",
    "DriverError",
    "ElectionFailed",
    "ElectorStopped",
    "Fenced",
    "HAError",
    "NodeExists",
    "NoNode",
    "NotEmpty",
    "PossiblyInconsistent",
    "SessionExpired",
    "TransactionFailed",
    "Unavailable",
)


class HAError(Exception):
    """Base of every error raised by `ha`."""


class ConfigurationError(HAError, ValueError):
    """Bad settings or input given by the user: a URL, a path, an identity, timings."""


class DriverError(HAError):
    """A backend operation failed.

    ``transient`` tells the elector whether retrying the same operation may succeed
    (a connection blip) or not (access denied, corrupt data).
    """

    transient: bool = False


class ConnectionLost(DriverError):
    """The backend could not be reached; the outcome of the operation is unknown."""

    transient = True


class PossiblyInconsistent(ConnectionLost):
    """A write's outcome is unknown (contact was lost while it ran); its payload was kept.

    Flink's ``PossibleInconsistentStateException``: the transaction may or may not have been
    applied, so the blob it points to must not be discarded. Read the entry back to find out.
    ``path`` is the entry's node; ``blob`` the kept payload's key (or None).
    """

    def __init__(self, path: str, cause: BaseException, blob: str | None = None) -> None:
        kept = f"; payload {blob} kept" if blob else ""
        super().__init__(f"outcome of the write to {path} is unknown ({cause}){kept}")
        self.path = path
        self.blob = blob


class Unavailable(DriverError):
    """The backend could not be reached when connecting (after the connect timeout)."""

    transient = True


class SessionExpired(DriverError):
    """The session is gone: its ephemeral nodes were deleted by the backend."""


class AccessDenied(DriverError):
    """The backend refused the operation (ACL, auth, read-only file)."""


class NodeExists(DriverError):
    def __init__(self, path: str) -> None:
        super().__init__(f"node already exists: {path}")
        self.path = path


class NoNode(DriverError):
    def __init__(self, path: str) -> None:
        super().__init__(f"no such node: {path}")
        self.path = path


class NotEmpty(DriverError):
    def __init__(self, path: str) -> None:
        super().__init__(f"node has children: {path}")
        self.path = path


class BadVersion(DriverError):
    def __init__(self, path: str, expected: int, actual: int | None = None) -> None:
        got = "another version" if actual is None else str(actual)
        super().__init__(f"version conflict at {path}: expected {expected}, found {got}")
        self.path = path
        self.expected = expected
        self.actual = actual


class TransactionFailed(DriverError):
    """A multi-operation transaction was not applied; nothing of it changed.

    ``index`` is the first operation that failed and ``cause`` its error
    (``BadVersion``, ``NoNode``, ``NodeExists``, ``NotEmpty``).
    """

    def __init__(self, index: int, cause: DriverError) -> None:
        super().__init__(f"transaction failed at operation {index}: {cause}")
        self.index = index
        self.cause = cause


class CorruptData(HAError):
    """Stored bytes could not be decoded. The path is named; the data is left as it is."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"corrupt data at {path}: {reason}")
        self.path = path
        self.reason = reason


class Fenced(HAError):
    """A write was refused because the writer's epoch is no longer the newest.

    Raised by ``Lease.transaction`` and every store write (``ha.stores.Writer``) when the
    lease's fence op is the one that failed: nothing of the write was applied. A bare
    ``driver.transaction([*lease.fence_ops(), ...])`` raises ``TransactionFailed`` at index 0.
    """


class ElectorStopped(HAError):
    """The elector's run ended (quit, or cancelled) while a caller waited for a state
    (``Elector.wait_active``, ``wait_state``); an elector that failed raises ``ElectionFailed``."""


class ElectionFailed(ElectorStopped):
    """The elector hit a fatal error (retries exhausted, access denied, corrupt election data)."""


class ContenderError(HAError):
    """A contender hook raised or did not finish in time."""
