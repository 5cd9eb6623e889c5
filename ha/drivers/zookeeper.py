"""The ZooKeeper backend on kazoo: ``zk://h1:2181,h2:2181/chroot?session_timeout=5``.

Threads: kazoo runs a connection thread and callback threads of its own. This module keeps them
apart from the event loop in both directions:

- kazoo's ``*_async`` calls only queue a request and wake kazoo's connection thread, so they are
  issued straight from the loop's thread; only ``start``/``stop`` (which create and join
  threads) go through ``anyio.to_thread``.
- everything kazoo reports back (a reply, a watch firing, a state change) is put on a
  thread-safe queue, and a socketpair byte wakes the driver's pump task, which runs it on the
  loop's thread. kazoo's threads therefore never wait for the loop: a busy loop cannot delay
  kazoo's heartbeats (kazoo's state listeners must not block).

States: kazoo's CONNECTED with a new session id -> CONNECTED, SUSPENDED -> DISCONNECTED,
CONNECTED with the same id -> RECONNECTED, LOST -> EXPIRED; kazoo then opens a new session on
its own (CONNECTED with the new id).

Timing: ``session_timeout`` is the timeout the server granted (it may clamp the request to its
``maxSessionTimeout``). ``last_contact`` must never be later than the *leader's* view of the
contact, since only the ZooKeeper leader expires sessions:

- a follower answers reads and pings by itself, and passes its clients' session touches on to
  the leader only in its replies to the leader's pings (every tickTime/2). A follower cut off
  from the leader goes on answering until its sync limit runs out (syncLimit x tickTime, 10 s
  stock), long after the leader may have expired the session. So a reply proves nothing by
  itself. A reply that went through the leader (``sync``, or a write) sent at ``t`` proves that
  the follower's link to the leader worked after ``t``; a request answered before
  ``t - tick_time`` was touched at the follower at least ``tick_time`` before that, time enough
  for a ping reply carrying the touch to go ahead of the forwarded request on the same ordered
  link. ``last_contact`` is the send time of the latest such request. ``tick_time`` (the
  ensemble's tickTime in seconds; default a fifth of the session timeout, which covers stock
  ZooKeeper's 2 s tick for sessions of 10 s and more) must cover the ping interval (tickTime/2)
  plus the jitter of the leader's pings: give the real tickTime for shorter sessions.
- a (re)connection is dated when kazoo's thread sends the connect request: a follower grants
  it only after the leader has touched (revalidated, or created) the session. The stamp is
  taken on kazoo's thread and converted to the loop's clock, so a stalled loop cannot date it
  late.

A ``sync`` every ``max(tick_time / 2, session_timeout / 12)`` keeps it fresh while nothing
else is asked: each dates a request answered a ``tick_time`` earlier, so the contact is at most
about ``1.5 * tick_time`` (by default 0.3 session timeouts) plus a few round trips old.

Watches: one-shot ``exists`` watches, re-armed after every firing and after every reconnect
(kazoo 2.11 has no persistent watches). Each arming reads the node's stat; the difference from
the last stat seen becomes the events (created, changed, deleted, or deleted then created for a
node replaced in between), so nothing that changed while the watch was down goes unreported,
only coalesced (as ZooKeeper's own watches are). A deletion is reported as soon as it fires.

Security: digest credentials (``auth=USER:PASSWORD``), an ACL on every node the driver creates
(``acl=open``, or ``acl=creator``: only the creating credentials), TLS through kazoo's options
(``use_ssl``, ``certfile``, ``keyfile``, ``ca``; passed through, not tested here).
"""

from __future__ import annotations

import functools
import logging
import queue
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Self
from urllib.parse import unquote

import anyio
import anyio.abc
from kazoo import exceptions as kx
from kazoo.client import KazooClient
from kazoo.protocol.states import EventType, KazooState
from kazoo.retry import KazooRetry
from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE

from .._clock import loop_minus_monotonic
from ..errors import (
    AccessDenied,
    BadVersion,
    ConfigurationError,
    ConnectionLost,
    DriverError,
    NodeExists,
    NoNode,
    NotEmpty,
    SessionExpired,
    TransactionFailed,
    Unavailable,
)
from ._input import checked_op, node_data
from ._options import OptionTable
from .base import (
    Capabilities,
    Check,
    ConnectionEvent,
    ConnectionState,
    Create,
    Delete,
    Driver,
    NodeEvent,
    NodeEventKind,
    Op,
    SessionKind,
    SetData,
    Stat,
    validate_path,
)

