"""HTTP/1.1 on anyio streams, as much of it as etcd's JSON gateway needs.

One ``Connection`` carries one request at a time: a ``POST`` with a JSON body, answered with a
``Content-Length`` body or a chunked one (a watch streams its messages as chunks, each flushed
by the gateway as it comes). The connection is kept for the next request when the reply says
nothing against it; a kept connection that the server closed while it sat idle is found with
one non-blocking peek at its socket before it is used again, so a request is only sent on a
connection that was open a moment before.

Why not httpx: a request through httpx cost about 0.7 ms of client CPU on this machine, about
four times what this costs (most of it in its pool and its layers of streams); an election's
handover is a request and a watch message, and a thousand electors in one process are bound by
that CPU. The transport stays small because the other end is always the same server: anything
it does not expect (a malformed head, a body without framing it knows) is a ``ProtocolError``
and the connection is dropped.

Errors: ``Unreachable`` when no connection could be made (nothing was sent); a reply that
cannot be read raises what anyio raises (``EndOfStream``, ``BrokenResourceError``,
``ClosedResourceError``), an ``OSError``, an ``ssl.SSLError`` (a server refusing our
certificate after the handshake), or ``ProtocolError``; the caller maps them.
"""

from __future__ import annotations

import select
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import anyio.abc

__all__ = ("Connection", "Endpoint", "ProtocolError", "Unreachable")

MAX_HEAD = 64 * 1024  # a reply's status line and headers
READ_SIZE = 64 * 1024


class ProtocolError(Exception):
    """The server's reply is not the HTTP/1.1 this client reads."""


class Unreachable(Exception):
    """No connection could be made to an endpoint; nothing was sent."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One server's base URL, taken apart once: ``http(s)://HOST:PORT``."""

    url: str
    host: str  # without IPv6 brackets, for connecting
    port: int
    secure: bool
    authority: str  # HOST:PORT as the Host header has it

    @classmethod
    def of(cls, url: str) -> Endpoint:
        parts = urlsplit(url)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"not an endpoint URL: {url!r}")
        return cls(url, parts.hostname, parts.port, parts.scheme == "https", parts.netloc)


