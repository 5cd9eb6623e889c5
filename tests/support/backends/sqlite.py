"""The sqlite backend for the backend-agnostic tests: a fresh database file per test.

``expire_session(driver)`` ends a driver's session from outside, as another process's reaper
would (the driver learns it at its next renewal: EXPIRED, then CONNECTED with a new session).

Faults on the session lock files (``<db>-sessions/``), which live processes must survive:
``remove_lock_files`` (a tmp cleaner or an operator; ``directory=True``: the whole directory)
and ``replace_lock_files`` (each becomes a copy: same name and bytes, another inode, nobody's
lock). ``lock_held(file, sid)`` tells from outside whether a session's file is locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from ha.drivers.sqlite.driver import SqliteDriver
from ha.testing import faults

__all__ = (
    "SqliteBackend",
    "expire_session",
    "lock_held",
    "remove_lock_files",
    "replace_lock_files",
    "sqlite_backend",
)


class SqliteBackend:
    """The ``Backend`` of tests/backends: one database file in the test's tmp_path."""

    name = "sqlite"
    cross_process = True

    def __init__(self, directory: Path) -> None:
        self.file = directory / "ha.db"

    def url(self) -> str:
        return "sqlite://" + quote(str(self.file))

    def driver(self, **options: Any) -> SqliteDriver:
        """An unstarted driver on this test's file; polls every 20 ms unless told otherwise."""
        options.setdefault("poll_interval", 0.02)
        return SqliteDriver.from_url(self.url(), **options)


@pytest.fixture
def sqlite_backend(tmp_path: Path) -> SqliteBackend:
    return SqliteBackend(tmp_path)


async def expire_session(driver: SqliteDriver) -> None:
    """Expire ``driver``'s current session now, deleting its ephemeral nodes."""
    await faults(driver).expire()


def lock_dir(file: Path) -> Path:
    return Path(f"{file}-sessions")


def remove_lock_files(file: Path, *, directory: bool = False) -> list[str]:
    """Delete the session lock files of the database ``file`` (or their whole directory), as a
    tmp cleaner would; returns the names removed."""
    names = sorted(os.listdir(lock_dir(file)))
    if directory:
        shutil.rmtree(lock_dir(file))
    else:
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock_dir(file) / name)
    return names


def replace_lock_files(file: Path) -> list[str]:
    """Put a copy in place of each session lock file: same name and content, another inode,
    locked by nobody. Returns the names replaced."""
    names = sorted(n for n in os.listdir(lock_dir(file)) if n.endswith(".lock"))
    for name in names:
        path = lock_dir(file) / name
        with contextlib.suppress(FileNotFoundError):
            content = path.read_bytes()
            path.unlink()
            path.write_bytes(content)
    return names


def lock_held(file: Path, sid: int) -> bool:
    """Whether session ``sid``'s lock file exists and someone holds its lock."""
    with contextlib.closing(sqlite3.connect(file, timeout=5.0, isolation_level=None)) as conn:
        (instance,) = conn.execute("SELECT value FROM meta WHERE key = 'instance'").fetchone()
    try:
        fd = os.open(lock_dir(file) / f"{instance}.{sid}.lock", os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
