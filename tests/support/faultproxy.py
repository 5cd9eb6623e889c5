"""A loopback TCP fault proxy: cut off one client of a server without touching the others.

Each client gets its own listening port (a ``Link``) in front of a server port, so faults aim
at one client::

    with FaultProxy() as proxy:
        link = proxy.link(("127.0.0.1", server_port))
        client connects to 127.0.0.1:link.port
        link.pause()    # nothing forwarded either way; sockets stay open (a frozen network)
        link.resume()   # what was held back flows again
        link.drop()     # close the link's connections (the client sees the peer close)
        link.refuse()   # drop, and close the listening port: new connections are refused
        link.accept()   # listen on the same port again
        link.blackhole()  # drop, then take new connections and never answer them

One thread runs every link with a selector; the control methods hand their change to that
thread and return once it is in force, within microseconds. They are plain functions, so tests
call them the same way under asyncio and trio.
"""

from __future__ import annotations

import queue
import selectors
import socket
import threading
from collections.abc import Callable
from typing import Any, Self

__all__ = ("FaultProxy", "Link")

_CHUNK = 65536
_HIGH_WATER = 1 << 20  # stop reading a side while this much waits to be written to the other


class _Pipe:
    """One proxied connection: a client socket and its upstream socket."""

    def __init__(self, link: Link, client: socket.socket, upstream: socket.socket) -> None:
        self.link = link
        self.socks = (client, upstream)
        self.out = (bytearray(), bytearray())  # bytes waiting to be written to socks[i]
        self.closed = False


class Link:
    """One listening port of the proxy, forwarding to ``upstream``."""

    def __init__(self, proxy: FaultProxy, upstream: tuple[str, int]) -> None:
        self._proxy = proxy
        self.upstream = upstream
        self.port = 0
        self.paused = False
        self.refusing = False
        self.blackholing = False
        self._listener: socket.socket | None = None
        self._pipes: list[_Pipe] = []
        self._holes: list[socket.socket] = []

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    @property
    def hosts(self) -> str:
        """``127.0.0.1:PORT``, for a client's server list."""
        return f"127.0.0.1:{self.port}"

    @property
    def connections(self) -> int:
        return self._proxy._run(lambda: sum(not p.closed for p in self._pipes))

    @property
    def held(self) -> int:
        """Connections taken by the black hole and still open."""
        return self._proxy._run(lambda: len(self._holes))

    def pause(self) -> None:
        """Stop forwarding in both directions, for current and new connections."""
        self._proxy._run(lambda: self._proxy._set_paused(self, True))

    def resume(self) -> None:
        self._proxy._run(lambda: self._proxy._set_paused(self, False))

    def drop(self) -> None:
        """Close every current connection of this link (new ones are still accepted)."""
        self._proxy._run(lambda: self._proxy._drop(self))

    def refuse(self) -> None:
        """Close the connections and the listening port: connecting is refused until accept()."""
        self._proxy._run(lambda: self._proxy._refuse(self))

    def blackhole(self) -> None:
        """Close the connections; new ones are taken and read, and never answered nor
        forwarded (a server whose process took the connection and then stalled or lost the
        request), until accept()."""
        self._proxy._run(lambda: self._proxy._blackhole(self))

    def accept(self) -> None:
        """Listen again on the same port, forwarding (undoes refuse(), pause() and
        blackhole(); connections taken by the black hole stay unanswered)."""
        self._proxy._run(lambda: self._proxy._accept(self))


