"""Node events from one etcd watch on the driver's whole prefix, never losing one.

One stream (``POST /v3/watch``) covers every key of the driver, from the revision the session
began at; a reader task takes its messages, a second task turns them into events for the
subscribed paths, in etcd's order. A PUT of a node's key at version 1 is CREATED, a DELETE is
DELETED, any other PUT CHANGED, but a PUT that came with a new incarnation record in the same
revision re-created the node in place: DELETED then CREATED (see ``keys.Incarnation``).

When the stream breaks, or contact comes back after a loss (a stream may hang silently through
a partition: etcd's gateway sends no heartbeat), the reader starts again from the revision
after the last one it read. If that revision was compacted away, or etcd cancels the watch
for any reason, every subscribed path is read again and compared with what was last known of
it (its creation and its last write): the difference becomes the events, coalesced but never
lost, in the order of the paths' last writes, deletions last (they leave no revision to order
them by). What is known of a path starts with a read at the revision the delivered events had
reached: every path subscribed and not yet read goes in that one read (hundreds of electors
starting together cost one request, not one each, and the events wait for one read, not for
hundreds). A path read before its turn in the queue is still right: its baseline is the
revision of the events delivered so far, and every later event reaches it. The watch's reads go
through the driver's read batcher, with each range pinned to that revision.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ...errors import ConnectionLost, DriverError
from ..base import DriverEvent, NodeEvent, NodeEventKind
from .gateway import Compacted
from .keys import Incarnation, KeySpace, b64, kv_int, unb64
from .mapping import get, node_of
from .reads import LIMIT
from .transport import Transport

__all__ = ("Watches",)

log = logging.getLogger("ha.drivers.etcd")

CREATED, CHANGED, DELETED = NodeEventKind.CREATED, NodeEventKind.CHANGED, NodeEventKind.DELETED
# what is known of a subscribed path: (created, last write's revision), None (absent), or
# _UNKNOWN until its first read
Seen = tuple[int, int] | None
_UNKNOWN: Any = object()


class Watches:
    """The prefix's watch, read and turned into the subscribed paths' events (``emit``)."""

    def __init__(
        self, space: KeySpace, transport: Transport, emit: Callable[[DriverEvent], None]
    ) -> None:
        self.space = space
        self._transport = transport
        self._send_event = emit
        self.seen: dict[str, Any] = {}  # subscribed path -> Seen, or _UNKNOWN
        self.unread: dict[str, None] = {}  # the paths _UNKNOWN in seen, in subscribing order
        self._read_revision = 0  # the last revision the reader received
        self._done_revision = 0  # the last revision whose events were delivered
        self._inbox: MemoryObjectSendStream[tuple[str, Any]] | None = None
        self._stop_stream = anyio.Event()  # set: close the current watch stream
        self._stream_ended = anyio.Event()  # set while no stream is being read
        self._stream_ended.set()
        self._resynced = anyio.Event()
        self._cancelled = False  # etcd cancelled the current stream's watch
        # the deliverer waits with nothing handed to it: the reader may deliver events itself
        # (their order is kept: nothing is before them), sparing a task switch per message
        self._idle = False

    # --- subscriptions ----------------------------------------------------------------------

    def started(self, path: str) -> None:
        self.seen[path] = _UNKNOWN
        self.unread[path] = None
        if self._inbox is not None:
            self._hand(self._inbox, ("subscribed", path))

    def stopped(self, path: str) -> None:
        self.seen.pop(path, None)
        self.unread.pop(path, None)

    def restart(self) -> None:
        """Contact is back (or a new session began): start the stream afresh."""
        self._stop_stream.set()

    async def quiesce(self) -> None:
        """End the watch stream before the tasks are cancelled (see Gateway.stream)."""
        self._stop_stream.set()
        with anyio.move_on_after(1):
            await self._stream_ended.wait()

    def closed(self) -> None:
        self._inbox = None

    # --- the two tasks ----------------------------------------------------------------------

    async def run(self, start_revision: int) -> None:
        """The two tasks, from the revision the session began at."""
        self._read_revision = self._done_revision = start_revision
        send, receive = anyio.create_memory_object_stream[tuple[str, Any]](math.inf)
        self._inbox = send
        for path in self.seen:  # subscribed before the session began
            self._hand(send, ("subscribed", path))
        async with anyio.create_task_group() as tg, send, receive:
            tg.start_soon(self._reader, send)
            await self._deliverer(receive)

    async def _reader(self, send: MemoryObjectSendStream[tuple[str, Any]]) -> None:
        while True:
            self._stop_stream = anyio.Event()
            resync = False
            self._stream_ended = anyio.Event()
            try:
                resync = await self._read_stream(send)
            except Compacted:
                resync = True
            except DriverError as exc:
                log.debug("etcd watch stream ended: %s", exc)
            finally:
                self._stream_ended.set()
            if resync:
                self._resynced = anyio.Event()
                self._hand(send, ("resync", None))
                await self._resynced.wait()
            else:
                await anyio.sleep(0.05)

    async def _read_stream(self, send: MemoryObjectSendStream[tuple[str, Any]]) -> bool:
        """Read one watch stream until it ends; True if etcd cancelled it (compaction)."""
        start, end = self.space.start, self.space.end
        request = {
            "create_request": {
                "key": b64(start),
                "range_end": b64(end),
                "start_revision": str(self._read_revision + 1),
                "progress_notify": True,
            }
        }
        response: Any = None
        error: DriverError | None = None

        async def closer() -> None:  # the way to end a stream early (see Gateway.stream)
            await self._stop_stream.wait()
            if response is not None:
                await response.aclose()

        async with anyio.create_task_group() as tg:  # errors caught inside: not grouped
            tg.start_soon(closer)
            self._cancelled = False
            try:
                async with self._transport.stream("watch", request) as (response, messages):
                    await self._messages(messages, send)
            except DriverError as exc:
                error = exc
            finally:
                tg.cancel_scope.cancel()
        if self._cancelled:
            return True
        raise error or ConnectionLost("the etcd watch stream ended")

    async def _messages(self, messages: Any, send: MemoryObjectSendStream[tuple[str, Any]]) -> None:
        async for message in messages:
            if message.get("canceled"):
                # nothing more comes on this stream: leaving closes it (Gateway.stream)
                log.info("etcd cancelled the watch: %s", message)
                self._cancelled = True
                return
            events = message.get("events") or []
            if events:
                self._read_revision = max(kv_int(e["kv"], "mod_revision") for e in events)
                if self._idle:
                    self._deliver(events)
                else:
                    self._hand(send, ("events", events))
            elif not message.get("created"):  # a progress notice: all events until now
                revision = kv_int(message.get("header") or {}, "revision")
                self._read_revision = max(self._read_revision, revision)
                if self._idle:
                    self._done_revision = max(self._done_revision, revision)
                else:
                    self._hand(send, ("progress", revision))
            # not held while the stream is quiet: after ten thousand joins the last message
            # held thousands of events (about 6 KiB per elector, idle)
            del message, events

    def _hand(self, send: MemoryObjectSendStream[tuple[str, Any]], item: tuple[str, Any]) -> None:
        """Give the deliverer ``item`` (the inbox is unbounded): it is busy until it has
        handled every item handed to it."""
        self._idle = False
        send.send_nowait(item)

    async def _deliverer(self, receive: MemoryObjectReceiveStream[tuple[str, Any]]) -> None:
        while True:
            try:
                kind, item = receive.receive_nowait()
            except anyio.WouldBlock:
                self._idle = True
                try:
                    kind, item = await receive.receive()
                except anyio.EndOfStream:
                    return
                finally:
                    self._idle = False
            except anyio.EndOfStream:
                return
            if kind == "events":
                self._deliver(item)
            elif kind == "progress":
                self._done_revision = max(self._done_revision, item)
            elif kind == "subscribed":
                await self._first_read()  # of every path waiting then: later messages find none
            else:
                await self._resync()
                self._resynced.set()
            del item  # not held while nothing comes (see _messages)

    # --- events -----------------------------------------------------------------------------

    def _deliver(self, events: list[dict[str, Any]]) -> None:
        reborn = set()  # (path, revision): the node was re-created in place then
        for event in events:
            kv = event["kv"]
            where = self.space.path_of(unb64(kv.get("key")))
            if where and where[0] == "incarnation" and event.get("type") != "DELETE":
                try:
                    record = Incarnation.decode(where[1], unb64(kv.get("value")))
                except DriverError:
                    continue
                if not record.created:
                    reborn.add((where[1], kv_int(kv, "mod_revision")))
        for event in events:
            kv = event["kv"]
            revision = kv_int(kv, "mod_revision")
            self._done_revision = max(self._done_revision, revision)
            where = self.space.path_of(unb64(kv.get("key")))
            if where is None or where[0] != "node" or where[1] not in self.seen:
                continue
            path, before = where[1], self.seen[where[1]]
            if event.get("type") == "DELETE":
                kinds, now = [DELETED], None
            elif kv_int(kv, "version") == 1:
                kinds, now = [CREATED], (revision, revision)
            elif (path, revision) in reborn:
                kinds, now = [DELETED, CREATED], (revision, revision)
            else:
                known = before if isinstance(before, tuple) else None
                created = known[0] if known else kv_int(kv, "create_revision")
                kinds, now = [CHANGED], (created, revision)
            if before is not _UNKNOWN:
                self.seen[path] = now
            for kind in kinds:
                self._send_event(NodeEvent(path, kind))

    async def _read(self, paths: list[str], revision: int) -> tuple[int, list[Seen]]:
        """What etcd holds at ``paths`` at ``revision`` (0: now), and the revision read: a path's
        node and incarnation record, in as few transactions of the read batcher as it takes, all
        at the revision of the first."""
        space = self.space
        keys = [key for path in paths for key in (space.node(path), space.incarnation(path))]
        ranges = [get(key) for key in keys] or [get(space.start, count_only=True)]
        replies: list[dict[str, Any]] = []
        for first in range(0, len(ranges), LIMIT):
            batch = ranges[first : first + LIMIT]
            if revision:
                batch = [_at(revision, r) for r in batch]
            header, responses = await self._transport.reads.read(batch)
            revision = revision or int(header.get("revision") or 0)
            replies += [r.get("response_range") or {} for r in responses]
        seen: list[Seen] = []
        for index, path in enumerate(paths):
            kv, record = (_first(reply) for reply in replies[2 * index : 2 * index + 2])
            node = node_of(path, kv, record)
            seen.append(None if node is None or kv is None else (node.created, _mod(kv)))
        return revision, seen

    async def _first_read(self) -> None:
        """What is known of the paths subscribed and not yet read: as of the events delivered
        so far (no event is delivered meanwhile), in one read of them all."""
        while self.unread:
            paths = list(self.unread)
            try:
                try:
                    _, found = await self._read(paths, self._done_revision)
                except Compacted:  # far behind: from now (a change meanwhile may go unseen)
                    _, found = await self._read(paths, 0)
            except DriverError:
                await anyio.sleep(0.05)
                continue
            for path, seen in zip(paths, found, strict=True):
                if path in self.unread:  # not unsubscribed meanwhile
                    self.seen[path] = seen
                    del self.unread[path]

    async def _resync(self) -> None:
        """Read every subscribed path again and report what changed since it was last known."""
        while True:
            paths = list(self.seen)
            try:
                revision, found = await self._read(paths, 0)
            except DriverError:
                await anyio.sleep(0.05)
                continue
            break
        # in the order of the writes, as far as the read tells it: a path's last write has a
        # revision; a deletion has none left, so it is taken as the latest (a standby hearing
        # of a pause and of its leader's exit hears of the pause first)
        changes: list[tuple[int, int, str, list[NodeEventKind]]] = []
        for index, (path, now) in enumerate(zip(paths, found, strict=True)):
            before = self.seen.get(path, _UNKNOWN)
            if path not in self.seen:
                continue
            self.seen[path] = now
            self.unread.pop(path, None)
            if before is _UNKNOWN or before == now:
                continue
            if before is None:
                kinds = [CREATED]
            elif now is None:
                kinds = [DELETED]
            elif before[0] != now[0]:
                kinds = [DELETED, CREATED]
            else:
                kinds = [CHANGED]
            changes.append((revision + 1 if now is None else now[1], index, path, kinds))
        for _, _, path, kinds in sorted(changes):
            for kind in kinds:
                self._send_event(NodeEvent(path, kind))
        self._read_revision = self._done_revision = revision


def _mod(kv: dict[str, Any]) -> int:
    return kv_int(kv, "mod_revision")


def _first(reply: dict[str, Any]) -> dict[str, Any] | None:
    found: list[dict[str, Any]] = reply.get("kvs") or []
    return found[0] if found else None


def _at(revision: int, request: dict[str, Any]) -> dict[str, Any]:
    """A range request made at ``revision``."""
    return {"request_range": {**request["request_range"], "revision": str(revision)}}
