"""The fault proxy of tests/support/faultproxy.py, against a small echo server, under asyncio and trio."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import anyio
import pytest
from anyio.abc import SocketStream

from tests.support.faultproxy import FaultProxy

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


class EchoServer:
    """Echoes every byte back; remembers what it received."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.received = bytearray()
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                with self._lock:
                    self.received.extend(data)
                conn.sendall(data)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    with FaultProxy() as proxy:
        yield proxy


async def roundtrip(stream: SocketStream, data: bytes) -> bytes:
    await stream.send(data)
    got = b""
    with anyio.fail_after(5):
        while len(got) < len(data):
            got += await stream.receive()
    return got


async def nothing_arrives(stream: SocketStream) -> bool:
    """True if no byte comes within a short while (used only to show something is held back)."""
    with anyio.move_on_after(0.3):
        await stream.receive()
        return False
    return True


async def test_forwards_both_ways(echo: EchoServer, proxy: FaultProxy) -> None:
    link = proxy.link(("127.0.0.1", echo.port))
    async with await anyio.connect_tcp("127.0.0.1", link.port) as stream:
        assert await roundtrip(stream, b"hello") == b"hello"
        big = bytes(range(256)) * 4096  # 1 MiB, through the buffers
        assert await roundtrip(stream, big) == big
        assert link.connections == 1


async def test_pause_holds_data_until_resume(echo: EchoServer, proxy: FaultProxy) -> None:
    link = proxy.link(("127.0.0.1", echo.port))
    async with await anyio.connect_tcp("127.0.0.1", link.port) as stream:
        assert await roundtrip(stream, b"a") == b"a"
        link.pause()
        await stream.send(b"held")
        assert await nothing_arrives(stream)
        assert bytes(echo.received) == b"a"  # the server did not get it either
        assert link.connections == 1  # the connection stays open
        link.resume()
        got = b""
        with anyio.fail_after(5):
            while got != b"held":
                got += await stream.receive()


async def test_pause_hits_one_link_only(echo: EchoServer, proxy: FaultProxy) -> None:
    cut = proxy.link(("127.0.0.1", echo.port))
    other = proxy.link(("127.0.0.1", echo.port))
    async with (
        await anyio.connect_tcp("127.0.0.1", cut.port) as a,
        await anyio.connect_tcp("127.0.0.1", other.port) as b,
    ):
        cut.pause()
        await a.send(b"x")
        assert await roundtrip(b, b"still here") == b"still here"
        assert await nothing_arrives(a)


async def test_new_connections_wait_while_paused(echo: EchoServer, proxy: FaultProxy) -> None:
    link = proxy.link(("127.0.0.1", echo.port))
    link.pause()
    async with await anyio.connect_tcp("127.0.0.1", link.port) as stream:
        await stream.send(b"early")
        assert await nothing_arrives(stream)
        link.resume()
        got = b""
        with anyio.fail_after(5):
            while got != b"early":
                got += await stream.receive()


async def test_drop_closes_connections_and_keeps_listening(
    echo: EchoServer, proxy: FaultProxy
) -> None:
    link = proxy.link(("127.0.0.1", echo.port))
    async with await anyio.connect_tcp("127.0.0.1", link.port) as stream:
        assert await roundtrip(stream, b"1") == b"1"
        link.drop()
        with anyio.fail_after(5), pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await stream.receive()
    assert link.connections == 0
    async with await anyio.connect_tcp("127.0.0.1", link.port) as stream:
        assert await roundtrip(stream, b"2") == b"2"


async def test_refuse_then_accept_on_the_same_port(echo: EchoServer, proxy: FaultProxy) -> None:
    link = proxy.link(("127.0.0.1", echo.port))
    port = link.port
    stream = await anyio.connect_tcp("127.0.0.1", port)
    link.refuse()
    with anyio.fail_after(5), pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
        await stream.receive()
    await stream.aclose()
    with pytest.raises(OSError):
        await anyio.connect_tcp("127.0.0.1", port)
    link.accept()
    assert link.port == port
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        assert await roundtrip(stream, b"back") == b"back"


async def test_blackhole_takes_connections_and_never_answers(
    echo: EchoServer, proxy: FaultProxy
) -> None:
    link = proxy.link(("127.0.0.1", echo.port))
    async with await anyio.connect_tcp("127.0.0.1", link.port) as old:
        assert await roundtrip(old, b"1") == b"1"
        link.blackhole()
        with anyio.fail_after(5), pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await old.receive()  # the current connections are closed
    async with await anyio.connect_tcp("127.0.0.1", link.port) as held:
        await held.send(b"lost")
        assert await nothing_arrives(held)
        assert (link.connections, link.held) == (0, 1)  # taken, nothing forwarded
        link.accept()
        await held.send(b"still lost")
        assert await nothing_arrives(held)  # what the hole took stays unanswered
        async with await anyio.connect_tcp("127.0.0.1", link.port) as fresh:
            assert await roundtrip(fresh, b"2") == b"2"
    assert bytes(echo.received) == b"12"


async def test_upstream_down_closes_the_client(proxy: FaultProxy) -> None:
    with socket.socket() as placeholder:  # a port with nobody listening
        placeholder.bind(("127.0.0.1", 0))
        dead_port = placeholder.getsockname()[1]
    link = proxy.link(("127.0.0.1", dead_port))
    async with await anyio.connect_tcp("127.0.0.1", link.port) as stream:
        with anyio.fail_after(5), pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await stream.receive()


def test_closed_proxy_refuses_commands(echo: EchoServer) -> None:
    proxy = FaultProxy()
    link = proxy.link(("127.0.0.1", echo.port))
    proxy.close()
    with pytest.raises(RuntimeError):
        link.pause()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", link.port), timeout=1).close()
