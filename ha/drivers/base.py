"""The driver protocol: the small coordination model every backend offers.

Every backend (memory, sqlite, ZooKeeper, etcd, Kubernetes) gives the layers above it the same
ZooKeeper-shaped model, and nothing more:

- one **session** at a time, with a timeout. While the session lives, its ephemeral nodes live.
  The backend ends a session that has not been heard from for ``session_timeout`` seconds and
  deletes its ephemeral nodes; the driver then reports ``EXPIRED`` and opens a new session on its
  own (``CONNECTED`` with a new id). Lease-based backends implement sessions with leases.
- a tree of **nodes** named by absolute paths (``/a/b``), each holding bytes and a **version**
  that starts at 0 and grows by one on every write. A node is persistent or ephemeral (bound to
  the session that created it; ``Stat.ephemeral_owner`` names that session).
- **sequential creates**: ``create(path, sequential=True)`` (or ``Create(..., sequential=True)``)
  appends a counter to the path's last segment, as ZooKeeper does: at least 10 decimal digits,
  zero-padded (``/e/n/abc_`` -> ``/e/n/abc_0000000007``), and returns the path it created. The
  suffix is greater than every suffix the same parent gave before (not necessarily the next
  one) and never comes back while the parent lives, so it never collides with an earlier node.
- **creation order**: ``Stat.created`` is the number of the transaction that created the node:
  every transaction that creates nodes gets a number greater than any earlier one's in the
  backend, and all nodes created by one transaction share it (ZooKeeper's czxid, etcd's
  create_revision). A node deleted and created again gets a new, greater number; writing it
  leaves the number unchanged. A node's number is thus a fencing token fixed at its creation.
- **compare-and-set**: ``set`` and ``delete`` take an expected version (``-1``: any).
- **transactions**: a list of ``Check`` / ``Create`` / ``SetData`` / ``Delete`` applied
  atomically, all or nothing; a failure raises ``TransactionFailed`` naming the first failing op.
- **events**: connection events (``ConnectionEvent``) and node events (``NodeEvent``) for
  subscribed paths, delivered by calling the subscriber's callback on the event loop's thread,
  in the order of the backend's writes across paths too (a standby that hears of a pause
  before its leader's exit must not take the lead: it acts on that order).

Timing assumption (written once, here): the backend expires a session no earlier than
``session_timeout`` after the last contact it had from the client, and ``last_contact`` is a
time on this process's monotonic clock (``anyio.current_time()``) never later than the
backend's own view of that contact: the time the request was *sent* (or a reading the backend
itself took), not the time its reply arrived, since a slow reply would otherwise eat into the
margin. Hence an active that stops acting at ``last_contact + d`` with ``d < session_timeout``
stops before the backend can hand its lock to anyone else, whatever the clock offsets between
machines (only clock rates matter, and they are assumed equal within a small drift).

Errors: every method raises only errors of ``ha.errors``. ``ConnectionLost`` (transient) means
the outcome is unknown; ``SessionExpired`` means ephemeral state is gone; ``AccessDenied`` and
``CorruptData`` are not transient.
"""

from __future__ import annotations

import enum
import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from ..errors import ConfigurationError

__all__ = (
    "Capabilities",
    "Check",
    "ConnectionEvent",
    "ConnectionState",
    "Create",
    "Delete",
    "Driver",
    "DriverEvent",
    "NodeEvent",
    "NodeEventKind",
    "Op",
    "SessionKind",
    "SessionLease",
    "SetData",
    "Stat",
    "Subscription",
    "TreeSize",
    "post_order",
    "validate_path",
)

log = logging.getLogger("ha.drivers")


