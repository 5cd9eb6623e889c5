"""Other sessions' leases, for ``ha status``: how long ago each was last renewed, and when the
backend ends it unless renewed (``Driver.session_lease``).

Display only, never a safety input. A backend that cannot tell (ZooKeeper: no client sees
another session's pings) declares it (``capabilities.session_leases``), and status says n/a.
A session that stopped renewing (a stopped or dead process on another host) shows a "renewed
ago" growing past its renew interval before its session expires.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..drivers.base import Driver, SessionLease

__all__ = ("NOT_TOLD", "lease_json", "read_leases")

# why a backend shows no lease (printed after "n/a")
NOT_TOLD = "the backend tells no other session's last renewal"


async def read_leases(driver: Driver, sessions: Iterable[int | None]) -> dict[int, SessionLease]:
    """The lease of each session the backend still has (one read each); {} when the backend
    cannot tell."""
    if not driver.capabilities.session_leases:
        return {}
    found = {}
    for session in dict.fromkeys(s for s in sessions if s is not None):
        lease = await driver.session_lease(session)
        if lease is not None:
            found[session] = lease
    return found


def lease_json(lease: SessionLease | None) -> dict[str, Any] | None:
    if lease is None:
        return None
    return {
        "renewed_ago": round(lease.renewed_ago, 3),
        "expires_in": round(lease.expires_in, 3),
        "duration": lease.duration,
    }
