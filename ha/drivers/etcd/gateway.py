"""etcd's v3 API through its JSON gateway (``POST /v3/...``), on asyncio and trio.

No grpc and no asyncio bridge: HTTP/1.1 on anyio's streams (``http.py``), so the driver runs
under trio as well.
Keys and values travel in base64, int64 fields as strings, and zero values are left out of
replies (``succeeded``, ``TTL``, a PUT event's ``type``). etcd's errors come back as
``{"error", "message", "code"}`` with a gRPC code, mapped here onto ``ha.errors``.

Endpoints: requests go to the current endpoint; one that refuses the connection (nothing was
sent) is left for the next at once. Any other failure (a reply that did not come in time, a
connection dropped mid-request) is ``ConnectionLost`` with the outcome unknown, and the next
request tries the next endpoint.

Load: at most ``IN_FLIGHT`` requests are sent at once, on as many kept connections; the others
wait their turn in a FIFO before their timeout starts (with hundreds of electors starting at
once, a request's timeout would otherwise run while it waits). A few connections carry as much:
a request takes well under a millisecond on loopback, the client's CPU is the bound. A watch
has a connection of its own, outside that count.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from ...errors import AccessDenied, ConnectionLost, DriverError, SessionExpired
from .http import Connection, Endpoint, ProtocolError, Unreachable
from .settings import Settings

__all__ = ("Compacted", "Gateway", "translate")

log = logging.getLogger("ha.drivers.etcd")

# compact, and no check for cycles (a body is plain dicts and lists): less to write and to send
_encode = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode

IN_FLIGHT = 8  # requests sent at once (200 electors at once: 430 requests/s, was 100 with 32)

# gRPC status codes etcd answers with
_CANCELLED, _DEADLINE, _NOT_FOUND, _DENIED, _EXHAUSTED = 1, 4, 5, 7, 8
_OUT_OF_RANGE, _UNAVAILABLE, _UNAUTHENTICATED = 11, 14, 16


class Compacted(DriverError):
    """The revision asked for was compacted away (a watch or a read must start again)."""


def translate(code: int, message: str, where: str = "") -> DriverError:
    """The ``ha.errors`` counterpart of an etcd error (its gRPC code and message)."""
    text = message.removeprefix("etcdserver: ")
    if code == _NOT_FOUND and "lease" in text:
        return SessionExpired(f"the etcd session's lease is gone ({text})")
    if code == _DENIED:
        return AccessDenied(f"etcd denied access{where} ({text}): grant the user's role readwrite")
    if code == _UNAUTHENTICATED or text.startswith("authentication failed"):
        return AccessDenied(f"etcd rejected the credentials ({text})")
    if code == _OUT_OF_RANGE and "compacted" in text:
        return Compacted(f"etcd revision compacted ({text})")
    if code in (_CANCELLED, _DEADLINE, _EXHAUSTED, _UNAVAILABLE):
        return ConnectionLost(f"etcd could not serve the request ({text})")
    return DriverError(f"etcd refused the request: {text} (code {code})")


class Gateway:
    """Kept connections to the endpoints of one etcd cluster."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._endpoints = [Endpoint.of(url) for url in settings.endpoints]
        self._current = 0  # index of the endpoint to try first
        self._tls: ssl.SSLContext | None = None
        self._idle: list[Connection] = []  # kept connections, the last used on top
        self._open = False
        self._token: str | None = None  # etcd's auth token, with user/password
        self._turns: anyio.Semaphore | None = None  # IN_FLIGHT; made in open (needs a loop)
        self._authenticating: anyio.Lock | None = None  # one authenticate at a time

    @property
    def endpoint(self) -> str:
        return self.settings.endpoints[self._current]

    def open(self) -> None:
        opts = self.settings.options
        if self.settings.secure:
            self._tls = ssl.create_default_context(cafile=opts.ca)
            if opts.cert is not None:
                self._tls.load_cert_chain(opts.cert, opts.key)
        # a free turn is taken without a switch of tasks (a quiet driver's request: a
        # handover's leave); a wait for one is the checkpoint
        self._turns = anyio.Semaphore(IN_FLIGHT, fast_acquire=True)
        self._authenticating = anyio.Lock()
        self._open = True

    async def aclose(self) -> None:
        self._open = False
        idle, self._idle = self._idle, []
        for connection in idle:
            await connection.aclose()

    async def call(self, method: str, body: dict[str, Any], within: float) -> dict[str, Any]:
        """``POST /v3/<method>`` with ``body``; the decoded reply, or an ``ha.errors`` error
        (``ConnectionLost`` if no reply came ``within`` seconds)."""
        if not self._open or self._turns is None:
            raise ConnectionLost("the etcd driver is not started (or closed)")
        async with self._turns:
            endpoint = self.endpoint
            try:
                with anyio.fail_after(within):
                    return await self._call(method, body)
            except TimeoutError:
                self._rotate()
                raise ConnectionLost(
                    f"no reply from etcd at {endpoint} within {within:g} s"
                ) from None

    async def _call(
        self, method: str, body: dict[str, Any], *, again: bool = True, token: bool = True
    ) -> dict[str, Any]:
        if token:
            await self._authenticated()
        connection = await self._connection()
        try:
            await connection.send(f"/v3/{method}", _encode(body).encode(), self._token)
            status = await connection.receive_head()
            raw = await connection.receive_body()
        except BaseException as exc:  # cancelled mid-request too: the connection is unusable
            await connection.aclose()
            if isinstance(exc, Exception):
                raise self._lost(exc) from exc
            raise
        await self._keep(connection)
        reply = _decode(raw)
        if status == 200 and "code" not in reply:
            return reply
        error = _error_of(reply, status, self._where)
        if again and isinstance(error, AccessDenied) and "token" in str(error):
            self._token = None  # expired: authenticate once more
            return await self._call(method, body, again=False)
        raise error

    async def _connection(self) -> Connection:
        """A kept connection to the current endpoint, or a new one; an endpoint that cannot
        be reached (nothing was sent) is left for the next at once."""
        endpoint = self._endpoints[self._current]
        while self._idle:
            connection = self._idle.pop()
            if connection.endpoint is endpoint and not connection.stale():
                return connection
            await connection.aclose()
        refused = ""
        for _ in self._endpoints:
            tried = self._current
            try:
                return await Connection.open(self._endpoints[tried], self._tls)
            except Unreachable as exc:
                if (alert := _server_alert(exc)) is not None:  # ... unless it refused our cert
                    raise _refused(alert) from exc
                refused = f" ({exc})"
                if self._current == tried:  # not moved on already by another request's try
                    self._rotate()
        raise ConnectionLost(f"no etcd endpoint took the connection{refused}")

    async def _keep(self, connection: Connection) -> None:
        if connection.reusable and self._open and len(self._idle) < IN_FLIGHT:
            self._idle.append(connection)
        else:
            await connection.aclose()

    def _lost(self, exc: Exception) -> DriverError:
        """What a failed exchange (the request sent, or partly) means for the caller."""
        if isinstance(exc, DriverError):
            return exc
        if isinstance(exc, anyio.ClosedResourceError):  # closed by us (the end of a watch)
            return ConnectionLost("the etcd connection was closed")
        if (alert := _tls_alert(exc)) is not None:  # a server refusing our certificate
            return _refused(alert)
        self._rotate()
        if isinstance(exc, ProtocolError):
            return ConnectionLost(f"etcd sent a reply that is not HTTP/1.1 ({exc})")
        return ConnectionLost(f"lost contact with etcd ({type(exc).__name__})")

    async def _authenticated(self) -> None:
        """With user/password: a token, asked for once by the first request that needs one
        (the others wait for it: sent without one, etcd would refuse them)."""
        opts = self.settings.options
        if self._token is not None or opts.user is None or self._authenticating is None:
            return
        async with self._authenticating:
            if self._token is not None:
                return
            credentials = {"name": opts.user, "password": opts.password}
            reply = await self._call("auth/authenticate", credentials, again=False, token=False)
            self._token = str(reply.get("token") or "")

    @property
    def _where(self) -> str:
        return f" to {self.settings.options.user} on the prefix {self.settings.prefix or '/'}"

    def _rotate(self) -> None:
        self._current = (self._current + 1) % len(self.settings.endpoints)

    @asynccontextmanager
    async def stream(
        self, method: str, body: dict[str, Any]
    ) -> AsyncIterator[tuple[Connection, AsyncIterator[dict[str, Any]]]]:
        """``POST /v3/<method>`` answered by a stream of messages (a watch): yields the
        connection and an async iterator of the decoded messages; an error message raises.

        To end the stream early, close the connection from another task (the reader then
        gets ``ConnectionLost``); cancelling the reader does as well."""
        if not self._open:
            raise ConnectionLost("the etcd driver is not started (or closed)")
        await self._authenticated()
        connection = await self._connection()
        try:
            try:
                await connection.send(f"/v3/{method}", _encode(body).encode(), self._token)
                status = await connection.receive_head()
                if status != 200:
                    raw = await connection.receive_body()
                    raise _error_of(_decode(raw), status, self._where)
            except Exception as exc:
                raise self._lost(exc) from exc
            yield connection, _Messages(connection, self._lost)
        finally:
            await connection.aclose()


