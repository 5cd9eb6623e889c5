"""The embedded backend: one SQLite file shared by the processes of one host.

``ha.connect("sqlite:///var/lib/app/ha.db")``: the URL's path is the file's absolute path, as in
``file://`` URLs (``sqlite://`` alone means ``default_url()``). Options go in the query string
(``?session_timeout=2&poll_interval=0.1``) or as keywords. Standard library ``sqlite3`` in WAL
mode; every call to it runs in a worker thread, one thread at a time per connection.

How the driver model maps onto the file:

- A session is a lease: a row ``(id, expires_at)`` that its owner renews every
  ``renew_interval``. Every write transaction first expires the rows whose ``expires_at`` has
  passed, deleting their ephemeral nodes in the same transaction.
- Fast death detection: each session holds ``flock(LOCK_EX)`` on a lock file
  ``<db>-sessions/<instance>.<id>.lock``. The kernel drops it when the process dies, so the
  pollers of the other processes find it free and expire that session at once, without waiting
  for its lease. A hung process (SIGSTOP) keeps its lock and is expired when its lease runs out.
  The lock file is opened close-on-exec; a child that was forked but did not exec keeps the
  lock (then only the lease detects the parent's death).
- Only a free lock on the file the session made tells its death. A missing file tells nothing
  (a tmp cleaner or an operator may remove it while its process lives), nor does a file
  someone else put at its path (a copy, a ``touch``): each file is stamped with its own inode
  number before it is moved into place, and a file whose stamp does not name its inode is not
  the session's. Either way the lease decides, and the owner, which looks at its file at every
  renewal, makes it again (and logs it), which brings the fast detection back; it keeps the
  locks of the files it made before, which pollers that opened them before still watch.
- Node events are polled from a change log (one row per created, changed or deleted node)
  every ``poll_interval`` seconds, and right after this driver's own writes. Every change after
  ``subscribe`` is delivered, in order; a few from just before it may be delivered too.
- Cost of polling (``benchmarks/sqlite_costs.py``, 2-core VM): an idle process with one peer
  uses about 0.6-0.8 % of a core at the default 100 ms, 1.1-1.4 % at 50 ms, 2-2.5 % at
  20 ms; mostly the loop's wake-up and the hop to a worker thread, paid once per poll.

Clock: ``expires_at`` is on CLOCK_MONOTONIC (``time.monotonic()``), which on Linux is one clock
for every process of the host: never stepped by NTP, never reset while the host runs. A renewal
reads it just before its write, and every expiry is decided inside a later write transaction
(SQLite's write lock serializes them) on the table as it is then, against a reading taken just
before that transaction asked for the lock, so a renewal read at ``t`` can be expired only at
a ``now > t + session_timeout``; a renewal that finds its lease already run out expires it
rather than reviving it. No reading is taken while the lock is held, and no lease read before
a transaction is judged in it: a process stopped (SIGSTOP) in between would resume with a
clock that has moved on by its pause and would find lapsed, by that clock, every lease it had
read, the new active's too. ``last_contact`` is that ``t`` mapped onto
``anyio.current_time()`` (rounded down), which keeps the timing assumption of
``ha.drivers.base``. After a reboot the clock restarts, but nobody holds the old sessions'
locks, so they are expired at once. Processes in different time namespaces must not share a
file, and the driver needs a real clock (not trio's MockClock).

Limits: one host, local file systems only (no NFS: its locks are not reliable).

- A process stopped while it holds SQLite's write lock holds it until it resumes or dies: every
  writer waits. Everyone reports DISCONNECTED meanwhile and actives stop on their local
  deadline: safety holds, but no one leads until then. An idle process takes the lock only to
  renew its lease, in a single statement during which no Python code runs (no fsync either),
  about 0.1 ms each ``renew_interval``: a SIGSTOP at a random moment leaves it held about once
  in 10,000, whatever the process's other threads do (``benchmarks/sqlite_costs.py``, section
  ``frozen``). Its own writes, and the reaping of dead sessions, are transactions of several
  statements: in a process where another thread computes, each statement can wait for the GIL
  (up to the 5 ms switch interval) with the lock held, and with ``synchronous=full`` the commit
  waits for fsync. A process stopped while it writes is much likelier to hold the lock.
- Never delete or replace the file while processes use it (SQLite deletes ``-wal`` files by
  name: see "How To Corrupt An SQLite Database File", 2.4); empty it through a driver. If it
  happens anyway, each driver notices within a poll, reports EXPIRED and opens a session on the
  new file, so no process goes on leading on a file the others no longer see.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import math
import os
import re
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import anyio
import anyio.abc
import anyio.to_thread

from ..._clock import loop_minus_monotonic
from ...errors import (
    AccessDenied,
    BadVersion,
    ConfigurationError,
    ConnectionLost,
    CorruptData,
    HAError,
    NodeExists,
    NoNode,
    NotEmpty,
    SessionExpired,
    TransactionFailed,
    Unavailable,
)
from ..base import (
    Capabilities,
    Check,
    ConnectionEvent,
    ConnectionState,
    Create,
    Delete,
    Driver,
    NodeEvent,
    NodeEventKind,
    Op,
    SetData,
    Stat,
    parent_of,
    validate_path,
)

__all__ = ("SqliteDriver", "default_path", "default_url")

log = logging.getLogger("ha.drivers.sqlite")

T = TypeVar("T")

APPLICATION_ID = 0x68614442  # "haDB" in the SQLite header tells an ha file from any other
SCHEMA_VERSION = 1
KEEP_CHANGES = 10_000  # change-log rows kept for pollers that fall behind
TRIM_EVERY = 1_000
MAX_CHANGES_PER_POLL = 1_000

SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value NOT NULL)",
    # expires_at is time.monotonic() (CLOCK_MONOTONIC): see the module docstring
    "CREATE TABLE sessions (id INTEGER PRIMARY KEY AUTOINCREMENT, expires_at REAL NOT NULL,"
    " timeout REAL NOT NULL, pid INTEGER NOT NULL, created REAL NOT NULL)",
    "CREATE INDEX sessions_expiry ON sessions (expires_at)",
    # czxid: the change-log id of the node's creation (tells CREATED from CHANGED on resync)
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

# URL query options and how to read them
_OPTIONS: dict[str, Callable[[str], Any]] = {
    "session_timeout": float,
    "poll_interval": float,
    "renew_interval": float,
    "busy_timeout": float,
    "synchronous": str,
}

CREATED = NodeEventKind.CREATED.value
CHANGED = NodeEventKind.CHANGED.value
DELETED = NodeEventKind.DELETED.value


def default_path() -> Path:
    """``$XDG_STATE_HOME/ha/ha.db`` (or ``~/.local/state/ha/ha.db``); creates the directory."""
    base = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):  # the XDG spec says to ignore relative values
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    directory = Path(base) / "ha"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AccessDenied(
            f"cannot create the state directory {directory}: {exc.strerror}"
        ) from exc
    return directory / "ha.db"


def default_url() -> str:
    """The URL of the default file (see ``default_path``)."""
    return "sqlite://" + quote(str(default_path()))


# --- errors -----------------------------------------------------------------------------------


def _map_error(exc: sqlite3.Error, path: str) -> HAError:
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


def _os_error(exc: OSError, path: str, doing: str) -> HAError:
    if exc.errno == errno.EROFS:
        return AccessDenied(f"{path}: cannot {doing}: read-only file system")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return AccessDenied(f"{path}: cannot {doing}: permission denied")
    if exc.errno == errno.ENOENT:
        return ConfigurationError(f"{path}: cannot {doing}: its directory does not exist")
    if exc.errno == errno.EISDIR:
        return ConfigurationError(f"{path} is a directory, not a database file")
    return ConnectionLost(f"{path}: cannot {doing}: {exc.strerror}")


# --- the file: connections and schema ----------------------------------------------------------


def _connect(path: str, busy_timeout: float, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )
    try:
        conn.execute(f"PRAGMA synchronous = {synchronous}")
    except BaseException:
        conn.close()
        raise
    return conn


def _to_wal(conn: sqlite3.Connection, within: float = 5.0) -> None:
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


def _prepare(conn: sqlite3.Connection, path: str) -> str:
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
        _to_wal(conn)
        with _writing(conn):
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
        _to_wal(conn)
    row = conn.execute("SELECT value FROM meta WHERE key = 'instance'").fetchone()
    if row is None:
        raise CorruptData(path, "the meta table has no instance id")
    return str(row[0])


@contextlib.contextmanager
def _writing(conn: sqlite3.Connection) -> Iterator[float]:
    """A write transaction; yields CLOCK_MONOTONIC read just before asking for the write lock.

    Read before, not once the lock is held: a process stopped between taking the lock and
    reading the clock would otherwise judge leases, on resuming, by a time that includes its
    pause, during which nobody could renew (it held the lock). A reading from before the lock
    can only be early, which delays an expiry and never advances one.
    """
    now = time.monotonic()
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield now
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise


@contextlib.contextmanager
def _reading(conn: sqlite3.Connection) -> Iterator[None]:
    """A read transaction: one consistent snapshot for several statements."""
    conn.execute("BEGIN")
    try:
        yield
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("COMMIT")


# --- the tree: synchronous, inside a transaction ------------------------------------------------


def _log(conn: sqlite3.Connection, path: str, kind: str) -> int:
    """Append to the change log; return the change's id. Trims the log now and then."""
    cid = conn.execute("INSERT INTO changes (path, kind) VALUES (?, ?)", (path, kind)).lastrowid
    assert cid is not None
    if cid % TRIM_EVERY == 0 and cid > KEEP_CHANGES:
        conn.execute("DELETE FROM changes WHERE id <= ?", (cid - KEEP_CHANGES,))
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'trimmed_through'", (cid - KEEP_CHANGES,)
        )
    return cid