class FaultProxy:
    """The proxy: one selector thread serving any number of links."""

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._commands: queue.SimpleQueue[tuple[Callable[[], Any], list[Any], threading.Event]]
        self._commands = queue.SimpleQueue()
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._links: list[Link] = []
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="faultproxy", daemon=True)
        self._thread.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def link(self, upstream: tuple[str, int]) -> Link:
        """A new listening port forwarding to ``upstream``."""
        link = Link(self, upstream)
        self._run(lambda: self._accept(link))
        self._links.append(link)
        return link

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self._run(self._close_all)
        self._thread.join(timeout=5)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    # --- running commands on the proxy's thread --------------------------------------------

    def _run(self, fn: Callable[[], Any]) -> Any:
        if threading.current_thread() is self._thread:
            return fn()
        if not self._thread.is_alive():
            raise RuntimeError("the fault proxy is closed")
        result: list[Any] = []
        done = threading.Event()
        self._commands.put((fn, result, done))
        self._wake_w.send(b"\0")
        if not done.wait(timeout=5):
            raise RuntimeError("the fault proxy's thread did not answer")
        if result and isinstance(result[0], BaseException):
            raise result[0]
        return result[0] if result else None

    def _loop(self) -> None:
        while not self._stopping:
            for key, mask in self._selector.select():
                if key.data is None:
                    self._run_commands()
                elif isinstance(key.data, Link):
                    self._on_accept(key.data)
                elif isinstance(key.data, socket.socket):
                    self._on_hole(key.data)
                else:
                    pipe, side = key.data
                    self._on_ready(pipe, side, mask)

    def _run_commands(self) -> None:
        try:
            self._wake_r.recv(4096)
        except BlockingIOError:
            pass
        while True:
            try:
                fn, result, done = self._commands.get_nowait()
            except queue.Empty:
                return
            try:
                result.append(fn())
            except BaseException as exc:  # handed back to the caller's thread
                result.append(exc)
            done.set()

    # --- registrations ---------------------------------------------------------------------

    def _want(self, sock: socket.socket, events: int, data: Any) -> None:
        try:
            key = self._selector.get_key(sock)
        except KeyError:
            if events:
                self._selector.register(sock, events, data)
            return
        if not events:
            self._selector.unregister(sock)
        elif key.events != events:
            self._selector.modify(sock, events, data)

    def _sync(self, pipe: _Pipe) -> None:
        """Register each socket of ``pipe`` for what it may do now."""
        if pipe.closed:
            return
        for side, sock in enumerate(pipe.socks):
            events = 0
            if not pipe.link.paused:
                if len(pipe.out[1 - side]) < _HIGH_WATER:
                    events |= selectors.EVENT_READ
                if pipe.out[side]:
                    events |= selectors.EVENT_WRITE
            self._want(sock, events, (pipe, side))

    def _sync_listener(self, link: Link) -> None:
        if link._listener is not None:
            # while paused, new connections wait in the kernel's backlog
            events = 0 if link.paused else selectors.EVENT_READ
            self._want(link._listener, events, link)

    # --- link operations (on the proxy's thread) -------------------------------------------

    def _accept(self, link: Link) -> None:
        link.paused = False
        link.refusing = False
        link.blackholing = False
        if link._listener is None:
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", link.port))
            listener.listen(64)
            listener.setblocking(False)
            link._listener = listener
            link.port = listener.getsockname()[1]
        self._set_paused(link, False)

    def _set_paused(self, link: Link, paused: bool) -> None:
        link.paused = paused
        self._sync_listener(link)
        for pipe in link._pipes:
            self._sync(pipe)

    def _drop(self, link: Link) -> None:
        for pipe in list(link._pipes):
            self._close_pipe(pipe)
        for hole in list(link._holes):
            self._close_hole(link, hole)

    def _blackhole(self, link: Link) -> None:
        self._drop(link)
        link.blackholing = True

    def _refuse(self, link: Link) -> None:
        link.refusing = True
        if link._listener is not None:
            self._want(link._listener, 0, link)
            link._listener.close()
            link._listener = None
        self._drop(link)

    def _close_all(self) -> None:
        for link in self._links:
            self._refuse(link)
        self._stopping = True

    # --- forwarding ------------------------------------------------------------------------

    def _on_accept(self, link: Link) -> None:
        if link._listener is None or link.paused:  # refused or paused in this same round
            return
        try:
            client, _ = link._listener.accept()
        except BlockingIOError:
            return
        if link.blackholing:
            client.setblocking(False)
            link._holes.append(client)
            self._want(client, selectors.EVENT_READ, client)
            return
        try:
            upstream = socket.create_connection(link.upstream, timeout=2)
        except OSError:
            client.close()  # the server is down: the client sees its connection close
            return
        for sock in (client, upstream):
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pipe = _Pipe(link, client, upstream)
        link._pipes.append(pipe)
        self._sync(pipe)

    def _on_ready(self, pipe: _Pipe, side: int, mask: int) -> None:
        if pipe.closed or pipe.link.paused:
            return
        sock = pipe.socks[side]
        try:
            if mask & selectors.EVENT_READ:
                data = sock.recv(_CHUNK)
                if not data:
                    self._close_pipe(pipe)
                    return
                pipe.out[1 - side].extend(data)
                self._flush(pipe, 1 - side)
            if mask & selectors.EVENT_WRITE:
                self._flush(pipe, side)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._close_pipe(pipe)
            return
        self._sync(pipe)

    def _flush(self, pipe: _Pipe, side: int) -> None:
        buffer = pipe.out[side]
        if buffer:
            sent = pipe.socks[side].send(buffer)
            del buffer[:sent]

    def _on_hole(self, hole: socket.socket) -> None:
        """Read and forget what a black-holed connection sends; close it when its client does."""
        try:
            if hole.recv(_CHUNK):
                return
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        for link in self._links:
            if hole in link._holes:
                self._close_hole(link, hole)

    def _close_hole(self, link: Link, hole: socket.socket) -> None:
        self._want(hole, 0, None)
        hole.close()
        link._holes.remove(hole)

    def _close_pipe(self, pipe: _Pipe) -> None:
        if pipe.closed:
            return
        pipe.closed = True
        for sock in pipe.socks:
            self._want(sock, 0, None)
            sock.close()
        pipe.link._pipes.remove(pipe)
