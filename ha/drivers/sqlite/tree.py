"""The node tree as synchronous SQL, run inside a transaction the caller holds.

Each function takes a connection on which a transaction is open (``schema.writing`` for the
writes, one statement or ``schema.reading`` for the reads) and raises the node errors of
``ha.errors`` (``NoNode``, ``NodeExists``, ``BadVersion``, ``NotEmpty``, ``SessionExpired``);
an error raised inside ``writing`` rolls the whole transaction back, which is what makes
``transact`` all or nothing.

Every write appends to the change log, one row ``(id, path, kind)`` per created, changed or
deleted node, in commit order. The log keeps about ``KEEP_CHANGES`` rows; a poller whose cursor
falls behind the trimmed part resyncs from the nodes themselves (``read_changes``). Its ids are
AUTOINCREMENT: never reused, even once trimmed, and kept in the file, so they also number the
nodes. A node's ``czxid`` (``Stat.created``) is the id of the first creation logged by the
transaction that created it (``Creation``), shared by every node that transaction made; a
sequential create's suffix is the id of its own creation.

Sessions end here too, because ending one is a tree operation: ``end_session`` deletes its
ephemeral nodes (with anything below them) and its row, in the caller's transaction, and
``expire_lapsed`` ends those whose lease ran out before a given reading of the host's
CLOCK_MONOTONIC (``clock``).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

from ...errors import (
    ConfigurationError,
    NodeExists,
    NoNode,
    SessionExpired,
    TransactionFailed,
)
from .._nodes import NODE_ERRORS, check_empty, check_version
from ..base import Check, Create, NodeEventKind, Op, SetData, Stat, parent_of
from .schema import reading

__all__ = (
    "CHANGED",
    "CREATED",
    "DELETED",
    "Creation",
    "KEEP_CHANGES",
    "TRIM_EVERY",
    "children",
    "create",
    "delete",
    "end_session",
    "exists",
    "expire_lapsed",
    "get",
    "last_change",
    "log_change",
    "read_changes",
    "set_data",
    "transact",
)

KEEP_CHANGES = 10_000  # change-log rows kept for pollers that fall behind
TRIM_EVERY = 1_000

CREATED = NodeEventKind.CREATED.value
CHANGED = NodeEventKind.CHANGED.value
DELETED = NodeEventKind.DELETED.value


# --- the change log ---------------------------------------------------------------------------


def log_change(conn: sqlite3.Connection, path: str, kind: str) -> int:
    """Append to the change log; return the change's id. Trims the log now and then."""
    cid = conn.execute("INSERT INTO changes (path, kind) VALUES (?, ?)", (path, kind)).lastrowid
    assert cid is not None
    if cid % TRIM_EVERY == 0 and cid > KEEP_CHANGES:
        conn.execute("DELETE FROM changes WHERE id <= ?", (cid - KEEP_CHANGES,))
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'trimmed_through'", (cid - KEEP_CHANGES,)
        )
    return cid


def _next_change(conn: sqlite3.Connection) -> int:
    """The id the next ``log_change`` gets (AUTOINCREMENT: one more than any ever given)."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'changes'").fetchone()
    return 1 if row is None else int(row[0]) + 1


def last_change(conn: sqlite3.Connection) -> int:
    """The id of the newest change (0 for none): a new poller's cursor."""
    return int(conn.execute("SELECT coalesce(max(id), 0) FROM changes").fetchone()[0])


def read_changes(
    conn: sqlite3.Connection, cursor: int, watched: Sequence[str], limit: int
) -> tuple[list[tuple[str, str]], int, bool]:
    """The changes ``(path, kind)`` after ``cursor``, at most ``limit``, and the new cursor.

    The third value says whether the log was trimmed past ``cursor``: the changes are then
    each watched path's current state (created since the cursor, changed, or deleted), and
    the cursor moves to the end of the log.
    """
    with reading(conn):
        trimmed = conn.execute("SELECT value FROM meta WHERE key = 'trimmed_through'").fetchone()
        if cursor < trimmed[0]:
            events = []
            for path in watched:
                row = conn.execute("SELECT czxid FROM nodes WHERE path = ?", (path,)).fetchone()
                if row is None:
                    events.append((path, DELETED))
                else:
                    events.append((path, CREATED if row[0] > cursor else CHANGED))
            return events, last_change(conn), True
        rows = conn.execute(
            "SELECT id, path, kind FROM changes WHERE id > ? ORDER BY id LIMIT ?",
            (cursor, limit),
        ).fetchall()
    if rows:
        cursor = rows[-1][0]
    return [(path, kind) for _, path, kind in rows], cursor, False


