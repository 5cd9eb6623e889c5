"""What clients may cost the --http server (``ha.http.Limits``), under asyncio and trio: a flood
of idle connections neither starves a probe nor outgrows the cap; at the cap with every
connection being answered, a new one is closed at once; a request that does not arrive, or
arrives a byte at a time, and an answer not taken, are cut at their deadline; no file
descriptor left at accept makes the server wait and serve again, never fail."""

from __future__ import annotations

import errno
import logging
import os
import resource
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import anyio
import anyio.abc
import pytest
from anyio.abc import SocketAttribute

from ha.http import Limits, Response, serve
from tests.support.http import get

pytestmark = pytest.mark.anyio

LONG = 60.0  # a deadline no test here waits for
BIG = 32 * 1024 * 1024  # more than the server's send buffer (4 MiB at most, tcp_wmem) and a
# reader's receive buffer held at 64 KiB


async def handler(path: str) -> Response:
    if path == "/big":
        return Response(200, b"x" * BIG)
    return Response.text(200, path)


async def closed_by_server(stream: anyio.abc.SocketStream) -> None:
    """Return once the server has closed ``stream`` (the bound only turns a hang into a failure)."""
    with anyio.fail_after(30):
        try:
            data = await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return
    raise AssertionError(f"the server answered {data!r} instead of closing")


async def answer(stream: anyio.abc.SocketStream, path: str) -> bytes:
    """Send a GET of ``path`` on ``stream`` and read the whole answer."""
    try:
        await stream.send(f"GET {path} HTTP/1.1\r\n\r\n".encode())
    except anyio.BrokenResourceError:
        return b""  # closed (and reset) by the server already
    return await read_all(stream)


async def fresh(address: tuple[str, int], path: str) -> bytes:
    """The whole answer to a GET of ``path`` on a new connection (b"" if closed unanswered)."""
    async with await anyio.connect_tcp(*address) as stream:
        return await answer(stream, path)


async def read_all(stream: anyio.abc.SocketStream) -> bytes:
    """What ``stream`` receives until the server closes it."""
    data = b""
    with anyio.fail_after(30):
        while True:
            try:
                data += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return data


async def test_a_flood_of_idle_connections_neither_starves_a_probe_nor_outgrows_the_cap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cap = 8
    limits = Limits(max_connections=cap, request_timeout=LONG)  # what closes one here is the cap
    async with anyio.create_task_group() as tg:
        address = await tg.start(partial(serve, limits=limits), "127.0.0.1", 0, handler)
        idle = [await anyio.connect_tcp(*address) for _ in range(5 * cap)]
        try:
            # each new connection took the place of the oldest still waiting for its request
            for stream in idle[:-cap]:
                await closed_by_server(stream)
            # a probe is answered while `cap` idle connections are held: it takes the oldest's
            # place in turn, and the newer ones are still open and served
            status, _, body = await get(address, "/healthz")
            assert (status, body) == (200, b"/healthz\n")
            await closed_by_server(idle[-cap])
            for stream in idle[-cap + 1 :]:
                assert (await answer(stream, "/mine")).endswith(b"\r\n\r\n/mine\n")
        finally:
            for stream in idle:
                await stream.aclose()
        crowded = [
            r for r in caplog.records if r.getMessage().startswith(f"{cap} connections open")
        ]
        assert len(crowded) == 1  # said once for the spell, not for each one turned away
        tg.cancel_scope.cancel()


async def test_a_request_that_does_not_come_in_time_is_cut() -> None:
    limits = Limits(request_timeout=0.3)
    async with anyio.create_task_group() as tg:
        address = await tg.start(partial(serve, limits=limits), "127.0.0.1", 0, handler)
        async with await anyio.connect_tcp(*address) as idle:  # never sends a byte
            await closed_by_server(idle)

        # slowloris: a byte every 20 ms, each well inside the deadline, the head never ending
        # (8 KiB, the most a head may have, would take minutes): only a total deadline cuts it
        async def trickle(stream: anyio.abc.SocketStream) -> None:
            try:
                await stream.send(b"GET / HTTP/1.1\r\nX-Slow: ")
                while True:
                    await anyio.sleep(0.02)
                    await stream.send(b"z")
            except anyio.BrokenResourceError:
                pass  # the server closed it

        async with await anyio.connect_tcp(*address) as slow, anyio.create_task_group() as inner:
            inner.start_soon(trickle, slow)
            await closed_by_server(slow)
            inner.cancel_scope.cancel()
        assert (await get(address, "/after"))[0] == 200
        tg.cancel_scope.cancel()


