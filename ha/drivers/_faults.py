"""Test faults, kept beside a driver's transport and out of its request paths.

``FaultGate``: one per transport, owned by it. It holds the conditions a test sets (requests
frozen, errors queued, the connection cut, the network silent, the process dead) and is inert
until a test sets one: only then does it *arm*, calling the transport back once so that the
transport swaps its request functions for gated ones. A driver no test touched never calls
into its gate (``tests/drivers/test_fault_gate.py`` shows it), and its request paths and watch
loops read no fault flag.

``FaultHooks``: what each driver's ``_faults()`` returns and ``ha.testing.faults(driver)``
wraps, with one spelling on every backend; ``cannot`` names the faults a backend cannot
inject, and why (their methods are never called).

``ClientFaults``: the hooks of a driver whose client keeps its session by renewing a lease
(etcd, Kubernetes), written once over the gate and the callbacks the driver hands it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

import anyio

from ..errors import AccessDenied, ConnectionLost, HAError
from ._renewal import Renewal

__all__ = ("ClientFaults", "FaultGate", "FaultHooks")


class FaultHooks(Protocol):
    """The faults of one driver's client (their meaning: ``ha.testing.Faults``)."""

    backend: str
    cannot: Mapping[str, str]  # fault -> why this backend cannot inject it

    async def crash(self) -> None: ...

    async def expire(self) -> None: ...

    def disconnect(self) -> None: ...

    def reconnect(self) -> None: ...

    def partition(self) -> None: ...

    def heal(self) -> None: ...

    def freeze(self) -> None: ...

    def thaw(self) -> None: ...

    def fail_next(self, count: int = 1, *, transient: bool = True) -> None: ...


class FaultGate:
    """A transport's test faults; ``arm`` is the transport's, called once, by the first."""

    __slots__ = ("_arm", "_errors", "_frozen", "_silence", "armed", "backend", "cut", "dead")

    def __init__(self, backend: str, arm: Callable[[], None]) -> None:
        self.backend = backend
        self._arm = arm
        self.armed = False
        self._frozen: anyio.Event | None = None
        self._errors: list[HAError] = []
        self.cut = False  # the connection dropped (disconnect)
        self._silence: anyio.Event | None = None  # the network silent until set (partition)
        self.dead = False  # the process gone (crash): for good

    def _arming(self) -> None:
        if not self.armed:
            self.armed = True
            self._arm()

    # --- set by a test (through the driver's FaultHooks) -------------------------------------

    def freeze(self) -> None:
        self._arming()
        if self._frozen is None:
            self._frozen = anyio.Event()

    def thaw(self) -> None:
        if self._frozen is not None:
            self._frozen.set()
            self._frozen = None

    def fail_next(
        self,
        count: int,
        *,
        transient: bool,
        lost: str = "injected fault",
        denied: str = "injected fatal fault",
    ) -> None:
        """The next ``count`` operations raise ConnectionLost(lost), or AccessDenied(denied) if
        not transient."""
        self._arming()
        for _ in range(count):
            self._errors.append(ConnectionLost(lost) if transient else AccessDenied(denied))

    def disconnect(self) -> None:
        self._arming()
        self.cut = True

    def reconnect(self) -> None:
        self.cut = False

    def partition(self) -> bool:
        """Silence the network; False if it already was."""
        self._arming()
        if self._silence is not None:
            return False
        self._silence = anyio.Event()
        return True

    def heal(self) -> None:
        silence, self._silence = self._silence, None
        if silence is not None:
            silence.set()  # the requests held up go on

    def kill(self) -> None:
        self._arming()
        self.dead = True

    # --- called only by the gated request functions of an armed transport --------------------

    async def admit(self) -> None:
        """An operation's turn (not the session's own requests): wait while frozen, then
        raise the first queued error, if any."""
        await self.thawed()
        self.raise_queued()

    async def thawed(self) -> None:
        """Return once no freeze holds requests (at once if none does)."""
        while self._frozen is not None:
            await self._frozen.wait()

    def raise_queued(self) -> None:
        """Raise the first error still queued, if any."""
        if self._errors:
            raise self._errors.pop(0)

    async def passage(self, within: float) -> None:
        """A request's way through the network: ConnectionLost at once if cut or dead; while
        silent, no reply until healed, ConnectionLost after ``within``."""
        self.stream()
        silence = self._silence
        if silence is not None:
            with anyio.move_on_after(within):
                await silence.wait()
            if not silence.is_set():
                raise ConnectionLost(f"no reply from {self.backend} within {within:g} s")

    def stream(self) -> None:
        """A watch stream's opening: ConnectionLost at once if cut, silent or dead (a silent
        stream would hear nothing; its loop tries again)."""
        if self.dead:
            raise ConnectionLost(f"the {self.backend} driver is not started (or closed)")
        if self.cut:
            raise ConnectionLost(f"the {self.backend} driver is disconnected")
        if self._silence is not None and not self._silence.is_set():
            raise ConnectionLost(f"the {self.backend} network is silent")


