"""The sqlite driver's faults for ``ha.testing.faults``: a killed process, a stalled file,
injected errors, and a session ended from outside, as another process's reaper ends it.

Driver and file share one host: there is no connection to drop and no network to cut.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Mapping

import anyio
import anyio.to_thread

from .._faults import FaultGate
from .schema import writing
from .tree import end_session

__all__ = ("SqliteFaults",)

_NO_CONNECTION = "it opens a local file, there is no connection to drop; freeze() stalls the file"
_NO_NETWORK = "driver and file share one host, there is no network to cut; freeze() stalls the file"


class SqliteFaults:
    """``FaultHooks`` of one sqlite driver: its file's gate, its session (``session()``: the
    current id) and its death (``crash``: renewals and polls stop, the files close)."""

    backend = "sqlite"
    cannot: Mapping[str, str] = {
        "disconnect": _NO_CONNECTION,
        "reconnect": _NO_CONNECTION,
        "partition": _NO_NETWORK,
        "heal": _NO_NETWORK,
    }

    def __init__(
        self,
        path: str,
        gate: FaultGate,
        *,
        session: Callable[[], int | None],
        crash: Callable[[], Awaitable[None]],
    ) -> None:
        self.path = path
        self.gate = gate
        self.session = session
        self.die = crash

    async def crash(self) -> None:
        """Die as a killed process does, without a goodbye: renewals and polls stop, the
        connections close and the session's kernel lock is released (the lock file stays);
        the session row and its ephemeral nodes stay for the other drivers to reap."""
        await self.die()

    async def expire(self) -> None:
        """The session's row is ended from outside, as another process's reaper would."""
        sid, path = self.session(), self.path
        if sid is None:
            raise RuntimeError(f"the sqlite driver on {path} has no session to expire")

        def end() -> None:
            conn = sqlite3.connect(path, timeout=5.0, isolation_level=None)
            try:
                with writing(conn):
                    end_session(conn, sid)
            finally:
                conn.close()

        await anyio.to_thread.run_sync(end)

    def freeze(self) -> None:
        """Every access to the file (renewals, polls, operations) waits for ``thaw()``, as
        when the file's disk stalls: no error, no contact, no renewal."""
        self.gate.freeze()

    def thaw(self) -> None:
        self.gate.thaw()

    def fail_next(self, count: int = 1, *, transient: bool = True) -> None:
        """The next ``count`` operations fail before reaching the file, with
        ``ConnectionLost`` (as a busy database) or, if not transient, ``AccessDenied``."""
        self.gate.fail_next(
            count,
            transient=transient,
            lost=f"{self.path}: injected fault (database is busy)",
            denied=f"{self.path}: injected fatal fault",
        )

    def disconnect(self) -> None:
        raise NotImplementedError(_NO_CONNECTION)

    def reconnect(self) -> None:
        raise NotImplementedError(_NO_CONNECTION)

    def partition(self) -> None:
        raise NotImplementedError(_NO_NETWORK)

    def heal(self) -> None:
        raise NotImplementedError(_NO_NETWORK)