__all__ = ("ZooKeeperDriver", "map_errors")

log = logging.getLogger("ha.drivers.zookeeper")


# --- errors -----------------------------------------------------------------------------------


def translate(exc: BaseException, path: str = "", version: int = -1) -> DriverError:
    """The ``ha.errors`` counterpart of a kazoo error about ``path``."""
    if isinstance(exc, kx.NoNodeError):
        return NoNode(path)
    if isinstance(exc, kx.NodeExistsError):
        return NodeExists(path)
    if isinstance(exc, kx.BadVersionError):
        return BadVersion(path, version)
    if isinstance(exc, kx.NotEmptyError):
        return NotEmpty(path)
    if isinstance(exc, kx.NoChildrenForEphemeralsError):
        return NoNode(f"{path} (ephemeral nodes cannot have children)")
    if isinstance(exc, kx.NoAuthError):
        return AccessDenied(
            f"ZooKeeper denied access to {path or 'a node'}: its ACL does not allow this client"
            " (give the credentials that created it with auth=USER:PASSWORD)"
        )
    if isinstance(exc, kx.AuthFailedError):
        return AccessDenied("ZooKeeper rejected the client's credentials (auth failed)")
    if isinstance(exc, kx.InvalidACLError):
        return AccessDenied(f"ZooKeeper refused the ACL for {path} (creator ACLs need auth=...)")
    # ConnectionClosedError is a kind of SessionExpiredError in kazoo: test it first
    if isinstance(exc, kx.ConnectionClosedError):
        return ConnectionLost("the ZooKeeper driver is closed")
    if isinstance(exc, kx.SessionExpiredError):
        return SessionExpired("the ZooKeeper session expired")
    if isinstance(exc, kx.ConnectionLoss | kx.ConnectionDropped | kx.OperationTimeoutError):
        return ConnectionLost(f"lost contact with ZooKeeper ({type(exc).__name__})")
    return DriverError(f"ZooKeeper error at {path}: {type(exc).__name__} {exc}".rstrip())


@contextmanager
def map_errors(path: str = "", version: int = -1) -> Iterator[None]:
    """Translate kazoo's errors into ``ha.errors`` at the driver's boundary."""
    try:
        yield
    except kx.KazooException as exc:
        raise translate(exc, path, version) from exc


# Errors that mean no reply came from the server (every other error is a server's answer).
_NO_REPLY = (
    kx.ConnectionLoss,
    kx.ConnectionDropped,
    kx.SessionExpiredError,
    kx.OperationTimeoutError,
)


# --- options ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Options:
    session_timeout: float = 10.0
    connect_timeout: float = 10.0
    op_timeout: float | None = None  # default: the session timeout
    tick_time: float | None = None  # the ensemble's tickTime; default: session timeout / 5
    acl: str = "open"  # or "creator": only the authenticated creator may touch the node
    auth: str | None = None  # "user:password" (digest)
    create_chroot: bool = True
    randomize_hosts: bool = True
    use_ssl: bool = False
    certfile: str | None = None
    keyfile: str | None = None
    keyfile_password: str | None = None
    ca: str | None = None
    verify_certs: bool = True
    check_hostname: bool = False


_OPTIONS = OptionTable(
    "ZooKeeper",
    seconds=("session_timeout", "connect_timeout", "op_timeout", "tick_time"),
    flags=("create_chroot", "randomize_hosts", "use_ssl", "verify_certs", "check_hostname"),
    text=("acl", "auth", "certfile", "keyfile", "keyfile_password", "ca"),
)


def _parse_hosts(netloc: str) -> str:
    """Validate ``h1:2181,h2:2181`` (port defaults to 2181; IPv6 in brackets)."""
    if not netloc:
        raise ConfigurationError("no ZooKeeper servers given (expected zk://HOST:PORT,...)")
    hosts = []
    for item in netloc.split(","):
        host, port = item.strip(), "2181"
        if host.startswith("["):
            end = host.find("]")
            if end < 0 or (len(host) > end + 1 and host[end + 1] != ":"):
                raise ConfigurationError(f"malformed IPv6 server address {item!r}")
            if len(host) > end + 1:
                port = host[end + 2 :]
            host = host[: end + 1]
        elif ":" in host:
            host, port = host.rsplit(":", 1)
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigurationError(f"malformed ZooKeeper server address {item!r} (HOST:PORT)")
        hosts.append(f"{host}:{int(port)}")
    return ",".join(hosts)