async def test_at_the_cap_with_every_connection_answered_a_new_one_is_closed_at_once() -> None:
    entered, release = anyio.Event(), anyio.Event()

    async def held_handler(path: str) -> Response:
        entered.set()
        await release.wait()
        return Response.text(200, path)

    limits = Limits(max_connections=1, request_timeout=LONG)
    async with anyio.create_task_group() as tg:
        address = await tg.start(partial(serve, limits=limits), "127.0.0.1", 0, held_handler)
        async with await anyio.connect_tcp(*address) as held:
            await held.send(b"GET /held HTTP/1.1\r\n\r\n")
            with anyio.fail_after(30):
                await entered.wait()
            assert await fresh(address, "/refused") == b""  # closed at once, unanswered
            release.set()
            assert (await read_all(held)).endswith(b"/held\n")
        assert (await fresh(address, "/after")).endswith(b"/after\n")
        tg.cancel_scope.cancel()


async def test_an_answer_not_taken_in_time_is_cut_and_its_place_freed() -> None:
    """One connection at most: a client that stops reading its answer holds it (being answered,
    it cannot be replaced) until the send deadline cuts it."""
    limits = Limits(max_connections=1, request_timeout=LONG, send_timeout=0.3)
    async with anyio.create_task_group() as tg:
        address = await tg.start(partial(serve, limits=limits), "127.0.0.1", 0, handler)
        async with await anyio.connect_tcp(*address) as reader:
            raw = reader.extra(SocketAttribute.raw_socket)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # never grown
            await reader.send(b"GET /big HTTP/1.1\r\n\r\n")
            got = len(await reader.receive())  # being answered now; it reads no more for a while
            with anyio.fail_after(30):  # closed at once until the deadline frees the place
                while not (data := await fresh(address, "/healthz")):
                    await anyio.sleep(0.02)
            assert data.endswith(b"\r\n\r\n/healthz\n")
            got += len(await read_all(reader))  # what the kernel buffered, then the end
            assert got < BIG  # cut before the whole answer went
        tg.cancel_scope.cancel()


@contextmanager
def no_descriptor_left() -> Iterator[None]:
    """Lower this process's open-file limit to its lowest free descriptor: no new one opens
    (EMFILE) until the limit is restored."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest = os.open(os.devnull, os.O_RDONLY)
    os.close(lowest)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_no_descriptor_left_at_accept_the_server_waits_and_serves_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="ha.http")

    def said(start: str) -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith(start)]

    async with anyio.create_task_group() as tg:
        address = await tg.start(serve, "127.0.0.1", 0, handler)
        # connected and asked by the kernel now; the server accepts at this task's next await
        client = socket.create_connection(address)
        client.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
        client.setblocking(False)
        try:
            with no_descriptor_left():
                with anyio.fail_after(30):
                    while not said(f"cannot accept connections ({os.strerror(errno.EMFILE)})"):
                        await anyio.sleep(0.01)
                await anyio.sleep(0.1)  # it tries again meanwhile, every few ms at first
            data = b""
            with anyio.fail_after(30):
                while chunk := await _recv(client):
                    data += chunk
        finally:
            client.close()
        assert data.startswith(b"HTTP/1.1 200 ") and data.endswith(b"/healthz\n")
        assert len(said("cannot accept connections")) == 1  # once for the spell
        assert len(said("accept failed")) > 1  # though it failed more than once
        assert (await get(address, "/after"))[0] == 200
        tg.cancel_scope.cancel()


async def _recv(sock: socket.socket) -> bytes:
    await anyio.wait_readable(sock)
    return sock.recv(65536)
