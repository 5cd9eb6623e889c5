"""The file: its schema, how it is opened, its transactions, and its errors in ``ha.errors``.

An ha database is an SQLite file in WAL mode whose header carries ``APPLICATION_ID`` ("haDB")
and ``SCHEMA_VERSION`` as its ``user_version``; any other file is refused with one line saying
what it is. Three tables hold everything::

    sessions  (id, expires_at, timeout, pid, created)   one lease per open session
    nodes     (path, parent, data, version,             the tree; "/" always exists
               ephemeral_owner, czxid, mtime)
    changes   (id, path, kind)                          the change log the pollers read
    meta      ('instance', 'trimmed_through')           the file's random id; log trimming

Everything here is synchronous and runs in a worker thread of the driver.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import sqlite3
import time
from collections.abc import Iterator

from ...errors import (
    AccessDenied,
    ConfigurationError,
    ConnectionLost,
    CorruptData,
    HAError,
    SessionExpired,
)
from . import clock

__all__ = (
    "APPLICATION_ID",
    "SCHEMA",
    "SCHEMA_VERSION",
    "FileReplaced",
    "check_file",
    "check_same_file",
    "connect",
    "file_id",
    "map_error",
    "os_error",
    "prepare",
    "reading",
    "to_wal",
    "writing",
)

APPLICATION_ID = 0x68614442  # "haDB" in the SQLite header tells an ha file from any other
SCHEMA_VERSION = 1

SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value NOT NULL)",
    # expires_at is on the host's CLOCK_MONOTONIC (clock.py), whatever a process's namespace
    "CREATE TABLE sessions (id INTEGER PRIMARY KEY AUTOINCREMENT, expires_at REAL NOT NULL,"
    " timeout REAL NOT NULL, pid INTEGER NOT NULL, created REAL NOT NULL)",
    "CREATE INDEX sessions_expiry ON sessions (expires_at)",
    # czxid: Stat.created, the id of the first creation its transaction logged (tree.py); on
    # a resync it tells CREATED from CHANGED
    "CREATE TABLE nodes (path TEXT PRIMARY KEY, parent TEXT NOT NULL, data BLOB NOT NULL,"
    " version INTEGER NOT NULL, ephemeral_owner INTEGER, czxid INTEGER NOT NULL,"
    " mtime REAL NOT NULL)",
    "CREATE INDEX nodes_parent ON nodes (parent)",
    "CREATE INDEX nodes_owner ON nodes (ephemeral_owner) WHERE ephemeral_owner IS NOT NULL",
    "CREATE TABLE changes (id INTEGER PRIMARY KEY AUTOINCREMENT, path TEXT NOT NULL,"
    " kind TEXT NOT NULL)",
    "INSERT INTO meta VALUES ('trimmed_through', 0)",
    "INSERT INTO nodes VALUES ('/', '', x'', 0, NULL, 0, 0)",
)


# --- errors -----------------------------------------------------------------------------------


def map_error(exc: sqlite3.Error, path: str) -> HAError:
    """One line naming the file, in the class of ``ha.errors`` that says what to do about it."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return ConnectionLost(f"{path}: database is busy (another process holds its write lock)")
    if name.startswith(("SQLITE_READONLY", "SQLITE_PERM", "SQLITE_AUTH")):
        return AccessDenied(f"{path}: cannot write: {exc}")
    if name.startswith("SQLITE_CANTOPEN"):
        return AccessDenied(f"{path}: cannot open: {exc}")
    if name.startswith("SQLITE_NOTADB"):
        return ConfigurationError(f"{path} is not an ha database (not an SQLite file)")
    if name.startswith("SQLITE_CORRUPT"):
        return CorruptData(path, str(exc))
    if name.startswith("SQLITE_FULL"):
        return ConnectionLost(f"{path}: disk full")
    return ConnectionLost(f"{path}: {exc}")


def os_error(exc: OSError, path: str, doing: str) -> HAError:
    """An ``OSError`` met while ``doing`` something to ``path``, told by its errno."""
    if exc.errno == errno.EROFS:
        return AccessDenied(f"{path}: cannot {doing}: read-only file system")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return AccessDenied(f"{path}: cannot {doing}: permission denied")
    if exc.errno == errno.ENOENT:
        return ConfigurationError(f"{path}: cannot {doing}: its directory does not exist")
    if exc.errno == errno.EISDIR:
        return ConfigurationError(f"{path} is a directory, not a database file")
    return ConnectionLost(f"{path}: cannot {doing}: {exc.strerror}")


