"""The status page of ``--http``: ``/`` (``page.html``) and the document it shows,
``/status.json``.

The page is one HTML file with its style and a small script inline (no build step): it asks
``/status.json`` every second and draws it. The document is read from the backend when asked,
as ``ha status --json`` reads it (``election_status`` with the sessions' leases), plus the
election's recent history (``ha history``) and, for a job manager, its cluster's jobs; nothing
is computed between requests. A backend that cannot be read in time gives the document an
``error`` and no election: the page says so and keeps the last reading it drew, marked stale.

``page_document`` is the one place that reads; the routes (``endpoints.py``) only call it,
through ``Readings``: every request that comes within a second of a reading gets that reading
(a page open in several tabs, or by several people, reads the backend once a second, not once
per viewer; a backend that does not answer holds one reading up, not one per request).
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

import anyio

from ..admin import election_status
from ..drivers.base import Driver
from ..election.history import read_history
from ..election.nodes import ElectionNodes
from ..errors import HAError
from ..membership.records import text

__all__ = ("HISTORY_SHOWN", "Jobs", "Readings", "page_document", "page_html")

HISTORY_SHOWN = 20  # terms on the page's timeline (the history keeps 100: ``ha history``)

# a job manager's jobs as rows of plain JSON (``jobs.py``); None for a process without jobs
Jobs = Callable[[], Awaitable[list[dict[str, Any]]]]


def page_html() -> bytes:
    return resources.files(__package__).joinpath("page.html").read_bytes()


async def page_document(
    driver: Driver,
    path: str,
    identity: bytes,
    state: str,
    jobs: Jobs | None = None,
) -> dict[str, Any]:
    """What the page shows for the process ``identity`` (local ``state``) in the election at
    ``path``: a reading bounded by the session timeout (10 s where it has none)."""
    document: dict[str, Any] = {
        "now": time.time(),  # ages on the page count from the server's clock, not the browser's
        "process": {
            "identity": text(identity),
            "state": state,
            "connected": driver.connected,
            "backend": driver.capabilities.name,
        },
        "elections": [],
        "jobs": None,
    }
    timeout = driver.session_timeout
    try:
        with anyio.fail_after(timeout if math.isfinite(timeout) else 10.0):
            status = await election_status(driver, path, leases=True)
            found = await read_history(driver, ElectionNodes(path))
            rows = None if jobs is None else await jobs()
    except (HAError, TimeoutError) as exc:
        document["error"] = str(exc) or f"no answer in {timeout:g}s"
        return document
    terms = [] if found is None else found[0].terms[-HISTORY_SHOWN:]
    election = status.to_json()
    election["history"] = [t.to_doc() | {"identity": text(t.identity)} for t in terms]
    document["elections"].append(election)
    document["jobs"] = rows
    return document


class Readings:
    """The last document, shared by the requests that come within ``FRESH`` seconds of it."""

    FRESH = 1.0

    def __init__(self) -> None:
        self._document: dict[str, Any] | None = None
        self._at = -math.inf
        self._busy: anyio.Event | None = None  # set when the reading under way ends

    async def get(self, read: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        while True:
            if self._document is not None and anyio.current_time() - self._at < self.FRESH:
                return self._document
            if self._busy is None:
                break
            await self._busy.wait()  # its result, or (it failed or was cancelled) our turn
        busy = self._busy = anyio.Event()
        try:
            document = await read()
            self._document, self._at = document, anyio.current_time()
            return document
        finally:
            self._busy = None
            busy.set()
