"""The sqlite backend for the backend-agnostic tests: a fresh database file per test.

``expire_session(driver)`` ends a driver's session from outside, as another process's reaper
would (the driver learns it at its next renewal: EXPIRED, then CONNECTED with a new session).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import anyio.to_thread
import pytest

from ha.drivers.sqlite import SqliteDriver, _end_session, _writing

__all__ = ("SqliteBackend", "expire_session", "sqlite_backend")


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
    sid = driver.session_id
    if sid is None:
        raise RuntimeError("the driver has no session to expire")

    def expire() -> None:
        conn = sqlite3.connect(driver.path, timeout=5.0, isolation_level=None)
        try:
            with _writing(conn):
                _end_session(conn, sid)
        finally:
            conn.close()

    await anyio.to_thread.run_sync(expire)
