"""Expiry of other sessions, decided by their peers the way client-go's leader election does.

Nothing on the API server ends a Lease, so every driver watches its root's session Leases
(listed by label every eighth of its own duration) and times them on **its own monotonic
clock**: a Lease whose record has not changed for the ``leaseDurationSeconds`` *the record
states* (not the observer's own setting: kubernetes/kubernetes#47671), counted from when the
observer first saw that record, is expired. Wall-clock ``renewTime`` is never compared across
machines (clock skew between nodes is a known split-brain cause).

Why this keeps the timing assumption of ``ha.drivers.base``: the observer sees a renewal only
after the server applied it, which is after its owner sent it, and the owner's
``last_contact`` is that send time. So an observer expires a session no earlier than
``last_contact + duration`` on any clock that runs at the same rate.

Reaping: the observer deletes the Lease with ``preconditions.resourceVersion`` = the record it
timed, so a renewal in between wins (409) and nothing is reaped. Then it strikes the session
off the tree with its ephemeral nodes in one CAS'd write (``tree.reap``). A session
registered in the tree but without a Lease (its reaper died between the two steps, or its
owner's own clearing failed) is struck off too: the tree is read before the Leases are
listed, and a session registers only after its Lease exists, so such a session is dead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from ...errors import DriverError
from .api import failure
from .store import TreeStore
from .transport import Transport

__all__ = ("Observer", "Reaper", "session_of")

log = logging.getLogger("ha.drivers.kubernetes")


@dataclass(slots=True)
class _Seen:
    version: str  # the record's resourceVersion
    since: float  # the observer's clock when it first saw that version
    duration: float  # the record's leaseDurationSeconds


def session_of(lease: dict[str, Any], prefix: str) -> int | None:
    """The session id of one of our Leases, from its name (``prefix`` + 16 hex digits)."""
    name = str((lease.get("metadata") or {}).get("name") or "")
    if not name.startswith(prefix):
        return None
    try:
        return int(name[len(prefix) :], 16)
    except ValueError:
        return None


class Observer:
    """Times the Leases it is shown; pure (the caller passes its clock's readings)."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}

    def observe(self, leases: list[dict[str, Any]], now: float) -> list[tuple[str, str]]:
        """Record a listing of Leases read at ``now`` (taken after the answer came); return
        ``(name, resourceVersion)`` of those whose record has not changed for its duration.
        Leases not listed any more are forgotten."""
        present: dict[str, _Seen] = {}
        expired = []
        for lease in leases:
            metadata = lease.get("metadata") or {}
            name, version = str(metadata.get("name")), str(metadata.get("resourceVersion"))
            duration = (lease.get("spec") or {}).get("leaseDurationSeconds")
            if not isinstance(duration, int) or duration <= 0:
                duration = 1  # a broken record still expires, never sooner than a second
            seen = self._seen.get(name)
            if seen is None or seen.version != version:
                seen = _Seen(version, now, float(duration))
            seen.duration = float(duration)
            present[name] = seen
            if now >= seen.since + seen.duration:
                expired.append((name, version))
        self._seen = present
        return expired


class Reaper:
    """The loop that expires and clears other sessions of the root (``session()``: this
    driver's own, left to its renewals)."""

    def __init__(
        self,
        transport: Transport,
        store: TreeStore,
        session: Callable[[], int | None],
        period: Callable[[], float],
    ) -> None:
        self._transport = transport
        self._store = store
        self._session = session
        self._period = period  # the session timeout: reaping every eighth of it
        self._observer = Observer()
        self.reaped = 0  # sessions this driver reaped (for tests)

    async def run(self) -> None:
        while True:
            await anyio.sleep(max(0.05, self._period() / 8))
            try:
                await self._reap_once()
            except DriverError as exc:
                log.debug("reaping Kubernetes sessions: %s", exc)

    async def _reap_once(self) -> None:
        t = self._transport
        registered = set(self._store.known.sessions)  # read before the Leases are listed
        params = {"labelSelector": f"ha.io/root={t.settings.name}"}
        status, body = await t.request("GET", t.leases_url, params=params, own=True)
        if status != 200:
            raise failure(status, body, "GET", "leases", t.where)
        now = anyio.current_time()
        leases = [item for item in body.get("items") or [] if isinstance(item, dict)]
        prefix = t.settings.lease(0)[:-16]
        live = {session_of(lease, prefix) for lease in leases}
        dead = set()
        for name, version in self._observer.observe(leases, now):
            session = int(name[len(prefix) :], 16)
            if session == self._session():
                continue  # our own: the renew loop finds out
            if await self._delete_lease(name, version):
                dead.add(session)
        dead |= registered - live - {self._session()}
        if dead:
            log.info("reaping Kubernetes sessions %s", ", ".join(f"{s:x}" for s in sorted(dead)))
            await self._store.clear(dead)
            self.reaped += len(dead)

    async def _delete_lease(self, name: str, version: str) -> bool:
        """Delete a Lease if it is still at ``version``: True if it is gone."""
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"resourceVersion": version},
        }
        t = self._transport
        status, reply = await t.request("DELETE", f"{t.leases_url}/{name}", body, own=True)
        if status in (200, 202, 404):
            return True
        if status == 409:  # renewed meanwhile: alive
            return False
        raise failure(status, reply, "DELETE", "leases", t.where)