# --- reads --------------------------------------------------------------------------------------


def _stat(conn: sqlite3.Connection, path: str) -> tuple[bytes, Stat] | None:
    row = conn.execute(
        "SELECT data, version, ephemeral_owner, mtime,"
        " (SELECT count(*) FROM nodes c WHERE c.parent = n.path), czxid"
        " FROM nodes n WHERE path = ?",
        (path,),
    ).fetchone()
    if row is None:
        return None
    data, version, owner, mtime, num_children, created = row
    return bytes(data), Stat(version, owner, mtime, num_children, created)


def get(conn: sqlite3.Connection, path: str) -> tuple[bytes, Stat]:
    found = _stat(conn, path)
    if found is None:
        raise NoNode(path)
    return found


def exists(conn: sqlite3.Connection, path: str) -> Stat | None:
    found = _stat(conn, path)
    return None if found is None else found[1]


def children(conn: sqlite3.Connection, path: str) -> list[str]:
    """The names below ``path``, sorted (its own read transaction)."""
    with reading(conn):
        if conn.execute("SELECT 1 FROM nodes WHERE path = ?", (path,)).fetchone() is None:
            raise NoNode(path)
        rows = conn.execute("SELECT path FROM nodes WHERE parent = ?", (path,)).fetchall()
    return sorted(p.rsplit("/", 1)[1] for (p,) in rows)


def _version(conn: sqlite3.Connection, path: str) -> int | None:
    row = conn.execute("SELECT version FROM nodes WHERE path = ?", (path,)).fetchone()
    return None if row is None else int(row[0])


# --- writes -------------------------------------------------------------------------------------


class Creation:
    """The number shared by the nodes one transaction creates: its first creation's change id."""

    __slots__ = ("number",)

    def __init__(self) -> None:
        self.number = 0

    def of(self, cid: int) -> int:
        """The transaction's number, ``cid`` if this creation (change ``cid``) is its first."""
        if not self.number:
            self.number = cid
        return self.number


def create(
    conn: sqlite3.Connection,
    path: str,
    data: bytes,
    owner: int | None,
    makepath: bool,
    sequential: bool = False,
    creation: Creation | None = None,
) -> str:
    """Create ``path`` (ephemeral if ``owner`` names a session); ``makepath``: its parents too;
    ``sequential``: at ``path`` plus its change id, as ten digits or more. Return the path.

    ``creation``: the transaction's number, shared with its other creates (default: its own).
    """
    # the session first: an expired one must hear so, whatever the node's state
    if (
        owner is not None
        and conn.execute("SELECT 1 FROM sessions WHERE id = ?", (owner,)).fetchone() is None
    ):
        raise SessionExpired(f"session {owner} has expired")
    if creation is None:
        creation = Creation()
    parent = parent_of(path)
    row = conn.execute("SELECT ephemeral_owner FROM nodes WHERE path = ?", (parent,)).fetchone()
    if row is None:
        if not makepath:
            raise NoNode(parent)
        create(conn, parent, b"", None, True, creation=creation)
    elif row[0] is not None:  # as ZooKeeper: they would outlive their parent's session
        raise NoNode(f"{path} (ephemeral nodes cannot have children)")
    if sequential:  # the write lock is held: the next change is this creation's
        path = f"{path}{_next_change(conn):010d}"
    if _version(conn, path) is not None:  # (a path that exists has its parent)
        raise NodeExists(path)
    cid = log_change(conn, path, CREATED)
    assert not sequential or path.endswith(f"{cid:010d}"), "the change id was not the one read"
    conn.execute(
        "INSERT INTO nodes VALUES (?, ?, ?, 0, ?, ?, ?)",
        (path, parent, data, owner, creation.of(cid), time.time()),
    )
    return path