# --- the driver -------------------------------------------------------------------------------


class _Watch:
    """The re-armed watch of one subscribed path."""

    __slots__ = ("path", "active", "arming", "again", "armed", "last")

    def __init__(self, path: str) -> None:
        self.path = path
        self.active = True  # False once the last subscriber left
        self.arming = False  # an exists request is in flight
        self.again = False  # re-arm once the in-flight one returns
        self.armed = False  # a watch is set on the server
        # what is known of the node: _UNKNOWN before the first arming (which only records the
        # baseline: events are changes after subscribing), None if absent, else its ZnodeStat
        self.last: Any = _UNKNOWN


_UNKNOWN = object()


class _SessionLog(logging.LoggerAdapter[logging.Logger]):
    """kazoo's logger, watched for the session timeout the server granted.

    kazoo does not keep the negotiated timeout anywhere; it only logs it when a session opens.
    If the message ever changes, the requested timeout is kept (and safety then depends on the
    server's maxSessionTimeout not being lower than the request).
    """

    def __init__(self, on_timeout: Callable[[float], None]) -> None:
        super().__init__(logging.getLogger("kazoo.client"), {})
        self._on_timeout = on_timeout

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        if isinstance(msg, str) and msg.startswith("Session created") and len(args) >= 3:
            granted = args[2]
            if isinstance(granted, int | float) and granted > 0:
                self._on_timeout(granted / 1000.0)
        super().log(level, msg, *args, **kwargs)