class FileReplaced(SessionExpired):
    """The path now names another file than the one the driver opened: its session is gone
    for the others, who open the new file; the driver opens it too."""


# --- the file itself ----------------------------------------------------------------------------


def check_file(path: str) -> None:
    """Open the file ourselves first: errno says more than SQLite's messages do."""
    flags = os.O_RDWR | os.O_CLOEXEC
    try:
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            fd = os.open(path, flags)
        else:
            # a new file: a -wal left by a deleted database would be replayed into it
            for suffix in ("-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path + suffix)
    except OSError as exc:
        raise os_error(exc, path, "open for writing") from exc
    os.close(fd)
    directory = os.path.dirname(path)
    if not os.access(directory, os.W_OK):  # SQLite creates its -wal and -shm files there
        raise AccessDenied(f"{path}: cannot write in its directory {directory}")


def file_id(path: str) -> tuple[int, int]:
    """The (device, inode) of the file at ``path``: which file a driver opened."""
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino


def check_same_file(path: str, opened: tuple[int, int]) -> None:
    """Raise ``FileReplaced`` unless ``path`` still names the file that was opened."""
    try:
        now = file_id(path)
    except FileNotFoundError:
        now = None
    if now != opened:
        raise FileReplaced(f"{path} was deleted or replaced; opening it again")


# --- connections and schema ----------------------------------------------------------------------


def connect(path: str, busy_timeout: float, synchronous: str) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), usable from any thread."""
    conn = sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )
    try:
        conn.execute(f"PRAGMA synchronous = {synchronous}")
    except BaseException:
        conn.close()
        raise
    return conn


def to_wal(conn: sqlite3.Connection, within: float = 5.0) -> None:
    """Switch to WAL, retrying: SQLite answers a busy journal-mode change at once, without its
    busy handler, when several processes open a new file together (a worker thread: sleeps)."""
    deadline = time.monotonic() + within
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def prepare(conn: sqlite3.Connection, path: str) -> str:
    """Check that the file is an ha database (making an empty file one); return its instance."""
    # one read transaction: another process may initialize the file between two separate
    # reads, and "no application id yet, but tables" would then look like a foreign database
    conn.execute("BEGIN")
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    finally:
        conn.execute("COMMIT")
    if app_id != APPLICATION_ID:
        if app_id != 0 or tables:
            raise ConfigurationError(f"{path} is not an ha database (it holds other data)")
        to_wal(conn)
        with writing(conn):
            # another process may have initialized it meanwhile
            if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
                for statement in SCHEMA:
                    conn.execute(statement)
                conn.execute("INSERT INTO meta VALUES ('instance', ?)", (secrets.token_hex(8),))
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version != SCHEMA_VERSION:
        raise ConfigurationError(
            f"{path} has ha schema version {version}; this ha reads version {SCHEMA_VERSION}"
        )
    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        to_wal(conn)
    row = conn.execute("SELECT value FROM meta WHERE key = 'instance'").fetchone()
    if row is None:
        raise CorruptData(path, "the meta table has no instance id")
    return str(row[0])


# --- transactions ---------------------------------------------------------------------------------


@contextlib.contextmanager
def writing(conn: sqlite3.Connection) -> Iterator[clock.Reading]:
    """A write transaction; yields the clock (``clock.now()``) read just before asking for the
    write lock.

    Read before, not once the lock is held: a process stopped between taking the lock and
    reading the clock would otherwise judge leases, on resuming, by a time that includes its
    pause, during which nobody could renew (it held the lock). A reading from before the lock
    can only be early, which delays an expiry and never advances one.
    """
    now = clock.now()
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield now
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise


@contextlib.contextmanager
def reading(conn: sqlite3.Connection) -> Iterator[None]:
    """A read transaction: one consistent snapshot for several statements."""
    conn.execute("BEGIN")
    try:
        yield
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("COMMIT")