def _check(conn: sqlite3.Connection, path: str, version: int) -> None:
    check_version(path, version, _version(conn, path))


def set_data(conn: sqlite3.Connection, path: str, data: bytes, version: int) -> Stat:
    """Write ``path`` if its version is ``version`` (-1: any); return its new Stat."""
    _check(conn, path, version)
    conn.execute(
        "UPDATE nodes SET data = ?, version = version + 1, mtime = ? WHERE path = ?",
        (data, time.time(), path),
    )
    log_change(conn, path, CHANGED)
    found = _stat(conn, path)
    assert found is not None
    return found[1]


def _remove(conn: sqlite3.Connection, path: str) -> None:
    """Delete ``path`` and everything below it, children before parents."""
    # the descendants of /a are exactly the paths in ['/a/', '/a0'): '0' follows '/'
    below = conn.execute(
        "SELECT path FROM nodes WHERE path >= ? AND path < ? ORDER BY path DESC",
        (path + "/", path + "0"),
    ).fetchall()
    for (p,) in below + [(path,)]:
        conn.execute("DELETE FROM nodes WHERE path = ?", (p,))
        log_change(conn, p, DELETED)


def delete(conn: sqlite3.Connection, path: str, version: int, recursive: bool) -> None:
    """Delete ``path`` if its version is ``version``; ``recursive``: with its descendants."""
    if path == "/":
        raise ConfigurationError("the root node cannot be deleted")
    _check(conn, path, version)
    if not recursive:
        below = conn.execute("SELECT 1 FROM nodes WHERE parent = ? LIMIT 1", (path,)).fetchone()
        check_empty(path, children=below is not None)
    _remove(conn, path)


def _apply(
    conn: sqlite3.Connection, op: Op, owner: int | None, creation: Creation
) -> str | Stat | None:
    if isinstance(op, Check):
        _check(conn, op.path, op.version)
        return None
    if isinstance(op, Create):
        owned = owner if op.ephemeral else None
        return create(conn, op.path, op.data, owned, False, op.sequential, creation)
    if isinstance(op, SetData):
        return set_data(conn, op.path, op.data, op.version)
    delete(conn, op.path, op.version, False)
    return None


def transact(
    conn: sqlite3.Connection, ops: Sequence[Op], owner: int | None
) -> list[str | Stat | None]:
    """Apply ``ops`` in order (ephemeral creates owned by ``owner``); one result per op.

    A node error raises ``TransactionFailed`` naming the failing op's index; the caller's
    transaction then rolls back every op before it.
    """
    results: list[str | Stat | None] = []
    creation = Creation()
    for index, op in enumerate(ops):
        try:
            results.append(_apply(conn, op, owner, creation))
        except NODE_ERRORS as exc:
            raise TransactionFailed(index, exc) from exc
    return results


# --- ending sessions ------------------------------------------------------------------------------


def end_session(conn: sqlite3.Connection, sid: int) -> None:
    """Delete a session and its ephemeral nodes (with anything created below them)."""
    owned = conn.execute(
        "SELECT path FROM nodes WHERE ephemeral_owner = ? ORDER BY path", (sid,)
    ).fetchall()
    for (path,) in owned:
        if _version(conn, path) is not None:  # not already gone below another of them
            _remove(conn, path)
    conn.execute("DELETE FROM sessions WHERE id = ?", (sid,))


def expire_lapsed(conn: sqlite3.Connection, now: float) -> list[int]:
    """End every session whose lease ran out before ``now`` (the host's CLOCK_MONOTONIC); their
    ids."""
    lapsed = [
        sid for (sid,) in conn.execute("SELECT id FROM sessions WHERE expires_at < ?", (now,))
    ]
    for sid in lapsed:
        end_session(conn, sid)
    return lapsed
