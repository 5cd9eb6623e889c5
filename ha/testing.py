"""Helpers for testing code that uses `ha`, and the checker of the safety properties.

``Recorder`` is a contender that records what it is told in a shared ``History``;
``check_history`` verifies ARCHITECTURE.md's safety properties on it. Times are
``time.monotonic()``, one clock for every process of a machine, so histories recorded by
several processes can be merged and checked together.

``faults(driver)`` injects the faults a coordination client meets (crash, expire,
disconnect/reconnect, partition/heal, freeze/thaw, fail_next) into one started driver, with
one spelling on every backend, as kazoo's ``KazooTestHarness.expire_session`` and
``lose_connection`` do for ZooKeeper. A fault a backend cannot inject raises
``UnsupportedFault`` naming both; nothing is skipped silently.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from .election.journal import Transition
from .election.lease import Lease
from .election.machine import LEGAL, State
from .election.names import decode_breadcrumb

if TYPE_CHECKING:
    from .drivers._faults import FaultHooks
    from .drivers.base import Driver

__all__ = (
    "Event",
    "Faults",
    "History",
    "Recorder",
    "SafetyViolation",
    "UnsupportedFault",
    "check_history",
    "faults",
)


class SafetyViolation(AssertionError):
    """A safety property of ARCHITECTURE.md does not hold in a recorded history."""


@dataclass(frozen=True, slots=True)
class Event:
    t: float
    identity: str
    # start, stop, fence, transition, quit (asked to quit without a fence: the test records
    # it; after a lost contact a quit changes no state), expire (a forced expiry of its session)
    kind: str
    epoch: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "t": self.t,
                "identity": self.identity,
                "kind": self.kind,
                "epoch": self.epoch,
                "detail": self.detail,
            }
        )

    @classmethod
    def from_json(cls, line: str) -> Event:
        d = json.loads(line)
        return cls(d["t"], d["identity"], d["kind"], d["epoch"], d["detail"])


class History:
    """An append-only list of events (of one process, or merged from many)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, identity: str, kind: str, epoch: int | None = None, **detail: Any) -> None:
        self.events.append(Event(time.monotonic(), identity, kind, epoch, detail))

    def transition(self, t: Transition) -> None:
        self.add(t.identity, "transition", t.epoch, old=t.old.value, new=t.new.value, cause=t.cause)

    def merge(self, events: list[Event]) -> None:
        self.events.extend(events)
        self.events.sort(key=lambda e: e.t)


class Recorder:
    """A contender that records its calls. Knobs make its hooks fail, for fault tests."""

    def __init__(self, identity: str, history: History) -> None:
        self.identity = identity
        self.history = history
        self.refuse_fence = 0  # refuse the next n fence requests
        self.fail_active = 0  # raise in the next n become_active calls
        self.hang_hooks = False  # standby/neutral hooks hang (to test hook timeouts)
        self.leases: list[Lease] = []

    async def become_active(self, lease: Lease) -> None:
        self.leases.append(lease)
        self.history.add(self.identity, "start", lease.epoch)
        try:
            if self.fail_active > 0:
                self.fail_active -= 1
                raise RuntimeError("injected failure in become_active")
            await anyio.sleep_forever()
        finally:
            self.history.add(self.identity, "stop", lease.epoch)

    async def fence_old_active(self, breadcrumb: bytes) -> None:
        # recorded with the old leader's identity and its token (the breadcrumb's epoch; None
        # when unreadable): check_history matches them with the previous leader's
        crumb = decode_breadcrumb(breadcrumb)
        old = crumb.identity.decode(errors="replace") if crumb else None
        self.history.add(
            self.identity, "fence", crumb.epoch if crumb else None, old=old, raw=breadcrumb.hex()
        )
        if self.refuse_fence > 0:
            self.refuse_fence -= 1
            raise RuntimeError("injected: fencing refused")

    async def become_standby(self) -> None:
        if self.hang_hooks:
            await anyio.sleep_forever()

    async def enter_neutral(self) -> None:
        if self.hang_hooks:
            await anyio.sleep_forever()


