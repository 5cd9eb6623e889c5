"""Which sessions of a file are alive: leases renewed by their owners, and session lock files.

A session is a lease, a row ``(id, expires_at)`` of the ``sessions`` table that its owner
renews (``Liveness.renew``), and a lock file:

- Fast death detection: each session holds ``flock(LOCK_EX)`` on a lock file
  ``<db>-sessions/<instance>.<id>.lock``. The kernel drops it when the process dies, so the
  pollers of the other processes find it free and expire that session at once, without waiting
  for its lease (``Liveness.reap``). A hung process (SIGSTOP) keeps its lock and is expired
  when its lease runs out. The lock file is opened close-on-exec; a child that was forked but
  did not exec keeps the lock (then only the lease detects the parent's death).
- Only a free lock on the file the session made tells its death (``Liveness.peer_dead``). A
  missing file tells nothing (a tmp cleaner or an operator may remove it while its process
  lives), nor does a file someone else put at its path (a copy, a ``touch``): each file is
  stamped with its own inode number before it is moved into place (``new_lock_file``), and a
  file whose stamp does not name its inode is not the session's. Either way the lease decides,
  and the owner, which looks at its file at every renewal, makes it again (and logs it), which
  brings the fast detection back; it keeps the locks of the files it made before, which
  pollers that opened them before still watch.
- Nothing here goes by pid: a kernel lock belongs to an open file, so processes in different
  PID namespaces (containers sharing the file's directory) see each other die. The pid in a
  lock file and in a session's row is for people to read.

Clock: ``expires_at`` is on the host's CLOCK_MONOTONIC: never stepped by NTP, never reset while
the host runs, and one clock for every process of the host once each corrects its reading by
its time namespace's offset (``clock``: a namespace ahead would otherwise expire every other
lease at once, one behind would never see a frozen process's lease run out). A renewal reads
it just before its write, and every expiry is decided inside a later write transaction
(SQLite's write lock serializes them) on the table as it is then, against a reading taken just
before that transaction asked for the lock, so a renewal read at ``t`` can be expired only at
a ``now > t + session_timeout``; a renewal that finds its lease already run out expires it
rather than reviving it. No reading is taken while the lock is held, and no lease read before
a transaction is judged in it: a process stopped (SIGSTOP) in between would resume with a
clock that has moved on by its pause and would find lapsed, by that clock, every lease it had
read, the new active's too. After a reboot the clock restarts, but nobody holds the old
sessions' locks, so they are expired at once.

Renewing a live lease is a single statement outside any explicit transaction (see
``Liveness.renew``); reaping decides again, inside its write transaction, which leases ran out
(see ``Liveness.reap``). Everything here runs in the driver's background worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import secrets
import sqlite3
import time

from ..base import SessionLease
from . import clock
from .schema import os_error, writing
from .tree import end_session, expire_lapsed

__all__ = ("Liveness", "SessionLock", "lease_of", "new_lock_file", "stamp_matches", "unlock")

log = logging.getLogger("ha.drivers.sqlite")


class Liveness:
    """This process's view of the sessions of one file (the background thread's only).

    ``lock`` is our own session's lock file; ``peer_locks`` the descriptors of the other
    sessions' files, opened once each and kept until their session is gone; ``sessions`` the
    ``(id, expires_at)`` rows as last read; ``dirty`` says this connection committed since
    (its own commits do not move ``PRAGMA data_version``).
    """

    def __init__(self, path: str, instance: str, session_timeout: float) -> None:
        self.path = path  # the database file (for messages)
        self.lock_dir = path + "-sessions"
        self.instance = instance
        self.session_timeout = session_timeout
        self.lock: SessionLock | None = None
        self.peer_locks: dict[int, int] = {}
        self.sessions: list[tuple[int, float]] = []
        self.dirty = True

    def lock_path(self, sid: int) -> str:
        return os.path.join(self.lock_dir, f"{self.instance}.{sid}.lock")

    def make_lock_dir(self) -> None:
        try:
            os.makedirs(self.lock_dir, exist_ok=True)
        except OSError as exc:
            raise os_error(exc, self.lock_dir, "create the session lock directory") from exc

    def close(self, *, unlink: bool = True) -> None:
        """Release our lock file (``unlink=False``: leave it, as a killed process does) and
        close the others' files."""
        lock, self.lock = self.lock, None
        if lock is not None:
            lock.release(unlink=unlink)
        for fd in self.peer_locks.values():
            os.close(fd)
        self.peer_locks.clear()

    # --- our own session ------------------------------------------------------------------------

    def open_session(self, conn: sqlite3.Connection) -> tuple[int, float]:
        """Insert our session row and lock its file before committing.

        Returns the session's id and the ``time.monotonic()`` its lease counts from.
        """
        lock: SessionLock | None = None
        try:
            with writing(conn) as now:
                expire_lapsed(conn, now.host)
                expires_at = now.host + self.session_timeout
                sid = conn.execute(
                    "INSERT INTO sessions (expires_at, timeout, pid, created) VALUES (?, ?, ?, ?)",
                    (expires_at, self.session_timeout, os.getpid(), time.time()),
                ).lastrowid
                assert sid is not None
                self._sweep(conn)
                # others see the row only after COMMIT, by then its lock is held
                lock = self._take_lock(self.lock_path(sid))
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        self.lock = lock
        self.dirty = True
        return sid, now.local

    def renew(self, conn: sqlite3.Connection, sid: int) -> tuple[bool, float]:
        """Extend our lease. False: the session is gone (its lock released). Also returns the
        ``time.monotonic()`` read before the write.

        A live lease is extended by one statement outside any explicit transaction: SQLite
        takes the write lock, updates, commits and releases it within one ``sqlite3_step``,
        during which Python has released the GIL. No Python code runs while the lock is held,
        so no wait for the GIL (another thread computing holds it for up to the interpreter's
        switch interval, 5 ms, at each of the statements of a transaction) can keep it held,
        and a SIGSTOP of an idle process almost never leaves it held (see the driver's
        "Limits").
        """
        now = clock.now()  # before the lock: see schema.writing
        renewed = conn.execute(
            "UPDATE sessions SET expires_at = ? WHERE id = ? AND expires_at >= ?",
            (now.host + self.session_timeout, sid, now.host),
        ).rowcount
        if renewed == 1:
            self._keep_lock(sid)
            return True, now.local
        # gone, or lapsed and not reaped yet: a lapsed lease is not renewed but expired
        with writing(conn) as now:
            expire_lapsed(conn, now.host)
            updated = conn.execute(
                "UPDATE sessions SET expires_at = ? WHERE id = ?",
                (now.host + self.session_timeout, sid),
            ).rowcount
        self.dirty = True  # it may have expired others: the poller must look
        if updated != 1:
            lock, self.lock = self.lock, None
            if lock is not None:
                lock.release()
        else:
            self._keep_lock(sid)
        return updated == 1, now.local

    def _take_lock(self, path: str) -> SessionLock:
        try:
            return SessionLock(path)
        except OSError as exc:
            raise os_error(exc, path, "create the session lock file") from exc

    def _keep_lock(self, sid: int) -> None:
        """Make our lock file again if someone removed or replaced it.

        Until then the others cannot tell our death from the file: only our lease would.
        """
        lock = self.lock
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
                    self.path,
                    sid,
                    lock.path,
                    exc.strerror or exc,
                )
            return
        lock.broken = False
        log.warning(
            "%s: session %s: its lock file %s was removed or replaced by someone else; made it"
            " again (meanwhile only the lease could detect this process's death)",
            self.path,
            sid,
            lock.path,
        )

    def _sweep(self, conn: sqlite3.Connection) -> None:
        """Remove lock files nobody holds and no session owns (left by a crash mid-open)."""
        live = {f"{self.instance}.{sid}.lock" for (sid,) in conn.execute("SELECT id FROM sessions")}
        try:
            names = os.listdir(self.lock_dir)
        except OSError:
            return
        for name in names:  # and the temporary files of a restore cut short by a crash
            if not name.endswith((".lock", ".tmp")) or name in live:
                continue
            path = os.path.join(self.lock_dir, name)
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

    # --- the others -----------------------------------------------------------------------------

    def refresh(self, conn: sqlite3.Connection) -> None:
        """Read the sessions table again."""
        self.sessions = conn.execute("SELECT id, expires_at FROM sessions").fetchall()
        self.dirty = False

    def gone(self, sid: int) -> bool:
        """Whether ``sid`` was not among the sessions last read (or reaped since)."""
        return all(s != sid for s, _ in self.sessions)

    def peer_dead(self, sid: int) -> bool:
        """Whether another session's process is known dead: the kernel lock on the file that
        session made is free.

        A missing file, or one the session did not make (someone else's file at its path: its
        stamp does not name its own inode), tells nothing: its lease decides, and the path is
        opened again at the next poll (its owner makes its file again). A file opened before
        it was removed or replaced is still the one its owner locks.
        """
        fd = self.peer_locks.get(sid)
        if fd is None:
            try:
                fd = os.open(self.lock_path(sid), os.O_RDONLY | os.O_CLOEXEC)
            except OSError:  # removed (with its session, or by a tmp cleaner), out of fds...
                return False
            try:
                made = stamp_matches(fd)
            except OSError:
                made = False
            if not made:
                os.close(fd)
                return False
            self.peer_locks[sid] = fd
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # held until the session is reaped
        except BlockingIOError:
            return False
        return True

    def reap(self, conn: sqlite3.Connection, own: int | None) -> bool:
        """End the sessions whose process died or whose lease ran out.

        The sessions last read only say whether to look; returns whether it wrote. Which
        leases ran out is decided again inside the write transaction, on the table as it is
        then: those read before may have been renewed since, and this thread may have been
        stopped in between (SIGSTOP), after which every lease it read has run out by its clock.
        A free kernel lock (on a file its session made) is taken as seen: it never comes back.
        """
        now = clock.now().host
        present = {sid for sid, _ in self.sessions}
        for sid in [s for s in self.peer_locks if s not in present]:
            os.close(self.peer_locks.pop(sid))
        others = [(sid, expires) for sid, expires in self.sessions if sid != own]
        lapsed = any(expires < now for _, expires in others)
        dead = [sid for sid, _ in others if self.peer_dead(sid)]
        if not lapsed and not dead:
            return False
        with writing(conn) as reading:
            ended = set(expire_lapsed(conn, reading.host))
            for sid in dead:
                if (
                    sid not in ended
                    and conn.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone()
                ):
                    log.info("%s: session %s is dead; expiring it", self.path, sid)
                    end_session(conn, sid)
                    ended.add(sid)
        gone = ended.union(dead)  # the dead that are not ended were ended by someone else
        for sid in gone:
            fd = self.peer_locks.pop(sid, None)
            if fd is not None:  # remove the file while we still hold its lock
                unlock(fd, self.lock_path(sid))
        self.sessions = [(sid, e) for sid, e in self.sessions if sid not in gone]
        self.dirty = True  # our own commit does not move data_version
        return True


