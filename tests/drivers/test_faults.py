"""``ha.testing.faults`` on every backend: each fault has its documented effect, seen through
the Driver API (connection events, errors, another session's view of an ephemeral node), and a
fault a backend cannot inject raises ``UnsupportedFault`` naming the backend and the fault.

Every test runs on memory, sqlite and zookeeper (the ``backend`` fixture), under asyncio and
trio. A fault the backend cannot inject is still a test on it: that the call refuses loudly.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio
import pytest

from ha.drivers.base import ConnectionEvent, Driver
from ha.drivers.base import ConnectionState as S
from ha.errors import AccessDenied, ConnectionLost
from ha.testing import Faults, UnsupportedFault, faults

pytestmark = pytest.mark.anyio

TIMEOUT = 1.0  # the session timeout of the drivers under test
ALL = ("crash", "expire", "disconnect", "reconnect", "partition", "heal", "freeze", "thaw")
SUPPORTED = {
    "memory": set(ALL) | {"fail_next"},
    "sqlite": {"crash", "expire", "freeze", "thaw", "fail_next"},
    "zookeeper": {"crash", "expire", "disconnect", "reconnect", "freeze", "thaw", "fail_next"},
    "etcd": set(ALL) | {"fail_next"},
    "kubernetes": set(ALL) | {"fail_next"},
}


class Events:
    """The connection events of one driver, in order."""

    def __init__(self) -> None:
        self.log: list[ConnectionEvent] = []

    def __call__(self, event: ConnectionEvent) -> None:
        self.log.append(event)

    async def wait(self, state: S, after: int = 0, within: float = 10.0) -> ConnectionEvent:
        """The first event in ``state`` from index ``after`` on (a hang guard, not a latency check)."""
        with anyio.fail_after(within):
            while True:
                for event in self.log[after:]:
                    if event.state is state:
                        return event
                await anyio.sleep(0.005)


@asynccontextmanager
async def pair(
    backend: Any, session_timeout: float = TIMEOUT
) -> AsyncIterator[tuple[Driver, Driver, Events]]:
    """``a``, whose faults are injected and whose connection events are recorded, holding an
    ephemeral node ``/e``; and ``b``, a bystander session on the same backend."""
    a = backend.driver(session_timeout=session_timeout)
    events = Events()
    a.subscribe(None, events)
    async with a, backend.driver(session_timeout=session_timeout) as b:
        await a.create("/e", b"a", ephemeral=True)
        yield a, b, events


async def refused(backend: Any, f: Faults, *names: str) -> bool:
    """If the backend cannot inject ``names[0]``: check that each of ``names`` raises
    ``UnsupportedFault`` naming the backend and the fault, and return True."""
    if names[0] in SUPPORTED[backend.name]:
        return False
    for name in names:
        with pytest.raises(UnsupportedFault, match=f"^{backend.name} cannot {name}: ") as info:
            result = getattr(f, name)()
            if inspect.isawaitable(result):
                await result
        assert (info.value.backend, info.value.fault) == (backend.name, name)
    return True


async def wait_gone(driver: Driver, path: str, within: float = TIMEOUT * 3 + 5) -> None:
    """Until ``path`` is gone, as the bystander ``driver`` sees it. A read of the bystander
    that times out on a loaded machine (its short sessions give it 0.5 s on etcd) is tried
    again: what is waited for is the server's expiry, not the bystander's speed."""
    with anyio.fail_after(within):
        while True:
            try:
                if await driver.exists(path) is None:
                    return
            except ConnectionLost:
                pass
            await anyio.sleep(0.01)


async def test_crash(backend: Any) -> None:
    async with pair(backend) as (a, b, events):
        f = faults(a)
        if await refused(backend, f, "crash"):
            return
        await f.crash()
        mark = len(events.log)
        with pytest.raises(ConnectionLost):
            await a.exists("/")
        if backend.name != "sqlite":  # sqlite's pollers see the process gone at once
            assert await b.exists("/e") is not None  # the session outlives its client
        await wait_gone(b, "/e")  # ... until the backend ends it
        assert events.log[mark:] == []  # a dead client reports nothing


async def test_expire(backend: Any) -> None:
    async with pair(backend) as (a, b, events):
        f = faults(a)
        if await refused(backend, f, "expire"):
            return
        old = a.session_id
        await f.expire()
        assert await b.exists("/e") is None  # gone when expire() returns
        expired = await events.wait(S.EXPIRED)
        assert expired.session_id == old
        new = await events.wait(S.CONNECTED, after=events.log.index(expired))
        assert new.session_id not in (None, old)
        await a.create("/e", b"again", ephemeral=True)
        assert (await b.get("/e"))[0] == b"again"


async def test_expire_without_a_session_raises(backend: Any) -> None:
    with pytest.raises(RuntimeError, match="no session to expire"):
        await faults(backend.driver()).expire()


async def test_disconnect_then_reconnect_keeps_the_session(backend: Any) -> None:
    async with pair(backend) as (a, b, events):
        f = faults(a)
        if await refused(backend, f, "disconnect", "reconnect"):
            return
        sid, mark = a.session_id, len(events.log)
        f.disconnect()
        assert not a.connected
        assert events.log[mark:] == [ConnectionEvent(S.DISCONNECTED, sid)]  # at once
        assert await b.exists("/e") is not None  # the server still keeps the session
        f.reconnect()
        assert (await events.wait(S.RECONNECTED, after=mark)).session_id == sid
        assert (await a.get("/e"))[0] == b"a"


async def test_disconnect_past_the_session_timeout_expires(backend: Any) -> None:
    async with pair(backend) as (a, b, events):
        f = faults(a)
        if await refused(backend, f, "disconnect"):
            return
        sid, mark = a.session_id, len(events.log)
        f.disconnect()
        with pytest.raises(ConnectionLost), anyio.fail_after(TIMEOUT + 5):
            await a.exists("/")  # at once on memory; zookeeper after its op timeout
        await wait_gone(b, "/e")  # the session aged out on the server
        f.reconnect()
        expired = await events.wait(S.EXPIRED, after=mark)
        assert expired.session_id == sid
        new = await events.wait(S.CONNECTED, after=events.log.index(expired))
        assert new.session_id not in (None, sid)


async def test_partition_is_noticed_late_and_heal_reconnects(backend: Any) -> None:
    # a longer session: the loss is noticed at 2/3 of it, and heal() must come before it ends
    async with pair(backend, session_timeout=2.0) as (a, b, events):
        f = faults(a)
        if await refused(backend, f, "partition", "heal"):
            return
        sid, mark = a.session_id, len(events.log)
        f.partition()
        assert a.connected  # nothing tells the client yet
        with pytest.raises(ConnectionLost):
            await a.exists("/")
        await events.wait(S.DISCONNECTED, after=mark)  # its heartbeats went unanswered
        f.heal()
        assert (await events.wait(S.RECONNECTED, after=mark)).session_id == sid
        assert await b.exists("/e") is not None


async def test_freeze_holds_operations_until_thaw(backend: Any) -> None:
    async with pair(backend) as (a, b, events):
        f = faults(a)
        if await refused(backend, f, "freeze", "thaw"):
            return
        got: list[bytes] = []
        f.freeze()
        try:
            async with anyio.create_task_group() as tg:

                async def read() -> None:
                    got.append((await a.get("/e"))[0])

                tg.start_soon(read)
                await anyio.sleep(0.2)
                assert got == []  # waiting, without an error
                f.thaw()
        finally:
            f.thaw()
        assert got == [b"a"]


async def test_freeze_past_the_session_timeout(backend: Any) -> None:
    async with pair(backend) as (a, b, events):
        f = faults(a)
        if await refused(backend, f, "freeze"):
            return
        sid, mark = a.session_id, len(events.log)
        f.freeze()
        try:
            if backend.name == "sqlite":  # renewals wait too: the lease runs out
                await wait_gone(b, "/e")
            else:  # heartbeats go on: the session lives
                await anyio.sleep(TIMEOUT * 1.5)
                assert await b.exists("/e") is not None
        finally:
            f.thaw()
        if backend.name == "sqlite":
            expired = await events.wait(S.EXPIRED, after=mark)
            assert expired.session_id == sid
            assert (await events.wait(S.CONNECTED, after=mark)).session_id not in (None, sid)
        else:
            assert (await a.get("/e"))[0] == b"a"
            assert a.session_id == sid and a.connected
            assert [e for e in events.log[mark:] if e.state is S.EXPIRED] == []


async def test_fail_next(backend: Any) -> None:
    async with pair(backend) as (a, b, events):
        f = faults(a)
        sid, mark = a.session_id, len(events.log)
        f.fail_next(2)
        for _ in range(2):
            with pytest.raises(ConnectionLost, match="injected"):
                await a.exists("/e")
        f.fail_next(transient=False)
        with pytest.raises(AccessDenied, match="injected"):
            await a.set("/e", b"x")
        assert (await a.get("/e"))[0] == b"a"  # the failed set never reached the backend
        assert a.session_id == sid and a.connected and events.log[mark:] == []


def test_a_driver_of_another_backend_is_refused() -> None:
    class Elsewhere:
        capabilities = type("Caps", (), {"name": "etcd"})()

    with pytest.raises(UnsupportedFault, match="^etcd cannot inject faults: "):
        faults(cast(Driver, Elsewhere()))
