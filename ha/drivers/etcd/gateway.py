"""etcd's v3 API through its JSON gateway (``POST /v3/...``), with httpx, on asyncio and trio.

No grpc and no asyncio bridge: httpx runs on anyio, so the driver runs under trio as well.
Keys and values travel in base64, int64 fields as strings, and zero values are left out of
replies (``succeeded``, ``TTL``, a PUT event's ``type``). etcd's errors come back as
``{"error", "message", "code"}`` with a gRPC code, mapped here onto ``ha.errors``.

Endpoints: requests go to the current endpoint; one that refuses the connection (nothing was
sent) is left for the next at once. Any other failure (a reply that did not come in time, a
connection dropped mid-request) is ``ConnectionLost`` with the outcome unknown, and the next
request tries the next endpoint.

Load: at most ``IN_FLIGHT`` requests are sent at once, on as many kept connections; the others
wait their turn in a FIFO before their timeout starts. httpx's pool would queue them too, but
for every request it hands a connection it rescans its queue and polls each idle connection
(a syscall each): with 64 connections and hundreds of electors starting at once, that was most
of the driver's CPU, and a request's timeout ran while it waited. A few connections carry as
much: a request takes about a millisecond on loopback, the client's CPU is the bound.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any

import anyio
import httpx

from ...errors import AccessDenied, ConnectionLost, DriverError, SessionExpired
from .settings import Settings

__all__ = ("Compacted", "Gateway", "translate")

log = logging.getLogger("ha.drivers.etcd")

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
    """One httpx client to the endpoints of one etcd cluster."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._current = 0  # index of the endpoint to try first
        self._client: httpx.AsyncClient | None = None
        self._token: str | None = None  # etcd's auth token, with user/password
        self._turns: anyio.Semaphore | None = None  # IN_FLIGHT; made in open (needs a loop)
        self._authenticating: anyio.Lock | None = None  # one authenticate at a time

    @property
    def endpoint(self) -> str:
        return self.settings.endpoints[self._current]

    def open(self) -> None:
        opts = self.settings.options
        verify: ssl.SSLContext | bool = True
        if self.settings.secure:
            verify = ssl.create_default_context(cafile=opts.ca)
            if opts.cert is not None:
                verify.load_cert_chain(opts.cert, opts.key)
        self._turns = anyio.Semaphore(IN_FLIGHT)
        self._authenticating = anyio.Lock()
        self._client = httpx.AsyncClient(
            verify=verify,
            timeout=None,  # each call gives its own (see call)
            trust_env=False,  # no proxy from the environment between a session and etcd
            # every connection kept (+ the watch stream's): closing idle ones made a busy driver
            # reconnect per request
            limits=httpx.Limits(
                max_connections=IN_FLIGHT + 4, max_keepalive_connections=IN_FLIGHT + 4
            ),
        )

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def call(self, method: str, body: dict[str, Any], within: float) -> dict[str, Any]:
        """``POST /v3/<method>`` with ``body``; the decoded reply, or an ``ha.errors`` error
        (``ConnectionLost`` if no reply came ``within`` seconds)."""
        if self._turns is None:
            raise ConnectionLost("the etcd driver is not started (or closed)")
        async with self._turns:
            return await self._timed(method, body, within)

    async def _timed(self, method: str, body: dict[str, Any], within: float) -> dict[str, Any]:
        endpoint = self.endpoint
        try:
            with anyio.fail_after(within):
                # httpx's own timeout first: an error that ends its reads, where a cancelled
                # read would leave its generators unfinished (trio reports them)
                return await self._call(method, body, httpx.Timeout(within * 0.9))
        except TimeoutError:
            self._rotate()
            raise ConnectionLost(f"no reply from etcd at {endpoint} within {within:g} s") from None

    async def _call(
        self,
        method: str,
        body: dict[str, Any],
        waits: httpx.Timeout,
        *,
        again: bool = True,
        token: bool = True,
    ) -> dict[str, Any]:
        client = self._client
        if client is None:
            raise ConnectionLost("the etcd driver is not started (or closed)")
        if token:
            await self._authenticated(waits)
        content = json.dumps(body).encode()
        response, refused = None, ""
        for _ in self.settings.endpoints:
            try:
                response = await client.send(self._request(method, content, waits))
                break
            except httpx.ConnectError as exc:  # nothing was sent: the next endpoint may answer
                if (alert := _server_alert(exc)) is not None:  # ... unless it refused our cert
                    raise _refused(alert) from exc
                refused = f" ({_reason(exc)})"
                self._rotate()
            except ssl.SSLError as exc:  # httpcore lets a TLS alert after the handshake out
                raise _refused(exc) from exc
            except httpx.TimeoutException as exc:
                self._rotate()
                raise ConnectionLost(f"no reply from etcd in time ({type(exc).__name__})") from exc
            except httpx.TransportError as exc:
                self._rotate()
                if (alert := _tls_alert(exc)) is not None:  # trio's way of telling it
                    raise _refused(alert) from exc
                raise ConnectionLost(f"lost contact with etcd ({type(exc).__name__})") from exc
        if response is None:
            raise ConnectionLost(f"no etcd endpoint took the connection{refused}")
        reply = _decode(response.content)
        if response.status_code == 200 and "code" not in reply:
            return reply
        error = _error_of(reply, response.status_code, self._where)
        if again and isinstance(error, AccessDenied) and "token" in str(error):
            self._token = None  # expired: authenticate once more
            return await self._call(method, body, waits, again=False)
        raise error

    async def _authenticated(self, waits: httpx.Timeout | None = None) -> None:
        """With user/password: a token, asked for once by the first request that needs one
        (the others wait for it: sent without one, etcd would refuse them)."""
        opts = self.settings.options
        if self._token is not None or opts.user is None or self._authenticating is None:
            return
        async with self._authenticating:
            if self._token is not None:
                return
            credentials = {"name": opts.user, "password": opts.password}
            reply = await self._call(
                "auth/authenticate",
                credentials,
                waits or httpx.Timeout(None),
                again=False,
                token=False,
            )
            self._token = str(reply.get("token") or "")

    def _request(self, method: str, content: bytes, waits: httpx.Timeout) -> httpx.Request:
        assert self._client is not None
        headers = {"Content-Length": str(len(content)), "Content-Type": "application/json"}
        if self._token:
            headers["Authorization"] = self._token
        request = self._client.build_request(
            "POST", f"{self.endpoint}/v3/{method}", headers=headers, timeout=waits
        )
        request.stream = _Body(content)
        return request

    @property
    def _where(self) -> str:
        return f" to {self.settings.options.user} on the prefix {self.settings.prefix or '/'}"

    def _rotate(self) -> None:
        self._current = (self._current + 1) % len(self.settings.endpoints)

    @asynccontextmanager
    async def stream(self, method: str, body: dict[str, Any]) -> AsyncIterator[Any]:
        """``POST /v3/<method>`` answered by a stream of messages (a watch): yields the
        response and an async iterator of its decoded messages; an error message raises.

        To end the stream early, close the response from another task (the reader then gets
        ``ConnectionLost``): cancelling the reader instead would leave httpx's generators
        unfinished, which trio reports when they are collected."""
        client = self._client
        if client is None:
            raise ConnectionLost("the etcd driver is not started (or closed)")
        await self._authenticated()
        try:
            request = self._request(method, json.dumps(body).encode(), httpx.Timeout(None))
            response = await client.send(request, stream=True)
            try:
                if response.status_code != 200:
                    reply = _decode(await response.aread())
                    raise _error_of(reply, response.status_code, self._where)
                async with aclosing(_messages(response)) as messages:
                    yield response, messages
            finally:
                await response.aclose()
        except httpx.TransportError as exc:
            self._rotate()
            raise ConnectionLost(f"lost the etcd watch stream ({type(exc).__name__})") from exc
        except ssl.SSLError as exc:
            raise _refused(exc) from exc


class _Body(httpx.AsyncByteStream):
    """A request's body for httpx: an iterator object, where httpx would wrap bytes in an
    async generator of its own, left unfinished when sending fails (trio reports it)."""

    def __init__(self, data: bytes) -> None:
        self._data: bytes | None = data

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        if self._data is None:
            raise StopAsyncIteration
        data, self._data = self._data, None
        return data


async def _messages(response: httpx.Response) -> AsyncGenerator[dict[str, Any], None]:
    async with aclosing(response.aiter_lines()) as lines:  # type: ignore[type-var]
        async for line in lines:
            if not line.strip():
                continue
            message = _decode(line.encode())
            if "error" in message and "result" not in message:
                raise _error_of(message, 200)
            yield message.get("result") or {}


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


def _reason(exc: BaseException) -> str:
    """What an error, or the first of its causes that says anything, says."""
    seen: BaseException | None = exc
    while seen is not None and not str(seen):
        seen = seen.__cause__ or seen.__context__
    return str(seen or type(exc).__name__)


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