def _stat(conn: sqlite3.Connection, path: str) -> tuple[bytes, Stat] | None:
    row = conn.execute(
        "SELECT data, version, ephemeral_owner, mtime,"
        " (SELECT count(*) FROM nodes c WHERE c.parent = n.path) FROM nodes n WHERE path = ?",
        (path,),
    ).fetchone()
    if row is None:
        return None
    data, version, owner, mtime, children = row
    return bytes(data), Stat(version, owner, mtime, children)


def _get(conn: sqlite3.Connection, path: str) -> tuple[bytes, Stat]:
    found = _stat(conn, path)
    if found is None:
        raise NoNode(path)
    return found


def _exists(conn: sqlite3.Connection, path: str) -> Stat | None:
    found = _stat(conn, path)
    return None if found is None else found[1]


def _children(conn: sqlite3.Connection, path: str) -> list[str]:
    with _reading(conn):
        if conn.execute("SELECT 1 FROM nodes WHERE path = ?", (path,)).fetchone() is None:
            raise NoNode(path)
        rows = conn.execute("SELECT path FROM nodes WHERE parent = ?", (path,)).fetchall()
    return sorted(p.rsplit("/", 1)[1] for (p,) in rows)


def _version(conn: sqlite3.Connection, path: str) -> int | None:
    row = conn.execute("SELECT version FROM nodes WHERE path = ?", (path,)).fetchone()
    return None if row is None else int(row[0])


