"""The etcd driver's HTTP/1.1 transport (``ha/drivers/etcd/http.py``) against a scripted server.

etcd's gateway always answers the same well-formed way, so the cases a transport must survive
(a reply split across reads, a watch's chunks cut anywhere, a connection closed mid-reply or
while it sat idle, a reply that comes after its request gave up) are played here by a real TCP
server on loopback whose replies each test writes byte by byte. What the client must do in each
case: read the whole reply, keep or replace its connection, and fail with ``ConnectionLost``,
never with an error of the transport, and never hand one request's reply to another.

Every test runs under asyncio and trio.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from ha.drivers.etcd.gateway import Gateway
from ha.drivers.etcd.http import Connection, Endpoint
from ha.drivers.etcd.settings import Settings
from ha.errors import AccessDenied, ConnectionLost
from tests.support.backends.etcd import EtcdServer, make_certs

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

Handler = Callable[["Peer"], Awaitable[None]]


class Peer:
    """The server's side of one accepted connection: read a request, write bytes."""

    def __init__(self, stream: anyio.abc.SocketStream, number: int) -> None:
        self.stream = stream
        self.number = number  # 1 for the first connection the server accepted
        self._buffer = b""

    async def request(self) -> tuple[str, dict[str, Any]]:
        """The next request's target and JSON body (EndOfStream if the client closed)."""
        while b"\r\n\r\n" not in self._buffer:
            self._buffer += await self.stream.receive()
        head, _, self._buffer = self._buffer.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        length = next(
            int(v) for n, _, v in (h.partition(": ") for h in lines[1:]) if n == "Content-Length"
        )
        while len(self._buffer) < length:
            self._buffer += await self.stream.receive()
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        return lines[0].split(" ")[1], json.loads(body)

    async def reply(self, payload: dict[str, Any], *, status: int = 200, extra: str = "") -> None:
        body = json.dumps(payload).encode()
        head = f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
        await self.stream.send(head.encode() + body)


@asynccontextmanager
async def server(handler: Handler) -> AsyncIterator[Gateway]:
    """A gateway on a scripted server: ``handler`` runs once per accepted connection."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    accepted = 0

    async def serve(stream: anyio.abc.SocketStream) -> None:
        nonlocal accepted
        accepted += 1
        async with stream:
            try:
                await handler(Peer(stream, accepted))
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass  # the client closed its side: so does the server

    gateway = Gateway(Settings.check(f"127.0.0.1:{port}", "/p"))
    gateway.open()
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        try:
            yield gateway
        finally:
            await gateway.aclose()
            tg.cancel_scope.cancel()


async def echo_forever(peer: Peer) -> None:
    """Answer every request with its own body and the connection's number."""
    while True:
        target, body = await peer.request()
        await peer.reply({"target": target, "body": body, "connection": peer.number})


async def test_a_reply_split_across_reads_is_read_whole() -> None:
    async def dribble(peer: Peer) -> None:
        while True:
            _, body = await peer.request()
            payload = json.dumps({"got": body, "connection": peer.number}).encode()
            whole = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            whole += b"Content-Length: %d\r\n\r\n" % len(payload) + payload
            for at in range(0, len(whole), 5):  # 5 bytes a write, each read apart
                await peer.stream.send(whole[at : at + 5])
                await anyio.sleep(0.001)

    async with server(dribble) as gateway:
        first = await gateway.call("kv/range", {"key": "a"}, 5)
        second = await gateway.call("kv/range", {"key": "b"}, 5)
    assert first == {"got": {"key": "a"}, "connection": 1}
    assert second == {"got": {"key": "b"}, "connection": 1}  # the connection was kept


async def test_a_chunked_watch_stream_gives_each_message_as_it_comes() -> None:
    told = anyio.Event()
    messages = [{"result": {"events": [{"n": i}]}} for i in range(4)]
    lines = [json.dumps(m).encode() + b"\n" for m in messages]

    async def watch(peer: Peer) -> None:
        await peer.request()
        await peer.stream.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        one, two = lines[0][:9], lines[0][9:]  # a message cut in two chunks
        for chunk in (one, two, b"\n", lines[1] + lines[2]):  # a blank line; two in one chunk
            await peer.stream.send(b"%x;ext=1\r\n%s\r\n" % (len(chunk), chunk))
            await anyio.sleep(0.001)
        await told.wait()  # the client has the messages so far before the last comes
        await peer.stream.send(b"%x\r\n%s\r\n" % (len(lines[3]), lines[3]))
        await peer.stream.send(b"0\r\n\r\n")
        await anyio.sleep(10)

    got = []
    async with server(watch) as gateway:
        async with gateway.stream("watch", {"create_request": {}}) as (_, stream):
            async for message in stream:
                got.append(message)
                if len(got) == 3:
                    told.set()
    assert got == [m["result"] for m in messages]


async def test_closing_a_watch_from_another_task_ends_its_reader() -> None:
    async def silent_watch(peer: Peer) -> None:
        await peer.request()
        await peer.stream.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await anyio.sleep(10)

    async with server(silent_watch) as gateway:
        async with gateway.stream("watch", {}) as (response, messages):
            async with anyio.create_task_group() as tg:
                tg.start_soon(response.aclose)
                with pytest.raises(ConnectionLost):
                    await messages.__anext__()