def lease_of(conn: sqlite3.Connection, sid: int) -> SessionLease | None:
    """Session ``sid``'s lease as its row says, or None if the row is gone.

    Exact, not an estimate: a renewal sets ``expires_at`` to its reading of the host's
    CLOCK_MONOTONIC plus the timeout, every process of the host reads that clock (``clock``),
    and a file serves one host. A process that died is still shown until a poller reaps it
    (at its next poll: its lock file is free).
    """
    row = conn.execute("SELECT expires_at, timeout FROM sessions WHERE id = ?", (sid,)).fetchone()
    if row is None:
        return None
    expires_at, timeout = float(row[0]), float(row[1])
    now = clock.now().host
    return SessionLease(now - (expires_at - timeout), expires_at - now, timeout)


# --- lock files -----------------------------------------------------------------------------------


def unlock(fd: int, path: str) -> None:
    """Remove a session lock file, then release it (whoever opened it meanwhile sees it free)."""
    with contextlib.suppress(OSError):
        os.unlink(path)
    os.close(fd)


_STAMP = re.compile(rb"inode (\d+)\n")


def stamp_matches(fd: int) -> bool:
    """Whether the open file is stamped with its own inode number (made by ``new_lock_file``)."""
    found = _STAMP.search(os.pread(fd, 128, 0))
    return found is not None and int(found[1]) == os.fstat(fd).st_ino


def new_lock_file(path: str) -> tuple[int, tuple[int, int]]:
    """Make a locked session lock file at ``path``, replacing whatever is there.

    Returns its descriptor, which holds ``LOCK_EX``, and its (device, inode). The file is made
    under a temporary name, locked, and stamped with its inode number before it is renamed into
    place: a file at that path is only ever complete, and one not stamped with its own inode
    number was made by someone else (see ``Liveness.peer_dead``).
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


class SessionLock:
    """Our session's lock file: ``LOCK_EX`` held on every file made for it.

    The files replaced by ``restore`` stay locked: a poller that opened one of them before
    still watches it, and must not find it free while this process lives.
    """

    def __init__(self, path: str) -> None:
        fd, self.file_id = new_lock_file(path)
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
        fd, self.file_id = new_lock_file(self.path)
        self.fds.append(fd)

    def release(self, *, unlink: bool = True) -> None:
        """Remove our file (not someone else's at its path), then release the locks."""
        if unlink and self.intact():
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        fds, self.fds = self.fds, []
        for fd in fds:
            os.close(fd)