class _Messages:
    """The messages of a stream, one JSON document a line (an iterator object, not a
    generator: nothing is left unfinished when its reader is cancelled)."""

    def __init__(self, connection: Connection, lost: Any) -> None:
        self._connection = connection
        self._lost = lost
        self._pending = bytearray()

    def __aiter__(self) -> _Messages:
        return self

    async def __anext__(self) -> dict[str, Any]:
        while True:
            end = self._pending.find(b"\n")
            if end < 0:
                try:
                    data = await self._connection.receive_some()
                except Exception as exc:
                    raise self._lost(exc) from exc
                if not data:
                    raise StopAsyncIteration
                self._pending += data
                continue
            line = bytes(self._pending[:end])
            del self._pending[: end + 1]
            if not line.strip():
                continue
            message = _decode(line)
            if "error" in message and "result" not in message:
                raise _error_of(message, 200)
            return message.get("result") or {}


def _tls_alert(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error behind a transport error, if one is (a server refusing our certificate
    after the handshake: read errors, each on its own, would look like a dropped link)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError) and not isinstance(seen, ssl.SSLEOFError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _server_alert(exc: BaseException) -> ssl.SSLError | None:
    """The TLS alert a server sent during the handshake (our certificate refused, or missing),
    if one is behind ``exc``. etcd 3.5.1 (Go 1.16) sends it there, where later ones send it after
    the handshake (``_tls_alert``); our own refusal of its certificate is not one."""
    alert = _tls_alert(exc)
    return alert if alert is not None and "ALERT" in (alert.reason or "") else None


def _refused(exc: ssl.SSLError) -> AccessDenied:
    return AccessDenied(
        f"etcd refused the TLS connection ({exc.reason or exc}): check the ca, cert and key options"
    )


def _decode(raw: bytes) -> dict[str, Any]:
    try:
        reply = json.loads(raw)
    except ValueError:
        raise ConnectionLost(f"etcd sent a reply that is not JSON: {raw[:80]!r}") from None
    if not isinstance(reply, dict):
        raise ConnectionLost(f"etcd sent an unexpected reply: {raw[:80]!r}")
    return reply


def _error_of(reply: dict[str, Any], status: int, where: str = "") -> DriverError:
    error = reply.get("error")
    if isinstance(error, dict):  # a stream's error message (grpc-gateway v1)
        code = int(error.get("grpc_code") or error.get("code") or 0)
        return translate(code, str(error.get("message") or ""), where)
    code = int(reply.get("code") or 0)
    message = str(reply.get("message") or error or f"HTTP {status}")
    return translate(code, message, where)