def validate_path(path: str) -> str:
    """Return ``path`` if it is a well-formed absolute node path, else raise ConfigurationError."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise ConfigurationError(f"node path must be absolute (start with '/'): {path!r}")
    if path != "/" and (path.endswith("/") or "//" in path):
        raise ConfigurationError(f"node path has an empty segment: {path!r}")
    if "\x00" in path:
        raise ConfigurationError(f"node path contains a NUL byte: {path!r}")
    return path


def parent_of(path: str) -> str:
    head = path.rsplit("/", 1)[0]
    return head or "/"


@dataclass(frozen=True, slots=True)
class Stat:
    """What the backend knows of a node besides its data."""

    version: int
    ephemeral_owner: int | None = None
    mtime: float = 0.0  # wall-clock seconds of the last write, for display only
    num_children: int = 0
    created: int = 0  # the creating transaction's number (see the module's docstring)


# --- transaction operations ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Check:
    """The node at ``path`` exists with ``version`` (``-1``: exists at any version)."""

    path: str
    version: int = -1


@dataclass(frozen=True, slots=True)
class Create:
    """A node at ``path``; ``sequential``: at ``path`` plus the parent's next suffix."""

    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True, slots=True)
class SetData:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True, slots=True)
class Delete:
    path: str
    version: int = -1


Op = Check | Create | SetData | Delete

# --- events ---------------------------------------------------------------------------------


class ConnectionState(enum.Enum):
    CONNECTED = "connected"  # a new session is open (first, or after EXPIRED)
    DISCONNECTED = "disconnected"  # contact lost; the session may still live
    RECONNECTED = "reconnected"  # contact back within the same session
    EXPIRED = "expired"  # the session is gone with its ephemeral nodes
    CLOSED = "closed"  # the driver was closed


@dataclass(frozen=True, slots=True)
class ConnectionEvent:
    state: ConnectionState
    session_id: int | None


class NodeEventKind(enum.Enum):
    CREATED = "created"
    CHANGED = "changed"
    DELETED = "deleted"


@dataclass(frozen=True, slots=True)
class NodeEvent:
    path: str
    kind: NodeEventKind


DriverEvent = ConnectionEvent | NodeEvent
Callback = Callable[[Any], None]


class SessionKind(enum.StrEnum):
    """How a backend keeps a session alive."""

    SESSION = "session"  # ZooKeeper-style: the client pings, the backend times the session out
    LEASE = "lease"  # a lease the client renews (sqlite, etcd, Kubernetes)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend offers, declared by each driver (the driver matrix is built from these)."""

    name: str
    cross_process: bool  # sessions in other processes see the same nodes
    cross_host: bool  # ... and on other hosts
    durable: bool  # persistent nodes survive a restart of every client
    push_watches: bool  # node events are pushed by the backend (False: polled)
    sessions: SessionKind
    # the backend tells when another session was last renewed (``Driver.session_lease``)
    session_leases: bool = False


@dataclass(frozen=True, slots=True)
class SessionLease:
    """Another session's lease as the backend knows it, for display (``ha status``).

    Never a safety input: the reading is taken on a clock of the backend's or of another
    process (each driver says which), and may be an estimate. ``renewed_ago`` + ``expires_in``
    is the lease's duration; ``expires_in`` <= 0 means the lease has run out but the session is
    not yet ended (nobody reaped it yet).
    """

    renewed_ago: float  # seconds since the backend last heard a renewal
    expires_in: float  # seconds until the backend may end it, unless renewed
    duration: float  # the lease's length: the session timeout the backend applies


@dataclass(frozen=True, slots=True)
class TreeSize:
    """How full the one backend object that holds a driver's whole tree is, where the backend
    limits that object's size (a Kubernetes ConfigMap: 1 MiB), for display (``ha status``,
    the metrics): a write that would pass ``limit`` is refused, and the election with it."""

    used: int  # bytes, counted as the backend counts them
    limit: int  # bytes the backend accepts in the object
    nodes: int
    where: str  # the object, e.g. "ConfigMap default/ha-ha"

    @property
    def fraction(self) -> float:
        return self.used / self.limit