def _create(
    conn: sqlite3.Connection, path: str, data: bytes, owner: int | None, makepath: bool
) -> str:
    # the session first: an expired one must hear so, whatever the node's state
    if (
        owner is not None
        and conn.execute("SELECT 1 FROM sessions WHERE id = ?", (owner,)).fetchone() is None
    ):
        raise SessionExpired(f"session {owner} has expired")
    if _version(conn, path) is not None:
        raise NodeExists(path)
    parent = parent_of(path)
    row = conn.execute("SELECT ephemeral_owner FROM nodes WHERE path = ?", (parent,)).fetchone()
    if row is None:
        if not makepath:
            raise NoNode(parent)
        _create(conn, parent, b"", None, True)
    elif row[0] is not None:  # as ZooKeeper: they would outlive their parent's session
        raise NoNode(f"{path} (ephemeral nodes cannot have children)")
    cid = _log(conn, path, CREATED)
    conn.execute(
        "INSERT INTO nodes VALUES (?, ?, ?, 0, ?, ?, ?)",
        (path, parent, data, owner, cid, time.time()),
    )
    return path


def _check(conn: sqlite3.Connection, path: str, version: int) -> None:
    actual = _version(conn, path)
    if actual is None:
        raise NoNode(path)
    if version != -1 and version != actual:
        raise BadVersion(path, version, actual)


def _set(conn: sqlite3.Connection, path: str, data: bytes, version: int) -> Stat:
    _check(conn, path, version)
    conn.execute(
        "UPDATE nodes SET data = ?, version = version + 1, mtime = ? WHERE path = ?",
        (data, time.time(), path),
    )
    _log(conn, path, CHANGED)
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
        _log(conn, p, DELETED)


def _delete(conn: sqlite3.Connection, path: str, version: int, recursive: bool) -> None:
    if path == "/":
        raise ConfigurationError("the root node cannot be deleted")
    _check(conn, path, version)
    if (
        not recursive
        and conn.execute("SELECT 1 FROM nodes WHERE parent = ? LIMIT 1", (path,)).fetchone()
    ):
        raise NotEmpty(path)
    _remove(conn, path)


def _apply(conn: sqlite3.Connection, op: Op, owner: int | None) -> str | Stat | None:
    if isinstance(op, Check):
        _check(conn, op.path, op.version)
        return None
    if isinstance(op, Create):
        return _create(conn, op.path, op.data, owner if op.ephemeral else None, False)
    if isinstance(op, SetData):
        return _set(conn, op.path, op.data, op.version)
    _delete(conn, op.path, op.version, False)
    return None


def _end_session(conn: sqlite3.Connection, sid: int) -> None:
    """Delete a session and its ephemeral nodes (with anything created below them)."""
    owned = conn.execute(
        "SELECT path FROM nodes WHERE ephemeral_owner = ? ORDER BY path", (sid,)
    ).fetchall()
    for (path,) in owned:
        if _version(conn, path) is not None:  # not already gone below another of them
            _remove(conn, path)
    conn.execute("DELETE FROM sessions WHERE id = ?", (sid,))


def _expire_lapsed(conn: sqlite3.Connection, now: float) -> list[int]:
    lapsed = [
        sid for (sid,) in conn.execute("SELECT id FROM sessions WHERE expires_at < ?", (now,))
    ]
    for sid in lapsed:
        _end_session(conn, sid)
    return lapsed


# --- the driver ---------------------------------------------------------------------------------


