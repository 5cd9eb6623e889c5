"""A small HTTP/1.1 server on anyio's TCP listener: GET and HEAD, one response per connection.

What ``ha run --http`` and ``ha jobs manager --http`` need for probes and scrapes, served by
tasks of the caller's task group (one per connection, no thread), under asyncio and trio
alike. Each request is read up to its blank line (8 KiB at most, 10 s at most), answered with
``Connection: close`` and the connection closed: probes and Prometheus open one connection per
request anyway, and the server keeps no state between requests. A request body is never read
(GET and HEAD have none); other methods get 405.

``serve`` hands the address it bound (port 0 picks a free one) to ``task_status.started``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from ..errors import ConfigurationError

__all__ = ("Handler", "Response", "parse_address", "serve")

log = logging.getLogger("ha.http")

MAX_HEAD = 8192
READ_TIMEOUT = 10.0
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            500: "Internal Server Error", 503: "Service Unavailable"}  # fmt: skip


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
    async with listener:
        task_status.started((str(bound[0]), int(bound[1])))
        await listener.serve(lambda stream: _answer(stream, handler))


async def _answer(stream: anyio.abc.SocketStream, handler: Handler) -> None:
    async with stream:
        try:
            head = await _read_head(stream)
            if head is None:
                return
            response, method = await _respond(head, handler)
            await stream.send(_encode(response, with_body=method != "HEAD"))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, TimeoutError):
            return  # the client went away: nothing to answer


async def _read_head(stream: anyio.abc.SocketStream) -> bytes | None:
    data = b""
    with anyio.fail_after(READ_TIMEOUT):
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
