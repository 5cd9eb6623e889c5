"""A small HTTP/1.1 server on anyio's TCP listener: GET and HEAD, one response per connection.

What ``ha run --http`` and ``ha jobs manager --http`` need for probes and scrapes, served by
tasks of the caller's task group (one per connection, no thread), under asyncio and trio
alike. Each request is read up to its blank line (8 KiB at most), answered with
``Connection: close`` and the connection closed: probes and Prometheus open one connection per
request anyway, and the server keeps no state between requests. A request body is never read
(GET and HEAD have none); other methods get 405.

The server runs inside the supervisor's task group, so no client may take it down (``Limits``):

- At most ``max_connections`` at once (64), and never more than a quarter of the process's
  open-file limit: the rest is the supervisor's, its backend's and COMMAND's. At the cap a new
  connection takes the place of the oldest one still waiting for its request (nginx drops idle
  connections the same way when it runs out), so a flood of idle connections cannot starve a
  probe; when every connection is being answered, the new one is closed at once.
- A request must arrive in full within ``request_timeout`` (5 s) of its accept, however its bytes
  trickle in (slowloris), and the answer must be taken within ``send_timeout`` (5 s); a
  connection past either is closed without an answer. The handler's own time is its own
  (``/leader`` bounds its read of the backend).
- An accept that fails (no file descriptor left: EMFILE, ENFILE; or anything else) is tried
  again after a pause doubling from 5 ms to 1 s, as Go's net/http does; meanwhile connections
  wait in the kernel's backlog.
- Each of these troubles is logged once per spell (a spell ends after a quiet minute), so a
  flood cannot flood the log either.
- Once ``task_status.started`` has been called, only cancellation leaves ``serve``: whatever
  fails in a connection ends that connection.

``serve`` hands the address it bound (port 0 picks a free one) to ``task_status.started``; an
address it cannot bind is a ``ConfigurationError`` raised before that.
"""

from __future__ import annotations

import json
import logging
import math
import resource
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from ..errors import ConfigurationError

__all__ = ("Handler", "Limits", "Response", "parse_address", "serve")

log = logging.getLogger("ha.http")

MAX_HEAD = 8192
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            500: "Internal Server Error", 503: "Service Unavailable"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Limits:
    """What the clients of one server may hold (the module's docstring says what happens at
    each limit); tests pass short ones."""

    max_connections: int = 64
    request_timeout: float = 5.0  # from the accept to the request's blank line, in total
    send_timeout: float = 5.0  # to write the answer, in total

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, not {self.max_connections}")
        for name in ("request_timeout", "send_timeout"):
            if not getattr(self, name) > 0:  # NaN too
                raise ValueError(f"{name} must be above 0, not {getattr(self, name)}")


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"

    @classmethod
    def text(cls, status: int, text: str) -> Response:
        return cls(status, text.encode() + b"\n")

    @classmethod
    def json(cls, status: int, document: Any) -> Response:
        return cls(status, json.dumps(document).encode() + b"\n", "application/json")


Handler = Callable[[str], Awaitable[Response]]  # the request's path (no query) -> response


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT`` or ``:PORT`` (every interface) -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigurationError(f"--http {text!r}: give HOST:PORT, e.g. 127.0.0.1:8008")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