class Subscription:
    """A registered callback; ``close()`` (or leaving ``with``) removes it. Idempotent."""

    __slots__ = ("_driver", "_key", "_closed", "callback")

    def __init__(self, driver: Driver, key: str | None, callback: Callback) -> None:
        self._driver = driver
        self._key = key
        self._closed = False
        self.callback = callback

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._driver._unsubscribe(self._key, self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Driver(ABC):
    """A connection to one coordination backend, holding at most one session at a time.

    Use as ``async with driver:`` or ``await driver.start()`` / ``await driver.aclose()``, in any
    order among several drivers: a driver's background work (pings, polls) runs in an
    ``ha._background.BackgroundTask``, not in a task group that would impose nesting.
    All methods must be called from the event loop's thread.
    """

    capabilities: Capabilities

    def __init__(self) -> None:
        # per path (None: connection events), its one subscription, or several in order (a
        # dict as an ordered set, so that each of 10,000 electors leaves in O(1)): most paths
        # have one, and a dict per path cost ~230 B
        self._subscribers: dict[str | None, Subscription | dict[Subscription, None]] = {}
        self._session_id: int | None = None
        self._last_contact = -math.inf  # no contact yet
        self._connected = False

    # --- lifecycle --------------------------------------------------------------------------

    @classmethod
    @abstractmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """Build an unstarted driver from its URL; raise ConfigurationError if malformed."""

    @abstractmethod
    async def start(self) -> None:
        """Connect and open a session. Raises ``Unavailable`` after the connect timeout."""

    @abstractmethod
    async def aclose(self) -> None:
        """Close the session (its ephemeral nodes go at once) and release resources. A call
        made while another runs returns once that one has (``_closing.py``)."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # --- session ----------------------------------------------------------------------------
    # Concrete: each driver keeps these four fields up to date and the properties read them.

    _session_timeout: float  # set by the driver: asked for, or as the backend granted it

    @property
    def session_id(self) -> int | None:
        """The current session's id, or None when there is none (closed, or between sessions)."""
        return self._session_id

    @property
    def session_timeout(self) -> float:
        """Seconds without contact after which the backend expires the session."""
        return self._session_timeout

    @property
    def death_detection(self) -> float:
        """At most how long after a contender's process dies the backend ends its session
        (the journal records it, so a report can date a crash): the session timeout, unless
        the backend sees a process die sooner."""
        return self.session_timeout

    @property
    def last_contact(self) -> float:
        """``anyio.current_time()`` when the backend last answered this session."""
        return self._last_contact

    @property
    def renewal_interval(self) -> float:
        """How old ``last_contact`` grows, at most, between two renewals of a healthy idle
        session (round trips aside): a local deadline counted from the last contact must be
        longer, or the active stops at every renewal (``ha/election/timing.py``). Default:
        a third of the session timeout, the cadence of the etcd, Kubernetes and memory
        drivers' renewals."""
        return self.session_timeout / 3

    @property
    def connected(self) -> bool:
        """Whether the driver currently has contact with the backend."""
        return self._connected

    async def session_lease(self, owner: int) -> SessionLease | None:
        """How long ago the backend last renewed session ``owner`` (another session, e.g. a
        node's ``Stat.ephemeral_owner``), and when it expires it; None when the session is
        not known (ended), or when the backend cannot tell (the default: see
        ``capabilities.session_leases``). Raises ``ConnectionLost`` like a read."""
        return None

    async def tree_size(self) -> TreeSize | None:
        """How full the object holding the tree is now (one read), or None when the backend
        keeps no tree in one object of limited size (the default). Raises ``ConnectionLost``
        like a read."""
        return None

    def known_tree_size(self) -> TreeSize | None:
        """``tree_size`` as of the driver's last look (no I/O, for a metric read at scrape
        time); None when the backend has no such limit or the driver has not looked yet."""
        return None

    # --- nodes ------------------------------------------------------------------------------

    @abstractmethod
    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        makepath: bool = False,
    ) -> str:
        """Create a node; return its path (with the suffix, if ``sequential``).

        Raises NodeExists, NoNode (parent missing and not ``makepath``).
        """

    @abstractmethod
    async def get(self, path: str) -> tuple[bytes, Stat]:
        """Read a node. Raises NoNode."""

    @abstractmethod
    async def exists(self, path: str) -> Stat | None:
        """The node's Stat, or None."""

    @abstractmethod
    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        """Write a node if its version matches. Raises NoNode, BadVersion."""

    @abstractmethod
    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        """Delete a node if its version matches. Raises NoNode, BadVersion, NotEmpty."""

    @abstractmethod
    async def children(self, path: str) -> list[str]:
        """Names (not paths) of the node's children, sorted. Raises NoNode."""

    @abstractmethod
    async def transaction(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        """Apply ``ops`` atomically. Returns per op: created path, new Stat, or None.

        Raises TransactionFailed (nothing applied) naming the first failing op.
        """

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its missing parents as empty persistent nodes."""
        validate_path(path)
        if path == "/":
            return
        from ..errors import NodeExists

        try:
            await self.create(path, b"", makepath=True)
        except NodeExists:
            pass

    async def ensure_paths(self, paths: Sequence[str]) -> None:
        """``ensure_path`` for each of ``paths``, in order (a driver may make them all in one
        round trip: a new election's two folders)."""
        for path in paths:
            await self.ensure_path(path)

    # --- who leads, for the backend's own tools -------------------------------------------------

    def show_leader(self, path: str, identity: bytes, epoch: int) -> None:
        """Hook: the election at ``path`` has an active, ``identity`` with ``epoch``, here.

        Information only, for the backend's own tools (Kubernetes: a Lease ``kubectl get
        lease`` lists); safety never depends on it. Never awaited and never raises: a driver
        writes it in the background. A no-op on backends with no such tool."""

    def hide_leader(self, path: str, epoch: int) -> None:
        """Hook: the active of ``show_leader(path, ..., epoch)`` has stopped."""

    # --- events -----------------------------------------------------------------------------

    def subscribe(self, path: str | None, callback: Callback) -> Subscription:
        """Call ``callback(event)`` for node events at ``path``, or connection events if None.

        Callbacks run on the event loop's thread, must not block and should not raise (an
        exception is logged and dropped). Events arrive in the backend's order, of one path
        and across paths (after a gap the watch could not replay, as far as a re-read tells).
        Node events are hints to re-read, as ZooKeeper's watches are: a backend may coalesce
        them, or deliver one from just before ``subscribe``; it never misses a change after.
        """
        if path is not None:
            validate_path(path)
        subscription = Subscription(self, path, callback)
        held = self._subscribers.get(path)
        if held is None:
            self._subscribers[path] = subscription
            if path is not None:
                self._watch_started(path)
        elif isinstance(held, Subscription):
            self._subscribers[path] = {held: None, subscription: None}
        else:
            held[subscription] = None
        return subscription

    def _unsubscribe(self, key: str | None, subscription: Subscription) -> None:
        held = self._subscribers.get(key)
        if held is subscription:
            del self._subscribers[key]
        elif isinstance(held, dict) and held.pop(subscription, False) is None:
            if held:
                return
            del self._subscribers[key]
        else:
            return
        if key is not None:
            self._watch_stopped(key)

    def _watch_started(self, path: str) -> None:
        """Hook: the first subscriber of ``path`` arrived (set up a backend watch)."""

    def _watch_stopped(self, path: str) -> None:
        """Hook: the last subscriber of ``path`` left."""

    def watched_paths(self) -> list[str]:
        return [p for p in self._subscribers if p is not None]

    def _emit(self, event: DriverEvent) -> None:
        """Deliver an event to its subscribers. Drivers call this on the loop's thread."""
        key = event.path if isinstance(event, NodeEvent) else None
        held = self._subscribers.get(key)
        if held is None:
            return
        for subscription in (held,) if isinstance(held, Subscription) else tuple(held):
            try:
                subscription.callback(event)
            except Exception:  # a subscriber's bug must not stop delivery to the others
                log.exception("event subscriber raised", extra={"event": repr(event)})


async def post_order(driver: Driver, path: str) -> list[str]:
    """``path`` and every node under it, children before parents; [] if absent."""
    from ..errors import NoNode

    try:
        names = await driver.children(path)
    except NoNode:
        return []
    found: list[str] = []
    for name in names:
        found.extend(await post_order(driver, f"{path.rstrip('/')}/{name}"))
    found.append(path)
    return found