class ZooKeeperDriver(Driver):
    """A ZooKeeper session through kazoo. Build with ``from_url`` or keyword options."""

    capabilities = Capabilities(
        name="zookeeper",
        cross_process=True,
        cross_host=True,
        durable=True,
        push_watches=True,
        sessions=SessionKind.SESSION,
    )

    def __init__(self, hosts: str = "127.0.0.1:2181", *, chroot: str = "", **options: Any) -> None:
        super().__init__()
        self.hosts = _parse_hosts(hosts)
        chroot = chroot.rstrip("/")
        if chroot:
            validate_path(chroot)
        self.chroot = chroot
        opts = _Options(**_OPTIONS.keywords(options))
        if opts.acl not in ("open", "creator"):
            raise ConfigurationError(f"acl must be 'open' or 'creator', got {opts.acl!r}")
        if opts.auth is not None and ":" not in opts.auth:
            raise ConfigurationError("auth must be USER:PASSWORD (ZooKeeper digest)")
        if opts.acl == "creator" and opts.auth is None:
            raise ConfigurationError("acl=creator needs credentials: give auth=USER:PASSWORD")
        self.options = opts
        self._acl = CREATOR_ALL_ACL if opts.acl == "creator" else OPEN_ACL_UNSAFE
        self._requested_timeout = opts.session_timeout
        self._timeout = opts.session_timeout
        self._granted_timeout: float | None = None  # written by kazoo's thread
        self._client: Any = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._inbox: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._session: int | None = None
        self._connected = False
        self._closing = False
        self._last_contact = 0.0
        # requests answered by the server: (sent, replied) on the loop's clock, candidates for
        # last_contact once a reply through the leader proves their touch reached the leader
        self._answered: deque[tuple[float, float]] = deque()
        self._clock_offset = 0.0  # anyio.current_time() - time.monotonic(), taken on the loop
        self._connect_sent: float | None = None  # time.monotonic(); kazoo's connection thread
        self._first_session = anyio.Event()
        self._probe_now = anyio.Event()
        self._watches: dict[str, _Watch] = {}
        # test hooks (see "test hooks" below): injected errors, a gate on requests, a gate on
        # kazoo's connection attempts
        self._fail: list[DriverError] = []
        self._frozen: anyio.Event | None = None
        self._uncut = threading.Event()
        self._uncut.set()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """``zk://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/CHROOT][?OPTION=VALUE&...]``.

        Options (also as keywords, which win over the URL): session_timeout, connect_timeout,
        op_timeout, tick_time (seconds; tick_time is the ensemble's tickTime, see the module's
        doc); acl=open|creator; auth=USER:PASSWORD; create_chroot; randomize_hosts; TLS:
        use_ssl, certfile, keyfile, keyfile_password, ca, verify_certs, check_hostname.
        """
        parsed = _OPTIONS.parse(url, scheme="zk", usage="zk://HOST:PORT[/CHROOT]")
        netloc, query = parsed.netloc, {}
        if "@" in netloc:
            userinfo, netloc = netloc.rsplit("@", 1)
            query["auth"] = unquote(userinfo)
        return cls(netloc, chroot=parsed.path, **{**query, **parsed.options, **options})

    # --- plumbing between kazoo's threads and the loop -------------------------------------

    def _post(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop's thread soon. Safe from any thread; never blocks."""
        self._inbox.put(fn)
        wake = self._wake_w
        if wake is not None:
            try:
                wake.send(b"\0")
            except OSError:  # buffer full: a wake-up is pending anyway; closed: shutting down
                pass

    async def _pump(self) -> None:
        assert self._wake_r is not None
        while True:
            await anyio.wait_readable(self._wake_r)
            try:
                self._wake_r.recv(4096)
            except BlockingIOError:
                pass
            while True:  # drain after reading the bytes, so a later post always wakes us
                try:
                    fn = self._inbox.get_nowait()
                except queue.Empty:
                    break
                try:
                    fn()
                except Exception:
                    log.exception("ZooKeeper driver callback failed")

    async def _call(
        self, path: str, version: int, request: Callable[[], Any], *, leader: bool = False
    ) -> Any:
        """Issue one kazoo async request and wait for its reply on the loop.

        ``leader``: the request goes through the ZooKeeper leader (a write or a sync), so its
        successful reply dates the contact of requests answered earlier (see the module's doc).
        """
        if self._tg is None or self._client is None:
            raise ConnectionLost("the ZooKeeper driver is not started (or closed)")
        while self._frozen is not None:  # test hook: _freeze()
            await self._frozen.wait()
        if self._fail:
            raise self._fail.pop(0)
        done = anyio.Event()
        sent = anyio.current_time()  # before the request is queued: never later than its sending
        with map_errors(path, version):
            result = request()
            result.rawlink(lambda _: self._post(done.set))
            timeout = self.options.op_timeout or self._timeout
            with anyio.move_on_after(timeout):
                await done.wait()
            if not done.is_set():
                raise ConnectionLost(f"no reply from ZooKeeper within {timeout:g} s")
            # read after the reply arrived, so never earlier than the server's touch of it
            replied = anyio.current_time()
            try:
                value = result.get_nowait()
            except kx.KazooException as exc:
                if not isinstance(exc, _NO_REPLY):
                    self._remember(sent, replied)
                raise
        if leader:
            self._through_leader(sent)
        self._remember(sent, replied)
        return value

    def _remember(self, sent: float, replied: float) -> None:
        """Keep an answered request until a sync proves it. Under heavy load the oldest two
        become one (latest send, latest reply): proven later, never earlier, and the oldest
        are the ones the next sync can prove, so they must not be dropped."""
        if len(self._answered) >= 1024:
            a, b = self._answered.popleft(), self._answered.popleft()
            self._answered.appendleft((max(a[0], b[0]), max(a[1], b[1])))
        self._answered.append((sent, replied))

    @property
    def _tick(self) -> float:
        """How long before a reply through the leader a request must have been answered for
        that reply to prove its touch reached the leader (see the module's doc)."""
        return self.options.tick_time or self._timeout / 5

    def _through_leader(self, sent: float) -> None:
        """A request sent at ``sent`` went through the leader: date the contact."""
        cutoff = sent - self._tick
        proven = [entry[0] for entry in self._answered if entry[1] <= cutoff]
        if proven:  # their touches are in; later proofs need only later requests
            self._answered = deque(entry for entry in self._answered if entry[1] > cutoff)
            self._stamp(max(proven))

    def _stamp(self, contact: float) -> None:
        if contact > self._last_contact:
            self._last_contact = contact

    def _abs(self, path: str) -> str:
        validate_path(path)
        if not self.chroot:
            return path
        return self.chroot if path == "/" else self.chroot + path

    def _rel(self, path: str) -> str:
        if not self.chroot:
            return path
        return path[len(self.chroot) :] or "/"

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        if self._tg is not None or self._closing:
            raise RuntimeError("driver already started")
        opts = self.options
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        retry = KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_jitter=0.1, max_delay=1.0)
        self._client = KazooClient(
            hosts=self.hosts,
            timeout=self._requested_timeout,
            auth_data=[("digest", opts.auth)] if opts.auth else None,
            randomize_hosts=opts.randomize_hosts,
            connection_retry=retry,
            logger=_SessionLog(self._granted),
            use_ssl=opts.use_ssl,
            certfile=opts.certfile,
            keyfile=opts.keyfile,
            keyfile_password=opts.keyfile_password,
            ca=opts.ca,
            verify_certs=opts.verify_certs,
            check_hostname=opts.check_hostname,
        )
        self._client.add_listener(self._kazoo_state)
        self._date_connects(self._client)
        self._clock_offset = loop_minus_monotonic()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        try:
            self._tg.start_soon(self._pump)
            await anyio.to_thread.run_sync(self._client.start_async)
            with anyio.move_on_after(opts.connect_timeout):
                await self._first_session.wait()
            if not self._first_session.is_set():
                raise Unavailable(
                    f"could not reach ZooKeeper at {self.hosts} within"
                    f" {opts.connect_timeout:g} s (connect_timeout)"
                )
            await self._check_chroot()
            if self._tick > self._timeout / 4:
                log.warning(
                    "tick_time %g s is long for a session timeout of %g s: contact through a"
                    " follower is dated that much late, and an active may stop for want of it",
                    self._tick,
                    self._timeout,
                )
            self._tg.start_soon(self._probe)
        except BaseException:
            await self._shutdown(emit=False)
            raise

    async def _check_chroot(self) -> None:
        if not self.chroot:
            return
        stat = await self._call(self.chroot, -1, lambda: self._client.exists_async(self.chroot))
        if stat is not None:
            return
        if not self.options.create_chroot:
            raise ConfigurationError(
                f"the chroot {self.chroot} does not exist on ZooKeeper at {self.hosts};"
                " create it, or allow the driver to (create_chroot=true)"
            )
        try:
            await self._call(
                self.chroot,
                -1,
                lambda: self._client.create_async(self.chroot, b"", acl=self._acl, makepath=True),
                leader=True,
            )
        except NodeExists:
            pass

    async def aclose(self) -> None:
        if self._tg is None:
            return
        await self._shutdown(emit=True)

    async def _shutdown(self, *, emit: bool) -> None:
        self._closing = True
        had_session = self._session is not None
        self._session = None
        self._connected = False
        client, self._client = self._client, None
        if client is not None:
            client.remove_listener(self._kazoo_state)

            def stop() -> None:
                try:
                    client.stop()  # closes the session: its ephemeral nodes go at once
                finally:
                    client.close()

            try:
                with anyio.CancelScope(shield=True):  # even when cancelled: the session must end
                    await anyio.to_thread.run_sync(stop)
            except Exception:
                log.warning("closing the kazoo client failed", exc_info=True)
        tg, self._tg = self._tg, None
        try:
            if tg is not None:
                tg.cancel_scope.cancel()
                await tg.__aexit__(None, None, None)  # raises if we are being cancelled
        finally:
            for sock in (self._wake_r, self._wake_w):
                if sock is not None:
                    sock.close()
            self._wake_r = self._wake_w = None
            for watch in self._watches.values():
                watch.armed = watch.arming = False
            if emit and had_session:
                self._emit(ConnectionEvent(ConnectionState.CLOSED, None))

    # --- test hooks: the faults of ha.testing.faults (which documents them) ------------------

    def _fail_next(self, count: int = 1, *, transient: bool = True) -> None:
        """Test hook: the next ``count`` requests (the driver's own syncs too) fail before
        reaching ZooKeeper, with ``ConnectionLost`` or, if not transient, ``AccessDenied``."""
        for _ in range(count):
            self._fail.append(
                ConnectionLost("injected fault")
                if transient
                else AccessDenied("injected fatal fault")
            )

    def _freeze(self) -> None:
        """Test hook: every request (the driver's own syncs too) waits until ``_thaw()``;
        kazoo's pings go on, so the session lives."""
        if self._frozen is None:
            self._frozen = anyio.Event()

    def _thaw(self) -> None:
        if self._frozen is not None:
            self._frozen.set()
            self._frozen = None

    def _disconnect(self) -> None:
        """Test hook: drop the connection now (DISCONNECTED at once) and hold kazoo's attempts
        to connect again until ``_reconnect()``; the session ages on the server meanwhile."""
        client = self._client
        if client is None or self._closing:
            raise ConnectionLost("the ZooKeeper driver is not started (or closed)")
        self._uncut.clear()
        self._hold_connects(client)
        if client.connected:
            # kazoo's own testing sentinel: its connection thread drops the socket on it
            from kazoo.protocol.connection import _CONNECTION_DROP

            client._call(_CONNECTION_DROP, None)
        if self._connected:  # kazoo's SUSPENDED, when it comes, then changes nothing
            self._connected = False
            self._emit(ConnectionEvent(ConnectionState.DISCONNECTED, self._session))

    def _reconnect(self) -> None:
        self._uncut.set()

    def _hold_connects(self, client: Any) -> None:
        """Make kazoo's connection thread wait, before each attempt to connect, while a test
        keeps the driver disconnected (installed once, by the first ``_disconnect``)."""
        handler: Any = client._connection
        if getattr(handler, "_ha_held", False):
            return
        connect, uncut = handler._connect, self._uncut

        @functools.wraps(connect)
        def held_connect(*args: Any, **kwargs: Any) -> Any:
            while not uncut.wait(0.05):
                if client._stopped.is_set():
                    raise kx.ConnectionDropped("the client stops while held disconnected")
            return connect(*args, **kwargs)

        handler._connect = held_connect  # outside _date_connects': dated when it really starts
        handler._ha_held = True

    async def _crash(self) -> None:
        """Test hook: die without a goodbye, as a killed process does. kazoo's connection
        drops without a CloseRequest and is not made again (the server expires the session
        when its timeout runs out); no more events; every later request raises
        ``ConnectionLost``. Returns once kazoo's threads have ended."""
        client = self._client
        if client is None or self._closing:
            return
        self._closing = True  # what kazoo still reports is not passed on
        self._connected = False
        client.remove_listener(self._kazoo_state)
        from kazoo.protocol.connection import _CONNECTION_DROP

        def die() -> None:
            client._stopped.set()  # no new connection; stop() then sends no CloseRequest
            if client.connected:
                client._call(_CONNECTION_DROP, None)
            client._connection.connection_stopped.wait(10)
            client._safe_close()  # the callback threads (what stop() would have done)

        await anyio.to_thread.run_sync(die)

    async def _expire(self, hosts: str | None = None) -> None:
        """Test hook: have ZooKeeper expire the current session now. A second client joins it
        with its id and password, then closes it: the server ends the session (its ephemeral
        nodes go at once) and this driver learns it at its next contact (DISCONNECTED,
        EXPIRED, then CONNECTED with a new session). ``hosts``: the server's, when the
        driver's own go through a fault proxy."""
        client = self._client
        client_id = client.client_id if client is not None and not self._closing else None
        if client_id is None:
            raise RuntimeError("the ZooKeeper driver has no session to expire")

        def join_and_close() -> None:
            other = KazooClient(hosts=hosts or self.hosts, client_id=client_id, timeout=2.0)
            other.start(timeout=10)
            other.stop()
            other.close()

        await anyio.to_thread.run_sync(join_and_close)

    # --- session ----------------------------------------------------------------------------

    @property
    def session_id(self) -> int | None:
        return self._session

    @property
    def session_timeout(self) -> float:
        return self._timeout

    @property
    def last_contact(self) -> float:
        return self._last_contact

    @property
    def connected(self) -> bool:
        return self._connected

    def _granted(self, timeout: float) -> None:  # kazoo's thread
        self._granted_timeout = timeout

    def _date_connects(self, client: Any) -> None:
        """Have kazoo's connection thread note when it starts each connection attempt (before
        the connect request is sent), to date the connection it may open."""
        handler: Any = getattr(client, "_connection", None)
        connect = getattr(handler, "_connect", None)
        if connect is None:
            log.warning("this kazoo has no ConnectionHandler._connect: reconnections not dated")
            return

        @functools.wraps(connect)
        def dated_connect(*args: Any, **kwargs: Any) -> Any:
            self._connect_sent = time.monotonic()
            return connect(*args, **kwargs)

        handler._connect = dated_connect

    def _kazoo_state(self, state: str) -> None:  # kazoo's connection thread: must not block
        client = self._client
        client_id = client.client_id if client is not None else None
        session = client_id[0] if client_id else None
        contact = None
        if state == KazooState.CONNECTED and self._connect_sent is not None:
            # CONNECTED is reported from inside the connection attempt that began then
            contact = self._connect_sent + self._clock_offset
        self._post(
            functools.partial(self._state_changed, state, session, self._granted_timeout, contact)
        )

    def _state_changed(
        self, state: str, session: int | None, granted: float | None, contact: float | None = None
    ) -> None:
        if self._closing:
            return
        old = self._session
        if state == KazooState.CONNECTED and session is not None:
            if granted is not None:
                if granted < self._requested_timeout:
                    log.warning(
                        "ZooKeeper granted a session timeout of %g s instead of %g s",
                        granted,
                        self._requested_timeout,
                    )
                self._timeout = granted
            self._connected = True
            # the server answered a connect request sent at ``contact`` (dated on kazoo's
            # thread, not now: the loop may have been stalled since), having had the leader
            # revalidate or create the session; it is later than every earlier answer
            self._answered.clear()
            if contact is not None:
                self._stamp(contact)
            if session == old:
                self._emit(ConnectionEvent(ConnectionState.RECONNECTED, session))
            else:
                if old is not None:  # a new session without LOST first: the old one is gone
                    self._emit(ConnectionEvent(ConnectionState.EXPIRED, old))
                self._session = session
                self._emit(ConnectionEvent(ConnectionState.CONNECTED, session))
            self._first_session.set()
            self._probe_now.set()
            for watch in self._watches.values():
                if not watch.armed:
                    self._arm(watch)
        elif state == KazooState.SUSPENDED:
            if self._connected:
                self._connected = False
                self._emit(ConnectionEvent(ConnectionState.DISCONNECTED, old))
        elif state == KazooState.LOST:
            self._connected = False
            self._session = None
            if old is not None:
                self._emit(ConnectionEvent(ConnectionState.EXPIRED, old))

    async def _probe(self) -> None:
        """A ``sync`` now and then, to keep ``last_contact`` fresh: each one goes through the
        leader and so dates the latest one answered at least ``tick_time`` before it."""
        while True:
            with anyio.move_on_after(max(self._tick / 2, self._timeout / 12)):
                await self._probe_now.wait()
            self._probe_now = anyio.Event()
            if self._connected:
                try:
                    await self._call("/", -1, lambda: self._client.sync_async("/"), leader=True)
                except DriverError:
                    pass

    # --- watches ----------------------------------------------------------------------------

    def _watch_started(self, path: str) -> None:
        watch = _Watch(path)
        self._watches[path] = watch
        if self._connected:
            self._arm(watch)

    def _watch_stopped(self, path: str) -> None:
        watch = self._watches.pop(path, None)
        if watch is not None:
            watch.active = False  # ZooKeeper cannot remove a watch: its firing is ignored

    def _arm(self, watch: _Watch) -> None:
        if watch.arming:
            watch.again = True
            return
        client = self._client
        if client is None or not watch.active:
            return
        watch.arming = True
        watch.again = False

        def fired(event: Any) -> None:  # kazoo's callback thread
            self._post(functools.partial(self._fired, watch, getattr(event, "type", None)))

        def replied(result: Any) -> None:  # kazoo's completion thread
            self._post(functools.partial(self._armed, watch, result))

        try:
            client.exists_async(self._abs(watch.path), watch=fired).rawlink(replied)
        except Exception:
            watch.arming = False
            log.warning("could not watch %s", watch.path, exc_info=True)

    def _fired(self, watch: _Watch, kind: str | None) -> None:
        watch.armed = False
        if not watch.active or self._closing:
            return
        # A deletion is reported at once (a lock's deletion is what a standby waits for): the
        # re-arming read then reports a re-creation against a known absence. Anything else is
        # reported after the read, so that the watch is set again before the subscriber can
        # react (and a change it then makes is not missed).
        if kind == EventType.DELETED and watch.last is not None and watch.last is not _UNKNOWN:
            watch.last = None
            self._emit(NodeEvent(watch.path, NodeEventKind.DELETED))
        self._arm(watch)

    def _armed(self, watch: _Watch, result: Any) -> None:
        watch.arming = False
        if not watch.active or self._closing:
            return
        try:
            stat = result.get_nowait()
        except kx.KazooException:
            watch.armed = False  # re-armed on the next (re)connection
        else:
            watch.armed = True
            self._diff(watch, stat)
        if watch.again and self._connected:
            self._arm(watch)

    def _diff(self, watch: _Watch, stat: Any) -> None:
        before, watch.last = watch.last, stat
        if before is _UNKNOWN:
            return
        events: list[NodeEventKind] = []
        if before is None and stat is not None:
            events = [NodeEventKind.CREATED]
        elif before is not None and stat is None:
            events = [NodeEventKind.DELETED]
        elif before is not None and stat is not None:
            if stat.czxid != before.czxid:  # replaced while the watch was down
                events = [NodeEventKind.DELETED, NodeEventKind.CREATED]
            elif stat.mzxid != before.mzxid:
                events = [NodeEventKind.CHANGED]
        for kind in events:
            self._emit(NodeEvent(watch.path, kind))

    # --- nodes ------------------------------------------------------------------------------

    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, makepath: bool = False
    ) -> str:
        full, value = self._abs(path), node_data(data)
        created = await self._call(
            path,
            -1,
            lambda: self._client.create_async(
                full, value, acl=self._acl, ephemeral=ephemeral, makepath=makepath
            ),
            leader=True,
        )
        return self._rel(str(created))

    async def get(self, path: str) -> tuple[bytes, Stat]:
        full = self._abs(path)
        data, stat = await self._call(path, -1, lambda: self._client.get_async(full))
        return bytes(data or b""), _stat(stat)

    async def exists(self, path: str) -> Stat | None:
        full = self._abs(path)
        stat = await self._call(path, -1, lambda: self._client.exists_async(full))
        return None if stat is None else _stat(stat)

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        full, value = self._abs(path), node_data(data)
        stat = await self._call(
            path, version, lambda: self._client.set_async(full, value, version), leader=True
        )
        return _stat(stat)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        full = self._abs(path)
        if path == "/":  # with a chroot, the driver's whole namespace
            raise ConfigurationError("the root node cannot be deleted")
        if not recursive:
            await self._call(
                path, version, lambda: self._client.delete_async(full, version), leader=True
            )
            return
        # the whole subtree in one multi, children first: all or nothing; retried if the tree
        # changed between listing and deleting
        for _attempt in range(10):
            paths = await self._subtree(path)
            ops: list[Op] = [Delete(p) for p in reversed(paths[1:])]
            ops.append(Delete(path, version))
            try:
                await self.transaction(ops)
                return
            except TransactionFailed as exc:
                if exc.index == len(ops) - 1 and not isinstance(exc.cause, NotEmpty):
                    raise exc.cause from None
        raise NotEmpty(path)

    async def _subtree(self, path: str) -> list[str]:
        """``path`` and its descendants, parents before children."""
        paths, index = [path], 0
        while index < len(paths):
            parent = paths[index]
            index += 1
            try:
                names = await self.children(parent)
            except NoNode:
                if parent == path:
                    raise
                continue
            paths.extend(f"{parent.rstrip('/')}/{name}" for name in names)
        return paths

    async def children(self, path: str) -> list[str]:
        full = self._abs(path)
        names = await self._call(path, -1, lambda: self._client.get_children_async(full))
        return sorted(names)

    async def transaction(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        ops = [checked_op(op) for op in ops]
        if not ops:
            return []

        def build() -> Any:
            tx = self._client.transaction()
            for op in ops:
                full = self._abs(op.path)
                if isinstance(op, Check):
                    tx.check(full, op.version)
                elif isinstance(op, Create):
                    tx.create(full, op.data, acl=self._acl, ephemeral=op.ephemeral)
                elif isinstance(op, SetData):
                    tx.set_data(full, op.data, op.version)
                else:
                    tx.delete(full, op.version)
            return tx.commit_async()

        results = await self._call(ops[0].path, -1, build, leader=True)
        failed = [
            (index, result)
            for index, result in enumerate(results)
            if isinstance(result, Exception)
            and not isinstance(result, kx.RolledBackError | kx.RuntimeInconsistency)
        ]
        if failed or any(isinstance(result, Exception) for result in results):
            index, error = failed[0] if failed else (0, results[0])
            op = ops[index]
            cause = translate(error, op.path, getattr(op, "version", -1))
            if isinstance(cause, BadVersion | NoNode | NodeExists | NotEmpty):
                raise TransactionFailed(index, cause)
            raise cause
        out: list[str | Stat | None] = []
        for op, result in zip(ops, results, strict=True):
            if isinstance(op, Create):
                out.append(self._rel(str(result)))
            elif isinstance(op, SetData):
                out.append(_stat(result))
            else:
                out.append(None)
        return out


def _stat(stat: Any) -> Stat:
    return Stat(
        version=stat.version,
        ephemeral_owner=stat.ephemeralOwner or None,
        mtime=stat.mtime / 1000.0,
        num_children=stat.numChildren,
    )
