"""The driver contract, continued: ``Driver.session_lease``, another session's lease as the
backend knows it (what ``ha status`` shows as "renewed ... ago" and "expires in").

Every backend runs it (the ``backend`` fixture, asyncio and trio). A backend that cannot tell
says so in its capabilities (``session_leases=False``) and answers None; the others answer for
a live session, never for an ended one. Times are checked as relations (a silent session's
"renewed ago" is at least the time it has been silent), never as upper bounds.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from ha.drivers.base import SessionLease
from tests.support.contact import Contact, contact

__all__ = ("contact",)  # a fixture

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

TIMEOUT = 2.0  # the watched session's timeout: longer than SILENT, whole seconds for etcd
SILENT = 0.3  # how long it is cut off before its lease is read again


async def test_another_sessions_lease(backend: Any, contact: Contact) -> None:
    can_tell = type(backend.driver()).capabilities.session_leases
    async with backend.driver(session_timeout=TIMEOUT) as other, backend.driver() as observer:
        session = other.session_id
        assert session is not None
        lease = await observer.session_lease(session)
        if not can_tell:  # ZooKeeper: no client sees another session's last ping
            assert lease is None
            return
        assert isinstance(lease, SessionLease)
        assert lease.duration >= TIMEOUT  # as asked for, or as the backend rounded it up
        assert lease.renewed_ago >= 0 and lease.expires_in <= lease.duration
        assert lease.renewed_ago + lease.expires_in == pytest.approx(lease.duration)
        contact.cut(other)
        try:
            await anyio.sleep(SILENT)
            silent = await observer.session_lease(session)
        finally:
            contact.restore(other)
        assert silent is not None  # not yet expired: SILENT < TIMEOUT
        assert silent.renewed_ago >= SILENT
        assert silent.expires_in <= lease.duration - SILENT
        assert await observer.session_lease(0x7FFF_FFFF_FFFF_0001) is None  # no such session
    async with backend.driver() as observer:
        assert await observer.session_lease(session) is None  # closed: its lease is gone
