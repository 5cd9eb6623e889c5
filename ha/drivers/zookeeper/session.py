"""A kazoo client as the driver's session: kazoo's threads, the loop, and the states.

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
its own (CONNECTED with the new id). A client refused by every server for a session timeout
after its last contact (an ensemble replaced, its zxid started again) is replaced by a fresh
one, said in one error line: EXPIRED, then CONNECTED with the new session (``_refused``).

The driver (``driver``) reads its session's state here and in ``contact`` (``last_contact``),
and the events go out through the ``emit`` it hands over; ``watches`` hears of each
(re)connection, of a client gone, and of each change of state before its event.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
from kazoo import exceptions as kx
from kazoo.client import KazooClient
from kazoo.protocol.serialization import Connect
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry
from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE

from ..._background import BackgroundTask
from ..._clock import loop_minus_monotonic
from ...errors import ConfigurationError, ConnectionLost, NodeExists, Unavailable
from .._faults import FaultGate
from ..base import ConnectionEvent, ConnectionState, DriverEvent, validate_path
from .contact import ContactDating
from .handler import InlineHandler, inline
from .mapping import NO_REPLY, map_errors
from .settings import Options

__all__ = ("KazooSession",)

log = logging.getLogger("ha.drivers.zookeeper")

# Requests of one driver on the wire at once; the others wait their turn on the loop, before
# they are dated. A ZooKeeper session answers in order, so the sync that dates the contact
# waits behind every request sent before it: with a thousand in flight (a thousand elections
# listing their queues again at once) it came back a second or two later, too late to keep
# the contact fresh, and every active stopped, and listed its queue again. Bounded, the sync
# (which takes no turn) waits behind at most this many.
IN_FLIGHT = 128

# one request: path and version (for its errors), the kazoo call, and whether via the leader
Call = Callable[..., Awaitable[Any]]


def _bound_session_requests(client: Any, bound: float) -> None:
    """Give up on an unanswered session request after ``bound`` seconds, and try again.

    kazoo (like ZooKeeper's Java client) waits the session timeout divided by the number of
    servers for the answer to a session request. A server that took the connection and then
    never answers it (a JVM restarting or stalled, the request lost) thus costs one server
    the whole session: the session has expired by the time the client tries again, though the
    server was back long before. We bound each wait at a third of the session timeout, the
    interval at which kazoo pings: a server slower than that to answer is already late, and
    two more tries fit in the session.
    """
    hooked = _handler_method(client, "_invoke", "session requests not bounded")
    if hooked is None:
        return
    handler, invoke = hooked

    @functools.wraps(invoke)
    def bounded_invoke(timeout: float, request: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(request, Connect):
            timeout = min(timeout, bound)
        return invoke(timeout, request, *args, **kwargs)

    handler._invoke = bounded_invoke


def _handler_method(client: Any, name: str, lost: str) -> tuple[Any, Callable[..., Any]] | None:
    """kazoo's connection handler and its method ``name``, to wrap; None if this kazoo has no
    such method (said in a warning: ``lost`` is what goes without it)."""
    handler: Any = getattr(client, "_connection", None)
    method = getattr(handler, name, None)
    if method is None:
        log.warning("this kazoo has no ConnectionHandler.%s: %s", name, lost)
        return None
    return handler, method


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


class KazooSession:
    """One kazoo client, started and stopped with the driver, and its session's states.

    ``rearm``: the session is (re)connected, arm the watches that are not armed; ``down``:
    the client is gone with every watch it had set; ``changed``: a connection event is about
    to be delivered (what came before goes first)."""

    def __init__(
        self,
        hosts: str,
        chroot: str,
        options: Options,
        *,
        emit: Callable[[DriverEvent], None],
        rearm: Callable[[], None],
        down: Callable[[], None],
        changed: Callable[[], None],
    ) -> None:
        self.hosts = hosts
        self.chroot = chroot
        self.options = options
        self._send_event = emit
        self._rearm_watches = rearm
        self._watches_down = down
        self._connection_changed = changed
        self.acl = CREATOR_ALL_ACL if options.acl == "creator" else OPEN_ACL_UNSAFE
        self._requested_timeout = options.session_timeout
        self.timeout = options.session_timeout
        self.id: int | None = None
        self.connected = False
        self.contact = ContactDating(
            options.tick_time,
            timeout=lambda: self.timeout,
            connected=lambda: self.connected,
            sync=self._sync,
        )
        self._granted_timeout: float | None = None  # written by kazoo's thread
        self.client: Any = None
        self._tg: anyio.abc.TaskGroup | None = None  # the session's tasks' (``_serve``)
        self._background: BackgroundTask | None = None
        self._turns: anyio.Semaphore | None = None  # made on the loop, in start()
        self._inbox: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self.closing = False
        self._clock_offset = 0.0  # anyio.current_time() - time.monotonic(), taken on the loop
        self._connect_sent: float | None = None  # time.monotonic(); kazoo's connection thread
        self._first_session = anyio.Event()
        self._refused_since: float | None = None  # refused at every attempt since (_refused)
        # test faults (faults.py): injected errors and a gate on requests; once a test arms
        # it, call is a gated one (_armed)
        self.gate = FaultGate("ZooKeeper", self._armed)
        self.call: Call = self._request

    @property
    def last_contact(self) -> float:
        """When the ZooKeeper leader last heard from this session (dated by ``contact``)."""
        return self.contact.last_contact

    # --- plumbing between kazoo's threads and the loop -------------------------------------

    def post(self, fn: Callable[[], None]) -> None:
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

    async def _request(
        self,
        path: str,
        version: int,
        request: Callable[[], Any],
        *,
        leader: bool = False,
        turn: bool = True,
    ) -> Any:
        """Issue one kazoo async request and wait for its reply on the loop.

        ``leader``: the request goes through the ZooKeeper leader (a write or a sync), so its
        successful reply dates the contact of requests answered earlier (see the module's doc).
        ``turn``: wait for one of the ``IN_FLIGHT`` turns first (the probe's sync does not).
        """
        if self._tg is None or self.client is None or self._turns is None:
            raise ConnectionLost("the ZooKeeper driver is not started (or closed)")
        async with self._turns if turn else contextlib.nullcontext():
            return await self._issue(path, version, request, leader)

    async def _issue(
        self, path: str, version: int, request: Callable[[], Any], leader: bool
    ) -> Any:
        done = anyio.Event()
        sent = anyio.current_time()  # before the request is queued: never later than its sending
        with map_errors(path, version):
            result = request()
            result.rawlink(inline(lambda _: self.post(done.set)))
            timeout = self.options.op_timeout or self.timeout
            with anyio.move_on_after(timeout):
                await done.wait()
            if not done.is_set():
                raise ConnectionLost(f"no reply from ZooKeeper within {timeout:g} s")
            # read after the reply arrived, so never earlier than the server's touch of it
            replied = anyio.current_time()
            try:
                value = result.get_nowait()
            except kx.KazooException as exc:
                if not isinstance(exc, NO_REPLY):
                    self.contact.remember(sent, replied)
                raise
        if leader:
            self.contact.through_leader(sent, replied)
        self.contact.remember(sent, replied)
        return value

    def _armed(self) -> None:
        """A test armed the gate: a started driver's requests wait while it is frozen, then
        raise the next injected error first."""
        gate, send = self.gate, self._request

        async def gated(
            path: str,
            version: int,
            request: Callable[[], Any],
            *,
            leader: bool = False,
            turn: bool = True,
        ) -> Any:
            if self._tg is not None and self.client is not None:
                await gate.admit()
            return await send(path, version, request, leader=leader, turn=turn)

        self.call = gated

    async def _sync(self) -> None:
        # no turn to wait for: behind at most IN_FLIGHT requests, never behind a backlog
        await self.call("/", -1, lambda: self.client.sync_async("/"), leader=True, turn=False)

    def abs(self, path: str) -> str:
        validate_path(path)
        if not self.chroot:
            return path
        return self.chroot if path == "/" else self.chroot + path

    def rel(self, path: str) -> str:
        if not self.chroot:
            return path
        return path[len(self.chroot) :] or "/"

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        if self._background is not None or self.closing:
            raise RuntimeError("driver already started")
        opts = self.options
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.client = self._new_client()
        self._clock_offset = loop_minus_monotonic()
        # a free turn is taken without a switch of tasks (a quiet driver's request: a
        # handover's leave); a wait for one is the checkpoint
        self._turns = anyio.Semaphore(IN_FLIGHT, fast_acquire=True)
        # the session's tasks live in a task group of their own background task, not in one
        # entered here: drivers are closed in any order (``Driver``), and a task group left
        # open in the caller's task made that order the reverse of the starts
        ready = anyio.Event()
        self._background = BackgroundTask(self._serve, ready, name=f"ZooKeeper at {self.hosts}")
        self._background.start()
        try:
            await ready.wait()
            if self._tg is None or self.closing:
                raise ConnectionLost("the ZooKeeper driver was closed as it started")
            await anyio.to_thread.run_sync(self.client.start_async)
            with anyio.move_on_after(opts.connect_timeout):
                await self._first_session.wait()  # (set by a close too)
            if self.closing:
                raise ConnectionLost("the ZooKeeper driver was closed as it started")
            if not self._first_session.is_set():
                raise Unavailable(
                    f"could not reach ZooKeeper at {self.hosts} within"
                    f" {opts.connect_timeout:g} s (connect_timeout)"
                )
            await self._check_chroot()
            if self.contact.tick > self.timeout / 4:
                log.warning(
                    "tick_time %g s is long for a session timeout of %g s: contact through a"
                    " follower is dated that much late, and an active may stop for want of it",
                    self.contact.tick,
                    self.timeout,
                )
            self._tg.start_soon(self.contact.probe)
        except BaseException:
            await self._shutdown(emit=False)
            raise

    async def _serve(self, ready: anyio.Event) -> None:
        """The session's tasks (the pump, the probe, a swap of clients), until closed."""
        tg = anyio.create_task_group()
        try:
            async with tg:
                self._tg = tg
                ready.set()
                tg.start_soon(self._pump)
                await anyio.sleep_forever()
        finally:
            if self._tg is tg:
                self._tg = None  # requests fail as on a closed driver
            ready.set()  # (start() waits for it)

    def _new_client(self) -> Any:
        """A kazoo client of our own, with no session and no transaction seen yet."""
        opts = self.options
        retry = KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_jitter=0.1, max_delay=1.0)
        client = KazooClient(
            hosts=self.hosts,
            handler=InlineHandler(),
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
        client.add_listener(self.kazoo_state)
        self._date_connects(client)
        _bound_session_requests(client, self._requested_timeout / 3)
        return client

    async def _check_chroot(self) -> None:
        if not self.chroot:
            return
        stat = await self.call(self.chroot, -1, lambda: self.client.exists_async(self.chroot))
        if stat is not None:
            return
        if not self.options.create_chroot:
            raise ConfigurationError(
                f"the chroot {self.chroot} does not exist on ZooKeeper at {self.hosts};"
                " create it, or allow the driver to (create_chroot=true)"
            )
        try:
            await self.call(
                self.chroot,
                -1,
                lambda: self.client.create_async(self.chroot, b"", acl=self.acl, makepath=True),
                leader=True,
            )
        except NodeExists:
            pass

    async def aclose(self) -> None:
        # started (or starting), or its tasks died: the client is stopped all the same (it
        # would keep the session, and its ephemeral nodes, alive)
        if self._background is None and self.client is None:
            return
        await self._shutdown(emit=True)

    async def _shutdown(self, *, emit: bool) -> None:
        self.closing = True
        self._first_session.set()  # a start waiting for its session gives up now
        had_session = self.id is not None
        self.id = None
        self.connected = False
        client, self.client = self.client, None
        if client is not None:
            client.remove_listener(self.kazoo_state)

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
        self._tg = None
        background, self._background = self._background, None
        try:
            if background is not None:
                await background.stop()  # shielded: the tasks have ended when it returns
        finally:
            for sock in (self._wake_r, self._wake_w):
                if sock is not None:
                    sock.close()
            self._wake_r = self._wake_w = None
            self._watches_down()
            if emit and had_session:
                self._send_event(ConnectionEvent(ConnectionState.CLOSED, None))

    # --- session ----------------------------------------------------------------------------

    def _granted(self, timeout: float) -> None:  # kazoo's thread
        self._granted_timeout = timeout

    def _date_connects(self, client: Any) -> None:
        """Have kazoo's connection thread note when it starts each connection attempt (before
        the connect request is sent), to date the connection it may open."""
        hooked = _handler_method(client, "_connect", "reconnections not dated")
        if hooked is None:
            return
        handler, connect = hooked

        @functools.wraps(connect)
        def dated_connect(*args: Any, **kwargs: Any) -> Any:
            self._connect_sent = time.monotonic()
            try:
                return connect(*args, **kwargs)
            except kx.ConnectionDropped:
                if getattr(handler, "_socket", None) is not None:
                    # the server took the connection and closed it without answering the
                    # session request: it refuses this client (see _refused)
                    self.post(functools.partial(self._refused, client))
                raise

        handler._connect = dated_connect

    def _refused(self, client: Any) -> None:
        """A server closed our connection without answering the session request.

        A server refuses a client that has seen a later transaction (zxid) than its own: the
        ensemble was replaced, or its data wiped, and its zxid started again. kazoo keeps the
        zxid it has seen for the life of the client, so it would be refused forever, new
        session or not. Once no server has heard from us for a whole session timeout, our
        session is over anyway (the timing assumption of ``drivers/base.py``), so a fresh
        kazoo client, and a fresh session, loses nothing (Curator does the same: a new
        ZooKeeper handle once the session timeout has passed without a connection). Refusals
        for less than a session timeout (a server that is starting, or joining its quorum,
        closes connections too) are waited out.
        """
        if client is not self.client or self.closing or self.connected or self._tg is None:
            return
        if not client.last_zxid:  # a client that has seen nothing is refused for other reasons
            return
        now = anyio.current_time()
        if self._refused_since is None:
            self._refused_since = now
        if min(now - self.contact.last_contact, now - self._refused_since) <= self.timeout:
            return
        self._refused_since = None
        log.error(
            "ZooKeeper at %s refuses this client: it has seen a later transaction (zxid) than"
            " the servers have, so the ensemble was replaced or its data wiped; starting a"
            " fresh session",
            self.hosts,
        )
        fresh = self._new_client()
        self.client = fresh
        client.remove_listener(self.kazoo_state)
        old, self.id = self.id, None
        self._watches_down()
        if old is not None:
            self._send_event(ConnectionEvent(ConnectionState.EXPIRED, old))
        self._tg.start_soon(self._swap_clients, client, fresh)

    async def _swap_clients(self, old: Any, fresh: Any) -> None:
        def swap() -> None:
            try:
                old.stop()  # not connected: no goodbye to send, its threads end
            finally:
                old.close()
            if not self.closing:
                fresh.start_async()

        def stop_fresh() -> None:
            fresh.stop()
            fresh.close()

        try:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(swap)
                if self.closing:  # closed meanwhile: its stop may have come before our start
                    await anyio.to_thread.run_sync(stop_fresh)
        except Exception:
            log.warning("replacing the kazoo client failed", exc_info=True)

    def lost_contact(self) -> None:
        """The connection dropped (a test's disconnect): DISCONNECTED now, if connected (a
        SUSPENDED from kazoo, when it comes, then changes nothing)."""
        if self.connected:
            self.connected = False
            self._send_event(ConnectionEvent(ConnectionState.DISCONNECTED, self.id))

    def abandon(self) -> Any:
        """A test's crash: nothing kazoo reports from now on is passed on. The kazoo client,
        to kill; None if there is none (not started, or closing)."""
        client = self.client
        if client is None or self.closing:
            return None
        self.closing = True
        self.connected = False
        client.remove_listener(self.kazoo_state)
        return client

    def kazoo_state(self, state: str) -> None:  # kazoo's connection thread: must not block
        client = self.client
        client_id = client.client_id if client is not None else None
        session = client_id[0] if client_id else None
        contact = None
        if state == KazooState.CONNECTED and self._connect_sent is not None:
            # CONNECTED is reported from inside the connection attempt that began then
            contact = self._connect_sent + self._clock_offset
        self.post(
            functools.partial(self._state_changed, state, session, self._granted_timeout, contact)
        )

    def _state_changed(
        self, state: str, session: int | None, granted: float | None, contact: float | None = None
    ) -> None:
        if self.closing:
            return
        self._connection_changed()
        old = self.id
        if state == KazooState.CONNECTED and session is not None:
            if granted is not None:
                if granted < self._requested_timeout:
                    log.warning(
                        "ZooKeeper granted a session timeout of %g s instead of %g s",
                        granted,
                        self._requested_timeout,
                    )
                self.timeout = granted
            self.connected = True
            self._refused_since = None
            if session != old:
                # the old session is gone (a new one without LOST first) and said so before the
                # new one's contact is dated: no reader may take that contact for the old one's
                self.id = session
                if old is not None:
                    self._send_event(ConnectionEvent(ConnectionState.EXPIRED, old))
            # the server answered a connect request sent at ``contact`` (dated on kazoo's
            # thread, not now: the loop may have been stalled since), having had the leader
            # revalidate or create the session; it is later than every earlier answer
            self.contact.connect_dated(contact)
            if session == old:
                self._send_event(ConnectionEvent(ConnectionState.RECONNECTED, session))
            else:
                self._send_event(ConnectionEvent(ConnectionState.CONNECTED, session))
            self._first_session.set()
            self.contact.probe_now()
            self._rearm_watches()
        elif state == KazooState.SUSPENDED:
            if self.connected:
                self.connected = False
                self._send_event(ConnectionEvent(ConnectionState.DISCONNECTED, old))
        elif state == KazooState.LOST:
            self.connected = False
            self.id = None
            if old is not None:
                self._send_event(ConnectionEvent(ConnectionState.EXPIRED, old))