class Connection:
    """One kept HTTP/1.1 connection to one endpoint."""

    def __init__(self, stream: anyio.abc.ByteStream, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._stream = stream
        # looked up once: anyio's extra() asks the kernel for the peer's address on every call
        self._socket = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        self._buffer = bytearray()
        self._body: _Framing | None = None  # how the current reply's body ends
        self._keep = False  # the current reply lets the connection be kept
        self.reusable = False  # the last reply was read to its end and allows another

    @classmethod
    async def open(cls, endpoint: Endpoint, tls: ssl.SSLContext | None) -> Connection:
        """Connect (and shake hands, with TLS); ``Unreachable`` if that fails (with the
        ``ssl.SSLError`` as its cause if the handshake did)."""
        try:
            if endpoint.secure:
                stream: anyio.abc.ByteStream = await anyio.connect_tcp(
                    endpoint.host,
                    endpoint.port,
                    ssl_context=tls or ssl.create_default_context(),
                    tls_hostname=endpoint.host,
                )
            else:
                stream = await anyio.connect_tcp(endpoint.host, endpoint.port)
        except (OSError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            raise Unreachable(_reason(exc)) from exc
        return cls(stream, endpoint)

    def stale(self) -> bool:
        """True if the server closed this idle connection (or sent something unasked)."""
        sock = self._socket
        if self._buffer or sock is None or sock.fileno() < 0:
            return True
        poll = select.poll()  # readable: the end of the stream, or bytes no request asked for
        poll.register(sock.fileno(), select.POLLIN)
        return bool(poll.poll(0))

    async def aclose(self) -> None:
        """Drop the connection at once (also from another task, to end a reply being read:
        that read then fails with ``ClosedResourceError``)."""
        self.reusable = False
        with anyio.CancelScope(shield=True):
            await anyio.aclose_forcefully(self._stream)

    # --- one exchange -----------------------------------------------------------------------

    async def send(self, target: str, body: bytes, token: str | None = None) -> None:
        """Send ``POST target`` with a JSON ``body`` (and etcd's auth ``token``)."""
        self.reusable = False
        head = (
            f"POST {target} HTTP/1.1\r\nHost: {self.endpoint.authority}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        )
        if token:
            head += f"Authorization: {token}\r\n"
        await self._stream.send(head.encode("latin-1") + b"\r\n" + body)

    async def receive_head(self) -> int:
        """Read the reply's status line and headers; its status code."""
        end = await self._until(b"\r\n\r\n", MAX_HEAD)
        lines = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
        del self._buffer[: end + 4]
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise ProtocolError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon:
                raise ProtocolError(f"malformed header line: {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
        self._body = _Framing.of(headers)
        self._keep = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        return int(code)

    async def receive_some(self) -> bytes:
        """The next piece of the reply's body (a chunk, or what has come of it); ``b""`` once
        the body is complete."""
        body = self._body
        if body is None:
            return b""
        if body.chunked:
            data = await self._chunk()
        elif body.left is None:  # until the server closes the connection
            data = b""
            if self._buffer or await self._fill(eof_ok=True):
                data = bytes(self._buffer)
                self._buffer.clear()
        else:
            if body.left and not self._buffer:
                await self._fill()
            data = bytes(self._buffer[: body.left])
            del self._buffer[: len(data)]
            body.left -= len(data)
            if not body.left:
                body.done = True
        if body.done:
            self._body = None
            self.reusable = self._keep and body.left is not None and not self._buffer
        return data

    async def receive_body(self) -> bytes:
        """The rest of the reply's body, whole."""
        pieces = []
        while data := await self.receive_some():
            pieces.append(data)
        return b"".join(pieces)

    # --- reading ----------------------------------------------------------------------------

    async def _chunk(self) -> bytes:
        body = self._body
        assert body is not None
        end = await self._until(b"\r\n", 1024)
        size_text = bytes(self._buffer[:end]).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise ProtocolError(f"malformed chunk size: {size_text[:40]!r}") from None
        if size == 0:  # the last chunk: skip any trailers up to the empty line
            trailers = await self._until(b"\r\n\r\n", MAX_HEAD, start=end)
            del self._buffer[: trailers + 4]
            body.done = True
            return b""
        del self._buffer[: end + 2]
        while len(self._buffer) < size + 2:
            await self._fill()
        if self._buffer[size : size + 2] != b"\r\n":
            raise ProtocolError("a chunk does not end where its size says")
        data = bytes(self._buffer[:size])
        del self._buffer[: size + 2]
        return data

    async def _until(self, marker: bytes, limit: int, start: int = 0) -> int:
        """The index of ``marker`` in the buffer (from ``start``), reading until it comes."""
        searched = start
        while (found := self._buffer.find(marker, searched)) < 0:
            if len(self._buffer) > limit:
                raise ProtocolError(f"no {marker!r} within {limit} bytes")
            searched = max(start, len(self._buffer) - len(marker) + 1)
            await self._fill()
        return found

    async def _fill(self, *, eof_ok: bool = False) -> bool:
        """Read what the server sent next into the buffer; False at its end if ``eof_ok``."""
        try:
            self._buffer += await self._stream.receive(READ_SIZE)
        except anyio.EndOfStream:
            if eof_ok:
                assert self._body is not None
                self._body.done = True
                return False
            raise
        return True


@dataclass(slots=True)
class _Framing:
    """How a reply's body ends: chunked, after ``left`` more bytes, or (``left`` None) when
    the server closes the connection."""

    chunked: bool
    left: int | None
    done: bool = False

    @classmethod
    def of(cls, headers: dict[str, str]) -> _Framing:
        coding = headers.get("transfer-encoding", "").lower()
        if coding:
            if coding != "chunked":
                raise ProtocolError(f"unexpected transfer-encoding {coding!r}")
            return cls(True, 0)
        length = headers.get("content-length")
        if length is None:
            return cls(False, None)
        if not length.isdigit():
            raise ProtocolError(f"malformed content-length {length[:40]!r}")
        return cls(False, int(length), done=int(length) == 0)


def _reason(exc: BaseException) -> str:
    """What an error and its causes say, in one line."""
    said: list[str] = []
    seen: BaseException | None = exc
    while seen is not None:
        text = str(seen)
        if text and text not in said:
            said.append(text)
        seen = seen.__cause__ or seen.__context__
    return ": ".join(said) or type(exc).__name__