_LOST_CONTACT = ("disconnected", "local deadline passed")  # the causes of P10's stops


def check_history(history: History | list[Event]) -> None:
    """Raise SafetyViolation unless properties 1, 2, 3 and 6 hold in the history.

    Epochs are the leaders' tokens (their queue nodes' creation orders): they grow from one
    leader to the next, with gaps. A leader that lost contact and came back within its
    session keeps its node, so the same identity may be made active again with its epoch;
    another identity never may, and an epoch below a newer leader's never comes back.
    A leader quits gracefully (property 2) by a transition out of ACTIVE caused by "quit", or
    by a "quit" event (the test records it when it calls ``quit()`` without a fence) and a
    term stopped on a lost contact, in either order: the quit may be recorded before the
    machine has seen the lost contact. It resigns its node and breadcrumb then too (P13).
    """
    events = sorted(history.events if isinstance(history, History) else history, key=lambda e: e.t)
    # epoch -> (identity, time) of the first report to ACTIVE with that epoch
    owners: dict[int, tuple[str, float]] = {}
    last_state: dict[str, State] = {}
    # identities whose term last stopped on a lost contact, their node kept (P10)
    contact_lost: set[str] = set()
    quitting: set[str] = set()  # identities asked to quit while ACTIVE (no fence)
    starts: list[Event] = []
    stops: dict[tuple[str, int], list[float]] = defaultdict(list)
    fences: dict[str, list[Event]] = defaultdict(list)
    graceful: dict[int, float] = {}  # epoch -> time its active quit without fence
    forced: dict[str, list[float]] = defaultdict(list)  # identity -> forced expiry times
    # identity -> times its process died: its work ended with it (a test that crashes a driver
    # in-process records this first, then cancels the work: the others may act in between)
    crashed: dict[str, list[float]] = defaultdict(list)

    def quit_gracefully(e: Event) -> None:
        """The latest epoch of ``e.identity`` needs no fence: it resigns (machine.py, P13)."""
        epoch = max((ep for ep, (who, _) in owners.items() if who == e.identity), default=None)
        if epoch is not None:
            graceful.setdefault(epoch, e.t)

    for e in events:
        if e.kind == "transition":
            old, new = State(e.detail["old"]), State(e.detail["new"])
            was = last_state.get(e.identity, State.NEUTRAL)
            if was is not old:
                raise SafetyViolation(f"{e.identity}: transition from {old} but was {was}")
            if (old, new) not in LEGAL:
                raise SafetyViolation(f"{e.identity}: illegal transition {old} -> {new}")
            last_state[e.identity] = new
            if old is State.ACTIVE and e.detail["cause"] in _LOST_CONTACT:
                contact_lost.add(e.identity)
            else:
                contact_lost.discard(e.identity)
            if new is State.ACTIVE:
                assert e.epoch is not None
                owner = owners.get(e.epoch)
                if owner is not None and owner[0] != e.identity:  # property 1
                    raise SafetyViolation(
                        f"epoch {e.epoch} made active twice: {owner[0]} and {e.identity}"
                    )
                if owners and e.epoch < max(owners):
                    raise SafetyViolation(f"epoch {e.epoch} of {e.identity} does not increase")
                owners.setdefault(e.epoch, (e.identity, e.t))
            if old is State.ACTIVE:
                cause = e.detail["cause"]
                if cause == "quit" or (cause in _LOST_CONTACT and e.identity in quitting):
                    quit_gracefully(e)
                quitting.discard(e.identity)
        elif e.kind == "quit" and e.identity in contact_lost:
            # its term stopped on a lost contact, its node kept: the quit resigns it too
            quit_gracefully(e)
        elif e.kind == "quit" and last_state.get(e.identity) is State.ACTIVE:
            quitting.add(e.identity)  # graceful once its term stops (above)
        elif e.kind == "start":
            starts.append(e)
        elif e.kind == "stop":
            assert e.epoch is not None
            stops[(e.identity, e.epoch)].append(e.t)
        elif e.kind == "fence":
            fences[e.identity].append(e)
        elif e.kind == "expire":
            forced[e.identity].append(e.t)
        elif e.kind == "crash":
            crashed[e.identity].append(e.t)

    for s in starts:
        assert s.epoch is not None
        owner = owners.get(s.epoch)
        if owner is None or owner[0] != s.identity:
            raise SafetyViolation(f"{s.identity} started work with epoch {s.epoch} it never won")
        # property 2: the previous leader (the owner of the greatest epoch below this one) was
        # fenced by this starter, naming it with that epoch, or quit gracefully before
        prev_epoch = max((ep for ep in owners if ep < s.epoch), default=None)
        if prev_epoch is not None and owners[prev_epoch][0] != s.identity:
            holder = owners[prev_epoch][0]
            fenced = any(
                f.t <= s.t and f.epoch == prev_epoch and f.detail.get("old") == holder
                for f in fences[s.identity]
            )
            if not fenced and not (prev_epoch in graceful and graceful[prev_epoch] <= s.t):
                raise SafetyViolation(
                    f"{s.identity} started epoch {s.epoch} without fencing {holder} "
                    f"(epoch {prev_epoch})"
                )
        # property 3: every earlier leadership scope of others had stopped, unless their
        # session was expired by force (then only fencing protects, checked above)
        for other in starts:
            assert other.epoch is not None
            if other.epoch >= s.epoch or other.identity == s.identity or other.t > s.t:
                continue
            # that scope's stop: the first stop of its identity and epoch after its start
            ends = (*stops[(other.identity, other.epoch)], *crashed[other.identity])
            stopped = min((t for t in ends if t >= other.t), default=None)
            if stopped is not None and stopped <= s.t:
                continue
            if any(other.t <= t <= s.t for t in forced[other.identity]):
                continue
            raise SafetyViolation(
                f"{s.identity} started epoch {s.epoch} while {other.identity} still ran "
                f"epoch {other.epoch}"
            )