async def serve(
    host: str,
    port: int,
    handler: Handler,
    *,
    limits: Limits = DEFAULT_LIMITS,
    task_status: anyio.abc.TaskStatus[tuple[str, int]] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Answer requests on ``host:port`` with ``handler`` until cancelled."""
    try:
        listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    except OSError as exc:  # in use, not ours, unknown host: said in one line
        raise ConfigurationError(
            f"cannot serve http on {host}:{port}: {exc.strerror or exc}"
        ) from None
    bound = listener.extra(SocketAttribute.local_address)
    server = _Server(handler, limits, _cap(limits.max_connections))
    async with listener, anyio.create_task_group() as tg:
        task_status.started((str(bound[0]), int(bound[1])))
        for one in listener.listeners:  # a name may resolve to several addresses
            tg.start_soon(server.accept, cast(anyio.abc.SocketListener, one), tg)


def _cap(wanted: int) -> int:
    """``wanted``, but no more than a quarter of the descriptors this process may open."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft // 4 >= wanted:
        return wanted
    cap = max(1, soft // 4)
    log.info("at most %d connections at once (a quarter of the open-file limit)", cap)
    return cap


@dataclass(eq=False, slots=True)
class _Connection:
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    waiting: bool = True  # for its request: it may make room for a newer connection


class _Spell:
    """A trouble that recurs: said when it starts, not again until it has stopped for a minute."""

    QUIET = 60.0

    def __init__(self) -> None:
        self._last = -math.inf

    def starts(self) -> bool:
        """Note that it happened; whether that starts a spell."""
        now = anyio.current_time()
        starts = now - self._last >= self.QUIET
        self._last = now
        return starts


class _Server:
    def __init__(self, handler: Handler, limits: Limits, cap: int):
        self.handler = handler
        self.limits = limits
        self.cap = cap
        self.open: dict[_Connection, None] = {}  # oldest first
        self._crowded = _Spell()
        self._failing = _Spell()

    async def accept(self, listener: anyio.abc.SocketListener, tg: anyio.abc.TaskGroup) -> None:
        pause = 0.0
        while True:
            try:
                stream = await listener.accept()
            except anyio.ClosedResourceError:
                return  # closed by serve on its way out
            except Exception as exc:  # EMFILE above all: the process runs on, so do we
                if self._failing.starts():
                    log.warning("cannot accept connections (%s): trying again", _why(exc))
                log.debug("accept failed: %s", _why(exc))
                pause = min(2 * pause or 0.005, 1.0)
                await anyio.sleep(pause)
                continue
            pause = 0.0
            await self._admit(stream, tg)

    async def _admit(self, stream: anyio.abc.SocketStream, tg: anyio.abc.TaskGroup) -> None:
        if len(self.open) >= self.cap:
            if self._crowded.starts():
                log.warning(
                    "%d connections open: each new one replaces the oldest still waiting"
                    " for its request, or is closed",
                    self.cap,
                )
            oldest = next((c for c in self.open if c.waiting), None)
            if oldest is None:  # every one is being answered
                with anyio.CancelScope(shield=True):
                    await _close(stream)
                return
            del self.open[oldest]  # counted out now: its task closes it at its next step
            oldest.scope.cancel()
        connection = _Connection()
        self.open[connection] = None
        tg.start_soon(self._connection, stream, connection)

    async def _connection(self, stream: anyio.abc.SocketStream, connection: _Connection) -> None:
        try:
            with connection.scope:
                await self._answer(stream, connection)
        except Exception as exc:  # a connection's trouble ends that connection, nothing else
            log.debug("a connection failed: %r", exc)
        finally:
            self.open.pop(connection, None)
            with anyio.CancelScope(shield=True):
                await _close(stream)

    async def _answer(self, stream: anyio.abc.SocketStream, connection: _Connection) -> None:
        head = None
        with anyio.move_on_after(self.limits.request_timeout):
            head = await _read_head(stream)
        connection.waiting = False
        if head is None:
            return  # it left, or was too slow: closed without an answer
        response, method = await _respond(head, self.handler)
        with anyio.move_on_after(self.limits.send_timeout):
            await stream.send(_encode(response, with_body=method != "HEAD"))


async def _close(stream: anyio.abc.SocketStream) -> None:
    try:
        await stream.aclose()
    except Exception:  # already reset by the client: closed all the same
        pass


def _why(exc: Exception) -> str:
    cause = exc if isinstance(exc, OSError) else exc.__cause__  # trio's come wrapped by anyio
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror
    return repr(exc)


async def _read_head(stream: anyio.abc.SocketStream) -> bytes | None:
    data = b""
    while b"\r\n\r\n" not in data and b"\n\n" not in data:
        if len(data) > MAX_HEAD:
            return data  # answered 400 below: no request line ends in time
        try:
            data += await stream.receive()
        except anyio.EndOfStream:
            return data or None
    return data


async def _respond(head: bytes, handler: Handler) -> tuple[Response, str]:
    line = head.split(b"\n", 1)[0].decode("latin-1").strip()
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/") or len(head) > MAX_HEAD:
        return Response.text(400, "bad request"), "GET"
    method, target = parts[0], parts[1]
    if method not in ("GET", "HEAD"):
        return Response.text(405, f"{method} not allowed: GET or HEAD"), method
    path = target.split("?", 1)[0]
    try:
        return await handler(path), method
    except Exception as exc:
        log.exception("http: %s %s failed", method, path)
        return Response.text(500, f"internal error: {type(exc).__name__}"), method


def _encode(response: Response, *, with_body: bool) -> bytes:
    reason = _REASONS.get(response.status, "")
    head = (
        f"HTTP/1.1 {response.status} {reason}\r\n"
        f"Content-Type: {response.content_type}\r\n"
        f"Content-Length: {len(response.body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode("latin-1")
    return head + response.body if with_body else head