class ClientFaults:
    """The faults of a client that renews its session (etcd, Kubernetes), over the gate of its
    transport. All act in the client, as a network or a process fault would, except
    ``expire``, the backend's own (``expire`` here: ending the session from the server's side).

    ``backend``: its name in ``ha.testing`` (the capabilities' name); ``session``: the
    session's states; ``started``: whether the driver runs; ``restart_watch``: end the watch
    stream; ``stop``: stop the background tasks (the driver is dead)."""

    cannot: Mapping[str, str] = {}

    def __init__(
        self,
        backend: str,
        gate: FaultGate,
        session: Renewal,
        *,
        started: Callable[[], bool],
        restart_watch: Callable[[], None],
        stop: Callable[[], Awaitable[None]],
        expire: Callable[[], Awaitable[None]],
    ) -> None:
        self.backend = backend
        self.gate = gate
        self.session = session
        self.started = started
        self.restart_watch = restart_watch
        self.stop = stop
        self.end_session = expire

    async def expire(self) -> None:
        await self.end_session()

    def fail_next(self, count: int = 1, *, transient: bool = True) -> None:
        """The next ``count`` node operations fail before reaching the server, with
        ``ConnectionLost`` or, if not transient, ``AccessDenied``; renewals go on."""
        self.gate.fail_next(count, transient=transient)

    def freeze(self) -> None:
        """Every node operation waits until ``thaw()``; renewals and the watch go on, so the
        session lives (a stalled caller, not a stalled client)."""
        self.gate.freeze()

    def thaw(self) -> None:
        self.gate.thaw()

    def disconnect(self) -> None:
        """The connection drops now (DISCONNECTED at once): every request fails at once and
        the watch stops until ``reconnect()``; the session ages on the server."""
        if not self.started():
            raise ConnectionLost(f"the {self.gate.backend} driver is not started (or closed)")
        self.gate.disconnect()
        self.restart_watch()
        self.session.lost_contact()

    def reconnect(self) -> None:
        self.gate.reconnect()
        self.session.wake()

    def partition(self) -> None:
        """The network goes silent: requests get no answer (each fails when its time is up)
        and the watch hears nothing, until ``heal()``. The driver notices when its renewals
        go unanswered."""
        if self.gate.partition():
            self.restart_watch()

    def heal(self) -> None:
        self.gate.heal()
        self.session.wake()

    async def crash(self) -> None:
        """Die without a goodbye, as a killed process does: no more renewals, no events,
        every request raises ``ConnectionLost``; the session stays on the server until it
        expires there. Returns once the background tasks have stopped."""
        if not self.started() or self.gate.dead:
            return
        self.gate.kill()
        self.session.connected = False  # nothing said: a dead process tells no one
        await self.stop()