# --- faults -------------------------------------------------------------------------------------


class UnsupportedFault(Exception):
    """This backend cannot inject this fault; the message names both and says why."""

    def __init__(self, backend: str, fault: str, why: str) -> None:
        super().__init__(f"{backend} cannot {fault}: {why}")
        self.backend = backend
        self.fault = fault


class Faults:
    """The faults of one driver's client, from ``faults(driver)``; the driver must be started.

    The methods that wait for the backend (``crash``, ``expire``) are coroutines; the others
    only set or lift a condition in the client, take effect at once and never block. What the
    driver's user sees (connection events, errors, ephemeral nodes) is said for each fault
    and backend. Backends: memory (a ``MemoryCluster`` of this process), sqlite (a file of
    this host), zookeeper (kazoo against a real server).
    """

    def __init__(self, driver: Driver, hooks: FaultHooks) -> None:
        self.driver = driver
        self.backend = hooks.backend
        self.cannot = hooks.cannot  # fault -> why this backend cannot inject it
        self._hooks = hooks

    def _able(self, fault: str) -> FaultHooks:
        why = self.cannot.get(fault)
        if why is not None:
            raise UnsupportedFault(self.backend, fault, why)
        return self._hooks

    async def crash(self) -> None:
        """The client dies without a goodbye, as a killed process does; there is no undo.

        The driver emits no more events and every later operation raises ``ConnectionLost``;
        only ``aclose()`` remains. The session outlives it until the backend ends it: memory
        and zookeeper when its timeout runs out after the last heartbeat; sqlite as soon as
        another driver's poll finds the session's kernel lock free (the process is gone), or
        when its lease runs out if no other driver polls. Its ephemeral nodes go then.
        Returns once the client has stopped: at once (memory), when the renewer and poller
        have stopped (sqlite), when kazoo's threads have ended (zookeeper).
        """
        await self._able("crash").crash()

    async def expire(self) -> None:
        """The backend ends the session now, as when its timeout ran out unseen.

        Returns once the session is gone on the backend: its ephemeral nodes are deleted
        (other sessions see them go, with DELETED events for their watches). The driver learns
        it from the backend: EXPIRED, then CONNECTED with a new session; an operation in the
        meantime may raise ``SessionExpired``. Memory tells it at once; sqlite at its next
        poll (``poll_interval``); zookeeper at its next contact, after a DISCONNECTED.
        Raises ``RuntimeError`` if the driver has no session now (not started, or between
        two sessions).
        """
        hooks = self._able("expire")
        if self.driver.session_id is None:
            raise RuntimeError(f"the {self.backend} driver has no session to expire")
        await hooks.expire()

    def disconnect(self) -> None:
        """The connection drops and the client knows it: DISCONNECTED at once; until
        ``reconnect()`` the client makes no contact, so the session ages on the server and
        expires after its timeout (then EXPIRED and a new session once reconnected).

        Operations raise ``ConnectionLost``: at once on memory; on zookeeper they wait for the
        connection (kazoo queues them) up to the op timeout. sqlite has no connection.
        """
        self._able("disconnect").disconnect()

    def reconnect(self) -> None:
        """Undo ``disconnect()``: the client connects again at once, RECONNECTED with the same
        session if it did not expire meanwhile."""
        self._able("reconnect").reconnect()

    def partition(self) -> None:
        """The network between client and server is cut silently: nothing tells the client,
        which reports DISCONNECTED only when its heartbeats go unanswered (two thirds of the
        session timeout), while the server expires the session after its timeout. Operations
        raise ``ConnectionLost``. Memory only: sqlite has no network, and kazoo's socket
        cannot be silenced from inside (put ``tests/support/faultproxy.py`` or a firewall
        between a zookeeper driver and its server)."""
        self._able("partition").partition()

    def heal(self) -> None:
        """Undo ``partition()``: heartbeats are answered again (RECONNECTED, or EXPIRED and a
        new session if the server expired it meanwhile)."""
        self._able("heal").heal()

    def freeze(self) -> None:
        """The client stalls: every operation waits, without error, until ``thaw()``.

        Memory: only operations wait; heartbeats go on, the session lives and stays connected.
        zookeeper: every request waits, the driver's own syncs too, so ``last_contact`` stops
        advancing, while kazoo's pings keep the session alive. sqlite: every access to the
        file waits, renewals and polls too (a stalled disk): no events, no contact; the lease
        runs out after the session timeout, others expire the session, and the driver learns
        it after ``thaw()``.
        """
        self._able("freeze").freeze()

    def thaw(self) -> None:
        """Undo ``freeze()``: the waiting operations go on."""
        self._able("thaw").thaw()

    def fail_next(self, count: int = 1, *, transient: bool = True) -> None:
        """The next ``count`` operations fail before reaching the backend, with
        ``ConnectionLost`` (transient: as a lost reply, or a busy sqlite file) or else
        ``AccessDenied``; the session and the connection are untouched. On zookeeper the
        driver's own periodic syncs count among the operations."""
        self._able("fail_next").fail_next(count, transient=transient)


def faults(driver: Driver) -> Faults:
    """The faults of ``driver``'s client (memory, sqlite, zookeeper, etcd or kubernetes; see
    ``Faults``), from the hooks its ``_faults()`` returns.

    ``UnsupportedFault`` for a driver of another backend, whose faults ha.testing cannot reach.
    """
    hooks: Callable[[], FaultHooks] | None = getattr(driver, "_faults", None)
    if hooks is None:
        name = driver.capabilities.name
        raise UnsupportedFault(name, "inject faults", f"ha.testing knows no faults of {driver!r}")
    return Faults(driver, hooks())