class SqliteDriver(Driver):
    """Sessions, nodes and events in one SQLite file, for the processes of one host."""

    capabilities = Capabilities(
        name="sqlite",
        cross_process=True,
        cross_host=False,
        durable=True,
        push_watches=False,
        sessions="lease",
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        session_timeout: float = 2.0,
        poll_interval: float = 0.1,
        renew_interval: float | None = None,
        busy_timeout: float | None = None,
        synchronous: str = "full",
    ) -> None:
        super().__init__()
        self._path = os.fspath(path)
        if not os.path.isabs(self._path):
            raise ConfigurationError(f"the sqlite file path must be absolute: {self._path!r}")
        session_timeout = _seconds("session_timeout", session_timeout)
        poll_interval = _seconds("poll_interval", poll_interval)
        if renew_interval is None:
            renew_interval = session_timeout / 3
        if busy_timeout is None:
            busy_timeout = session_timeout / 4
        renew_interval = _seconds("renew_interval", renew_interval)
        busy_timeout = _seconds("busy_timeout", busy_timeout)
        # as client-go does: refuse timings that cannot keep the lease alive
        if renew_interval + busy_timeout >= session_timeout:
            raise ConfigurationError(
                f"renew_interval ({renew_interval}) + busy_timeout ({busy_timeout}) must be"
                f" shorter than session_timeout ({session_timeout})"
            )
        if poll_interval >= session_timeout:
            raise ConfigurationError(
                f"poll_interval ({poll_interval}) must be shorter than session_timeout"
                f" ({session_timeout})"
            )
        if not isinstance(synchronous, str) or synchronous.lower() not in ("full", "normal"):
            raise ConfigurationError(f"synchronous must be 'full' or 'normal': {synchronous!r}")
        self._session_timeout = session_timeout
        self._poll_interval = poll_interval
        self._renew_interval = renew_interval
        self._busy_timeout = busy_timeout
        self._synchronous = synchronous.upper()
        self._lock_dir = self._path + "-sessions"

        self._state = "new"  # new -> started -> closed
        # the connections are used only in worker threads, one at a time (their limiters)
        self._ops: sqlite3.Connection | None = None  # user operations
        self._bg: sqlite3.Connection | None = None  # renewals, reaping, polling
        self._ops_limiter: anyio.CapacityLimiter | None = None
        self._bg_limiter: anyio.CapacityLimiter | None = None
        self._instance = ""
        self._file_id: tuple[int, int] = (0, 0)
        self._lock: _SessionLock | None = None  # our session's lock file (bg thread)
        self._peer_locks: dict[int, int] = {}  # other sessions' lock files (bg thread only)
        self._session_id: int | None = None
        self._last_contact = -math.inf
        self._connected = False
        self._cursor = 0  # the last change-log id delivered (bg thread)
        self._sessions: list[tuple[int, float]] = []  # (id, expires_at) last read (bg thread)
        self._data_version = -1  # PRAGMA data_version when they were read (bg thread)
        self._dirty = True  # this driver's bg connection committed since (bg thread)
        self._tg: anyio.abc.TaskGroup | None = None
        self._poke: anyio.Event | None = None  # wakes the poller (after our own writes)
        self._wake: anyio.Event | None = None  # wakes the renewer (session or file gone)
        self._reopen = False  # the file was replaced: open it again
        # the renewer and the poller run in this scope, so that _abandon() can stop them alone
        self._loops: anyio.CancelScope | None = None
        self._loops_done: anyio.Event | None = None
        # test hooks (see "test hooks" below): a gate on all file access, injected errors
        self._frozen: anyio.Event | None = None
        self._fail: list[HAError] = []

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        parts = urlsplit(url)
        if parts.scheme != "sqlite":
            raise ConfigurationError(f"not a sqlite:// URL: {url!r}")
        if parts.netloc not in ("", "localhost"):
            raise ConfigurationError(
                f"{url!r}: a sqlite URL names a file of this host by its absolute path:"
                " sqlite:///path/to/ha.db (three slashes)"
            )
        if parts.fragment:
            raise ConfigurationError(f"{url!r}: a sqlite URL has no #fragment")
        path = unquote(parts.path) or str(default_path())
        values: dict[str, Any] = {}
        for key, text in parse_qsl(parts.query, keep_blank_values=True):
            if key not in _OPTIONS:
                raise ConfigurationError(
                    f"{url!r}: unknown option {key!r}; known: {', '.join(_OPTIONS)}"
                )
            try:
                values[key] = _OPTIONS[key](text)
            except ValueError:
                raise ConfigurationError(f"{url!r}: bad value for {key}: {text!r}") from None
        for key in options:
            if key not in _OPTIONS:
                raise ConfigurationError(
                    f"unknown sqlite option {key!r}; known: {', '.join(_OPTIONS)}"
                )
        values.update(options)
        return cls(path, **values)

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    def __repr__(self) -> str:
        return f"<SqliteDriver {self._path} session={self._session_id} {self._state}>"

    # --- threads ------------------------------------------------------------------------------

    async def _in_thread(
        self, limiter: anyio.CapacityLimiter | None, fn: Callable[..., T], *args: Any
    ) -> T:
        while self._frozen is not None:  # test hook: _freeze()
            await self._frozen.wait()
        if self._state != "started" or limiter is None:
            raise ConnectionLost(f"{self._path}: the driver is {self._state}, not started")
        try:
            return await anyio.to_thread.run_sync(fn, *args, limiter=limiter)
        except sqlite3.Error as exc:
            raise _map_error(exc, self._path) from exc
        except OSError as exc:  # the lock files, or a stat of the database
            raise ConnectionLost(f"{self._path}: {exc}") from exc

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        self._injected_fault()
        return await self._in_thread(self._ops_limiter, self._with_ops, fn, args)

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        self._injected_fault()
        try:
            return await self._in_thread(self._ops_limiter, self._write_sync, fn, args)
        finally:
            if self._poke is not None:
                self._poke.set()  # deliver our own changes' events without waiting a poll

    def _with_ops(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        if self._ops is None:  # closed, or reopening a replaced file
            raise ConnectionLost(f"{self._path}: not open")
        return fn(self._ops, *args)

    def _write_sync(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        conn = self._ops
        if conn is None:
            raise ConnectionLost(f"{self._path}: not open")
        with _writing(conn) as now:
            _expire_lapsed(conn, now)
            return fn(conn, *args)

    def _loop_time(self, monotonic: float) -> float:
        """Map a CLOCK_MONOTONIC reading onto anyio.current_time(), never later than it was."""
        return monotonic + loop_minus_monotonic()

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._state != "new":
            raise ConfigurationError(f"{self!r} was already started")
        self._ops_limiter = anyio.CapacityLimiter(1)
        self._bg_limiter = anyio.CapacityLimiter(1)
        try:
            # shielded: a session opened and then abandoned would hold its lock until exit;
            # a cancellation is delivered after start returns, inside ``async with``
            with anyio.CancelScope(shield=True):
                monotonic = await anyio.to_thread.run_sync(self._open, limiter=self._bg_limiter)
        except sqlite3.Error as exc:
            raise self._start_error(_map_error(exc, self._path)) from exc
        except OSError as exc:
            raise self._start_error(_os_error(exc, self._path, "open")) from exc
        except HAError as exc:
            raise self._start_error(exc) from exc
        self._state = "started"
        self._last_contact = self._loop_time(monotonic)
        self._connected = True
        self._poke = anyio.Event()
        self._wake = anyio.Event()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._loops, self._loops_done = anyio.CancelScope(), anyio.Event()
        self._tg.start_soon(self._run_loops)
        self._emit(ConnectionEvent(ConnectionState.CONNECTED, self._session_id))

    async def _run_loops(self) -> None:
        assert self._loops is not None and self._loops_done is not None
        try:
            with self._loops:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._renew_loop)
                    tg.start_soon(self._poll_loop)
        finally:
            self._loops_done.set()

    def _start_error(self, exc: HAError) -> HAError:
        self._state = "closed"
        # a busy or unreachable file at start is Unavailable; other errors say what is wrong
        return Unavailable(str(exc)) if isinstance(exc, ConnectionLost) else exc

    def _open(self) -> float:
        """Open the file and a session (worker thread). Returns the session's CLOCK_MONOTONIC."""
        self._check_file()
        try:
            self._ops = _connect(self._path, self._busy_timeout, self._synchronous)
            # renewals need no fsync: after a power loss no session survives anyway
            self._bg = _connect(self._path, self._busy_timeout, "NORMAL")
            self._instance = _prepare(self._ops, self._path)
            stat = os.stat(self._path)
            self._file_id = (stat.st_dev, stat.st_ino)
            try:
                os.makedirs(self._lock_dir, exist_ok=True)
            except OSError as exc:
                raise _os_error(exc, self._lock_dir, "create the session lock directory") from exc
            monotonic = self._open_session()
            row = self._bg.execute("SELECT coalesce(max(id), 0) FROM changes").fetchone()
            self._cursor = int(row[0])
            return monotonic
        except BaseException:
            self._close_files()
            raise

    def _check_file(self) -> None:
        """Open the file ourselves first: errno says more than SQLite's messages do."""
        flags = os.O_RDWR | os.O_CLOEXEC
        try:
            try:
                fd = os.open(self._path, flags | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                fd = os.open(self._path, flags)
            else:
                # a new file: a -wal left by a deleted database would be replayed into it
                for suffix in ("-wal", "-shm"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self._path + suffix)
        except OSError as exc:
            raise _os_error(exc, self._path, "open for writing") from exc
        os.close(fd)
        directory = os.path.dirname(self._path)
        if not os.access(directory, os.W_OK):  # SQLite creates its -wal and -shm files there
            raise AccessDenied(f"{self._path}: cannot write in its directory {directory}")

    async def aclose(self) -> None:
        if self._state not in ("started", "abandoned"):
            self._state = "closed"
            return
        abandoned = self._state == "abandoned"
        self._state = "closing"
        tg, self._tg = self._tg, None
        try:
            if tg is not None:
                tg.cancel_scope.cancel()
                await tg.__aexit__(None, None, None)
        finally:
            if abandoned:  # _abandon() dropped the files; the session is left to the reapers
                self._state = "closed"
            else:
                await self._close_session()

    async def _close_session(self) -> None:
        with anyio.CancelScope(shield=True):
            sid = self._session_id
            self._session_id = None
            self._connected = False
            try:
                # the ops limiter waits for any operation still running on that connection
                await anyio.to_thread.run_sync(self._shutdown, sid, limiter=self._ops_limiter)
            finally:
                self._state = "closed"
                self._emit(ConnectionEvent(ConnectionState.CLOSED, sid))

    def _shutdown(self, sid: int | None) -> None:
        if sid is not None and self._bg is not None:
            try:
                with _writing(self._bg):
                    _end_session(self._bg, sid)
            except sqlite3.Error as exc:  # our lock goes below: others will reap the session
                log.warning("%s: could not end session %s on close: %s", self._path, sid, exc)
        self._close_files()

    def _close_files(self) -> None:
        self._release_own_lock()
        for fd in self._peer_locks.values():
            os.close(fd)
        self._peer_locks.clear()
        for conn in (self._ops, self._bg):
            if conn is not None:
                conn.close()
        self._ops = self._bg = None

    # --- test hooks: faults a process can meet, for the test harness only -----------------------

    async def _abandon(self) -> None:
        """Test hook: die as a killed process does, without a goodbye.

        Renewals and polls stop, the connections close and the session's kernel lock is released
        (closed, as the kernel does at exit: the lock file stays), but the session row and its
        ephemeral nodes stay for the other drivers to reap. Every later call fails with
        ``ConnectionLost``; ``aclose()`` then only leaves the task group.
        """
        if self._state != "started":
            return
        self._state = "abandoned"
        self._connected = False
        assert self._loops is not None and self._loops_done is not None
        self._loops.cancel()
        with anyio.CancelScope(shield=True):
            await self._loops_done.wait()
            assert self._ops_limiter is not None
            async with self._ops_limiter:  # no operation runs on the connections meanwhile
                await anyio.to_thread.run_sync(self._drop_files, limiter=self._bg_limiter)

    def _drop_files(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release(unlink=False)  # a dead process does not unlink its file
        self._close_files()

    def _freeze(self) -> None:
        """Test hook: every access to the file (renewals, polls, operations) waits for
        ``_thaw()``, as when the file's disk stalls: no error, no contact, no renewal."""
        if self._frozen is None:
            self._frozen = anyio.Event()

    def _thaw(self) -> None:
        if self._frozen is not None:
            self._frozen.set()
            self._frozen = None

    def _fail_next(self, count: int = 1, *, transient: bool = True) -> None:
        """Test hook: the next ``count`` operations fail before reaching the file, with
        ``ConnectionLost`` (as a busy database) or, if not transient, ``AccessDenied``."""
        for _ in range(count):
            self._fail.append(
                ConnectionLost(f"{self._path}: injected fault (database is busy)")
                if transient
                else AccessDenied(f"{self._path}: injected fatal fault")
            )

    def _injected_fault(self) -> None:
        if self._fail and self._state == "started":
            raise self._fail.pop(0)

    # --- session ------------------------------------------------------------------------------

    @property
    def session_id(self) -> int | None:
        return self._session_id

    @property
    def session_timeout(self) -> float:
        return self._session_timeout

    @property
    def last_contact(self) -> float:
        return self._last_contact

    @property
    def connected(self) -> bool:
        return self._connected

    def _lock_path(self, sid: int) -> str:
        return os.path.join(self._lock_dir, f"{self._instance}.{sid}.lock")

    def _open_session(self) -> float:
        """Insert our session row and lock its file before committing (bg thread)."""
        conn = self._bg
        assert conn is not None
        lock: _SessionLock | None = None
        try:
            with _writing(conn) as now:
                _expire_lapsed(conn, now)
                sid = conn.execute(
                    "INSERT INTO sessions (expires_at, timeout, pid, created) VALUES (?, ?, ?, ?)",
                    (now + self._session_timeout, self._session_timeout, os.getpid(), time.time()),
                ).lastrowid
                assert sid is not None
                self._sweep_lock_files(conn)
                # others see the row only after COMMIT, by then its lock is held
                lock = self._take_lock(self._lock_path(sid))
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        self._lock = lock
        self._session_id = sid
        self._dirty = True
        return now

    def _take_lock(self, path: str) -> _SessionLock:
        try:
            return _SessionLock(path)
        except OSError as exc:
            raise _os_error(exc, path, "create the session lock file") from exc

    def _keep_lock(self, sid: int) -> None:
        """Make our lock file again if someone removed or replaced it (bg thread).

        Until then the others cannot tell our death from the file: only our lease would.
        """
        lock = self._lock
        if lock is None or lock.intact():
            return
        try:
            lock.restore()
        except OSError as exc:
            if not lock.broken:  # once, not at every renewal
                lock.broken = True
                log.warning(
                    "%s: session %s: its lock file %s was removed and cannot be made again"
                    " (%s); until it is, only the lease detects this process's death",
                    self._path,
                    sid,
                    lock.path,
                    exc.strerror or exc,
                )
            return
        lock.broken = False
        log.warning(
            "%s: session %s: its lock file %s was removed or replaced by someone else; made it"
            " again (meanwhile only the lease could detect this process's death)",
            self._path,
            sid,
            lock.path,
        )

    def _release_own_lock(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    def _sweep_lock_files(self, conn: sqlite3.Connection) -> None:
        """Remove lock files nobody holds and no session owns (left by a crash mid-open)."""
        live = {
            f"{self._instance}.{sid}.lock" for (sid,) in conn.execute("SELECT id FROM sessions")
        }
        try:
            names = os.listdir(self._lock_dir)
        except OSError:
            return
        for name in names:  # and the temporary files of a restore cut short by a crash
            if not name.endswith((".lock", ".tmp")) or name in live:
                continue
            path = os.path.join(self._lock_dir, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.unlink(path)
            except OSError:
                pass
            finally:
                os.close(fd)

    def _peer_dead(self, sid: int) -> bool:
        """Whether another session's process is known dead: the kernel lock on the file that
        session made is free (bg thread).

        A missing file, or one the session did not make (someone else's file at its path: its
        stamp does not name its own inode), tells nothing: its lease decides, and the path is
        opened again at the next poll (its owner makes its file again). A file opened before
        it was removed or replaced is still the one its owner locks.
        """
        fd = self._peer_locks.get(sid)
        if fd is None:
            try:
                fd = os.open(self._lock_path(sid), os.O_RDONLY | os.O_CLOEXEC)
            except OSError:  # removed (with its session, or by a tmp cleaner), out of fds...
                return False
            try:
                made = _stamp_matches(fd)
            except OSError:
                made = False
            if not made:
                os.close(fd)
                return False
            self._peer_locks[sid] = fd
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # held until the session is reaped
        except BlockingIOError:
            return False
        return True

    def _check_same_file(self) -> None:
        try:
            stat = os.stat(self._path)
        except FileNotFoundError:
            stat = None
        if stat is None or (stat.st_dev, stat.st_ino) != self._file_id:
            raise _FileReplaced(f"{self._path} was deleted or replaced; opening it again")

    def _renew(self, sid: int) -> tuple[bool, float]:
        """Extend our lease (bg thread). False: the session is gone (its lock released).

        A live lease is extended by one statement outside any explicit transaction: SQLite
        takes the write lock, updates, commits and releases it within one ``sqlite3_step``,
        during which Python has released the GIL. No Python code runs while the lock is held,
        so no wait for the GIL (another thread computing holds it for up to the interpreter's
        switch interval, 5 ms, at each of the statements of a transaction) can keep it held,
        and a SIGSTOP of an idle process almost never leaves it held (see "Limits").
        """
        conn = self._bg
        assert conn is not None
        self._check_same_file()
        now = time.monotonic()  # before the lock: see _writing
        renewed = conn.execute(
            "UPDATE sessions SET expires_at = ? WHERE id = ? AND expires_at >= ?",
            (now + self._session_timeout, sid, now),
        ).rowcount
        if renewed == 1:
            self._keep_lock(sid)
            return True, now
        # gone, or lapsed and not reaped yet: a lapsed lease is not renewed but expired
        with _writing(conn) as now:
            _expire_lapsed(conn, now)
            updated = conn.execute(
                "UPDATE sessions SET expires_at = ? WHERE id = ?",
                (now + self._session_timeout, sid),
            ).rowcount
        self._dirty = True  # it may have expired others: the poller must look
        if updated != 1:
            self._release_own_lock()
        else:
            self._keep_lock(sid)
        return updated == 1, now

    def _reopen_file(self) -> float:
        """Drop the connections to a replaced file and open the new one (bg thread)."""
        self._close_files()
        return self._open()

    async def _renew_loop(self) -> None:
        retry = min(self._renew_interval, 0.1)
        due = self._last_contact + self._renew_interval
        while True:
            assert self._wake is not None
            with anyio.CancelScope(deadline=due):
                await self._wake.wait()
            self._wake = anyio.Event()
            due = anyio.current_time() + retry  # unless we hear from the file below
            sid = self._session_id
            if self._reopen or sid is None:
                if await self._new_session():
                    due = self._last_contact + self._renew_interval
                continue
            try:
                alive, monotonic = await self._in_thread(self._bg_limiter, self._renew, sid)
            except _FileReplaced as exc:
                log.error("%s", exc)
                self._reopen = True
                self._lose_session(sid)
                due = anyio.current_time()
                continue
            except HAError as exc:
                if self._connected:
                    log.warning("%s: session %s lost contact: %s", self._path, sid, exc)
                    self._connected = False
                    self._emit(ConnectionEvent(ConnectionState.DISCONNECTED, sid))
                continue
            if alive:
                self._last_contact = self._loop_time(monotonic)
                due = self._last_contact + self._renew_interval
                if not self._connected:
                    self._connected = True
                    self._emit(ConnectionEvent(ConnectionState.RECONNECTED, sid))
            else:
                log.warning("%s: session %s expired", self._path, sid)
                self._lose_session(sid)
                due = anyio.current_time()

    def _lose_session(self, sid: int) -> None:
        self._session_id = None
        self._connected = False
        self._emit(ConnectionEvent(ConnectionState.EXPIRED, sid))

    async def _new_session(self) -> bool:
        assert self._ops_limiter is not None
        try:
            if self._reopen:
                # borrow the ops connection's token too: no operation may use it meanwhile
                async with self._ops_limiter:
                    monotonic = await self._in_thread(self._bg_limiter, self._reopen_file)
                self._reopen = False
            else:
                monotonic = await self._in_thread(self._bg_limiter, self._open_session)
        except HAError as exc:
            log.warning("%s: cannot open a new session: %s", self._path, exc)
            return False
        self._last_contact = self._loop_time(monotonic)
        self._connected = True
        self._emit(ConnectionEvent(ConnectionState.CONNECTED, self._session_id))
        return True

    # --- polling: reaping dead sessions and node events ------------------------------------------

    async def _poll_loop(self) -> None:
        while True:
            assert self._poke is not None and self._wake is not None
            with anyio.move_on_after(self._poll_interval):
                await self._poke.wait()
            self._poke = anyio.Event()
            try:
                events, own_gone = await self._in_thread(
                    self._bg_limiter, self._poll, self._session_id, self.watched_paths()
                )
            except _FileReplaced:
                self._wake.set()
                continue
            except HAError as exc:  # the renewer reports contact; just try again
                log.debug("%s: poll failed: %s", self._path, exc)
                continue
            if own_gone:
                self._wake.set()  # our session was expired: let the renewer see to it now
            for path, kind in events:
                if path in self._subscribers:
                    self._emit(NodeEvent(path, NodeEventKind(kind)))
            if len(events) >= MAX_CHANGES_PER_POLL:
                self._poke.set()

    def _poll(self, own: int | None, watched: list[str]) -> tuple[list[tuple[str, str]], bool]:
        """Reap dead sessions, then read the changes after the cursor (bg thread).

        Returns the changes (path, kind) and whether our own session is gone. An idle poll
        costs a stat, ``PRAGMA data_version`` and one flock per other session: the tables
        are read only when another connection committed, or this one did.
        """
        conn = self._bg
        if conn is None:  # being reopened
            return [], False
        self._check_same_file()
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        changed = version != self._data_version or self._dirty
        if changed:
            self._data_version, self._dirty = version, False
            self._sessions = conn.execute("SELECT id, expires_at FROM sessions").fetchall()
        if not self._reap(conn, own) and not changed:
            return [], False  # nothing committed since the last poll, nobody died
        own_gone = own is not None and all(sid != own for sid, _ in self._sessions)
        with _reading(conn):
            trimmed = conn.execute(
                "SELECT value FROM meta WHERE key = 'trimmed_through'"
            ).fetchone()[0]
            if self._cursor < trimmed:
                return self._resync(conn, watched), own_gone
            rows = conn.execute(
                "SELECT id, path, kind FROM changes WHERE id > ? ORDER BY id LIMIT ?",
                (self._cursor, MAX_CHANGES_PER_POLL),
            ).fetchall()
        if rows:
            self._cursor = rows[-1][0]
        if len(rows) == MAX_CHANGES_PER_POLL:
            self._dirty = True  # more to read
        return [(path, kind) for _, path, kind in rows], own_gone

    def _resync(self, conn: sqlite3.Connection, watched: list[str]) -> list[tuple[str, str]]:
        """This poller fell behind the trimmed log: report each watched path's current state."""
        log.warning("%s: change log trimmed past this poller; resyncing", self._path)
        events = []
        for path in watched:
            row = conn.execute("SELECT czxid FROM nodes WHERE path = ?", (path,)).fetchone()
            if row is None:
                events.append((path, DELETED))
            else:
                events.append((path, CREATED if row[0] > self._cursor else CHANGED))
        self._cursor = conn.execute("SELECT coalesce(max(id), 0) FROM changes").fetchone()[0]
        return events

    def _reap(self, conn: sqlite3.Connection, own: int | None) -> bool:
        """Expire the sessions whose process died or whose lease ran out (bg thread).

        The sessions last read only say whether to look; returns whether it wrote. Which
        leases ran out is decided again inside the write transaction, on the table as it is
        then: those read before may have been renewed since, and this thread may have been
        stopped in between (SIGSTOP), after which every lease it read has run out by its clock.
        A free kernel lock (on a file its session made) is taken as seen: it never comes back.
        """
        now = time.monotonic()
        present = {sid for sid, _ in self._sessions}
        for sid in [s for s in self._peer_locks if s not in present]:
            os.close(self._peer_locks.pop(sid))
        others = [(sid, expires) for sid, expires in self._sessions if sid != own]
        lapsed = any(expires < now for _, expires in others)
        dead = [sid for sid, _ in others if self._peer_dead(sid)]
        if not lapsed and not dead:
            return False
        with _writing(conn) as now:
            ended = set(_expire_lapsed(conn, now))
            for sid in dead:
                if (
                    sid not in ended
                    and conn.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone()
                ):
                    log.info("%s: session %s is dead; expiring it", self._path, sid)
                    _end_session(conn, sid)
                    ended.add(sid)
        gone = ended.union(dead)  # the dead that are not ended were ended by someone else
        for sid in gone:
            fd = self._peer_locks.pop(sid, None)
            if fd is not None:  # remove the file while we still hold its lock
                _unlock((fd, self._lock_path(sid)))
        self._sessions = [(sid, e) for sid, e in self._sessions if sid not in gone]
        self._dirty = True  # our own commit does not move data_version
        return True

    # --- nodes ------------------------------------------------------------------------------------

    def _owner(self) -> int:
        sid = self._session_id
        if sid is None:
            raise SessionExpired(f"{self._path}: no session (it expired; a new one is opening)")
        return sid

    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, makepath: bool = False
    ) -> str:
        validate_path(path)
        data = _bytes(data)
        owner = self._owner() if ephemeral else None
        if path == "/":
            raise NodeExists(path)
        return await self._write(_create, path, data, owner, makepath)

    async def get(self, path: str) -> tuple[bytes, Stat]:
        validate_path(path)
        return await self._read(_get, path)

    async def exists(self, path: str) -> Stat | None:
        validate_path(path)
        return await self._read(_exists, path)

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        validate_path(path)
        return await self._write(_set, path, _bytes(data), version)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        validate_path(path)
        if path == "/":
            raise ConfigurationError("the root node cannot be deleted")
        await self._write(_delete, path, version, recursive)

    async def children(self, path: str) -> list[str]:
        validate_path(path)
        return await self._read(_children, path)

    async def transaction(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        checked: list[Op] = []
        owner: int | None = None
        for op in ops:
            if not isinstance(op, Check | Create | SetData | Delete):
                raise ConfigurationError(f"not a transaction operation: {op!r}")
            validate_path(op.path)
            if isinstance(op, Create):
                op = Create(op.path, _bytes(op.data), op.ephemeral)
                if op.ephemeral:
                    owner = self._owner()
            elif isinstance(op, SetData):
                op = SetData(op.path, _bytes(op.data), op.version)
            elif isinstance(op, Delete) and op.path == "/":
                raise ConfigurationError("the root node cannot be deleted")
            checked.append(op)
        if not checked:
            return []
        return await self._write(_transact, checked, owner)


def _transact(
    conn: sqlite3.Connection, ops: list[Op], owner: int | None
) -> list[str | Stat | None]:
    results: list[str | Stat | None] = []
    for index, op in enumerate(ops):
        try:
            results.append(_apply(conn, op, owner))
        except (NoNode, NodeExists, BadVersion, NotEmpty) as exc:
            raise TransactionFailed(index, exc) from exc
    return results


class _FileReplaced(SessionExpired):
    """The path now names another file than the one this driver opened."""


def _unlock(lock: tuple[int, str]) -> None:
    """Remove a session lock file, then release it (whoever opened it meanwhile sees it free)."""
    fd, path = lock
    with contextlib.suppress(OSError):
        os.unlink(path)
    os.close(fd)


_STAMP = re.compile(rb"inode (\d+)\n")


def _stamp_matches(fd: int) -> bool:
    """Whether the open file is stamped with its own inode number (made by ``_new_lock_file``)."""
    found = _STAMP.search(os.pread(fd, 128, 0))
    return found is not None and int(found[1]) == os.fstat(fd).st_ino


def _new_lock_file(path: str) -> tuple[int, tuple[int, int]]:
    """Make a locked session lock file at ``path``, replacing whatever is there.

    Returns its descriptor, which holds ``LOCK_EX``, and its (device, inode). The file is made
    under a temporary name, locked, and stamped with its inode number before it is renamed into
    place: a file at that path is only ever complete, and one not stamped with its own inode
    number was made by someone else (see ``_peer_dead``).
    """
    directory = os.path.dirname(path)
    for _ in range(100):
        tmp = f"{path}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:  # its directory was removed (a tmp cleaner): make it again
            os.makedirs(directory, exist_ok=True)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            stat = os.fstat(fd)
            os.write(fd, b"ha session lock: pid %d, inode %d\n" % (os.getpid(), stat.st_ino))
            os.rename(tmp, path)
            return fd, (stat.st_dev, stat.st_ino)
        except (BlockingIOError, FileNotFoundError):
            pass  # a sweeper took the new file for a crash's leftover: try another
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    raise OSError(errno.EAGAIN, "cannot make the session lock file", path)


class _SessionLock:
    """Our session's lock file (bg thread): ``LOCK_EX`` held on every file made for it.

    The files replaced by ``restore`` stay locked: a poller that opened one of them before
    still watches it, and must not find it free while this process lives.
    """

    def __init__(self, path: str) -> None:
        fd, self.file_id = _new_lock_file(path)
        self.path = path
        self.fds = [fd]
        self.broken = False  # found removed and not made again yet (logged)

    def intact(self) -> bool:
        """Whether ``path`` still names our file."""
        try:
            stat = os.stat(self.path)
        except OSError:
            return False
        return (stat.st_dev, stat.st_ino) == self.file_id

    def restore(self) -> None:
        fd, self.file_id = _new_lock_file(self.path)
        self.fds.append(fd)

    def release(self, *, unlink: bool = True) -> None:
        """Remove our file (not someone else's at its path), then release the locks."""
        if unlink and self.intact():
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        fds, self.fds = self.fds, []
        for fd in fds:
            os.close(fd)


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{name} must be a number of seconds: {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"{name} must be a positive number of seconds: {value!r}")
    return float(value)


def _bytes(data: object) -> bytes:
    """A copy of bytes-like ``data``: later changes to a bytearray must not leak in."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ConfigurationError(f"node data must be bytes, not {type(data).__name__}")
    return bytes(data)