@pytest.mark.parametrize("cut", [20, 60], ids=["in-the-head", "in-the-body"])
async def test_a_connection_closed_mid_reply_is_connection_lost(cut: int) -> None:
    async def cut_once(peer: Peer) -> None:
        if peer.number == 1:
            await peer.request()
            body = b'{"header":{"revision":"7"},"kvs":[]}'
            whole = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
            await peer.stream.send(whole[:cut])
            return  # closed mid-reply
        await echo_forever(peer)

    async with server(cut_once) as gateway:
        with pytest.raises(ConnectionLost, match="lost contact with etcd"):
            await gateway.call("kv/range", {"key": "a"}, 5)
        after = await gateway.call("kv/range", {"key": "b"}, 5)
    assert after["connection"] == 2 and after["body"] == {"key": "b"}


async def test_a_kept_connection_the_server_closed_is_replaced_unnoticed() -> None:
    closed = anyio.Event()

    async def one_request_each(peer: Peer) -> None:
        target, body = await peer.request()
        await peer.reply({"body": body, "connection": peer.number})
        if peer.number == 1:
            closed.set()  # then the connection closes while the client keeps it idle
        else:
            await echo_forever(peer)

    async with server(one_request_each) as gateway:
        first = await gateway.call("kv/range", {"key": "a"}, 5)
        await closed.wait()
        await anyio.sleep(0.05)  # the FIN has reached the client
        second = await gateway.call("kv/range", {"key": "b"}, 5)
    assert (first["connection"], second["connection"]) == (1, 2)
    assert second["body"] == {"key": "b"}


async def test_a_reply_that_allows_no_other_closes_its_connection() -> None:
    async def closing(peer: Peer) -> None:
        while True:
            _, body = await peer.request()
            await peer.reply({"connection": peer.number}, extra="Connection: close\r\n")

    async with server(closing) as gateway:
        numbers = [(await gateway.call("kv/range", {}, 5))["connection"] for _ in range(3)]
    assert numbers == [1, 2, 3]


async def test_a_late_reply_never_answers_the_next_request() -> None:
    async def slow_first(peer: Peer) -> None:
        while True:
            target, body = await peer.request()
            if body.get("key") == "slow":
                await anyio.sleep(0.3)  # after the client gave up on it
            await peer.reply({"body": body, "connection": peer.number})

    async with server(slow_first) as gateway:
        with pytest.raises(ConnectionLost, match="no reply from etcd at .* within 0.1 s"):
            await gateway.call("kv/range", {"key": "slow"}, 0.1)
        await anyio.sleep(0.4)  # the late reply has come by now, on the old connection
        answer = await gateway.call("kv/range", {"key": "next"}, 5)
    assert answer["body"] == {"key": "next"} and answer["connection"] == 2


@pytest.mark.parametrize(
    "reply",
    [b"SSH-2.0-OpenSSH_9.2\r\n\r\n", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"],
    ids=["not-http", "unknown-framing"],
)
async def test_a_reply_that_is_not_http_is_connection_lost(reply: bytes) -> None:
    async def garbage(peer: Peer) -> None:
        await peer.request()
        await peer.stream.send(reply)
        await anyio.sleep(10)

    async with server(garbage) as gateway:
        with pytest.raises(ConnectionLost, match="not HTTP/1.1") as lost:
            await gateway.call("kv/range", {}, 5)
    assert "\n" not in str(lost.value)


async def test_etcd_errors_are_mapped_and_the_connection_kept() -> None:
    async def refusing(peer: Peer) -> None:
        await peer.request()
        await peer.reply({"error": "etcdserver: permission denied", "code": 7}, status=403)
        await echo_forever(peer)

    async with server(refusing) as gateway:
        with pytest.raises(AccessDenied, match="permission denied"):
            await gateway.call("kv/put", {}, 5)
        after = await gateway.call("kv/range", {}, 5)
    assert after["connection"] == 1


async def test_tls_connections_are_kept(
    etcd_server_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against a real etcd over TLS: what comes after the handshake (session tickets) is not
    taken for a closed connection; requests in a row share one."""
    opened = []
    open_connection = Connection.open

    async def counted(endpoint: Endpoint, tls: ssl.SSLContext | None) -> Connection:
        opened.append(endpoint)
        return await open_connection(endpoint, tls)

    monkeypatch.setattr(Connection, "open", counted)
    certs = make_certs(tmp_path / "certs")
    etcd: EtcdServer = etcd_server_factory(certs)
    options = {"ca": str(certs / "ca.pem"), "cert": str(certs / "client.pem")}
    gateway = Gateway(Settings.check(etcd.hosts, "/tls", key=str(certs / "client.key"), **options))
    gateway.open()
    try:
        for _ in range(20):
            await gateway.call("kv/range", {"key": "L3g="}, 5)
            await anyio.sleep(0.01)
    finally:
        await gateway.aclose()
    assert len(opened) == 1
