"""Where a component's leader is: the ``LeaderInfo`` document and its retrieval.

The leader of component ``C`` publishes ``LeaderInfo(address, session_id)`` at
``<prefix>/<cluster_id>/leader/C`` (see ``publication.py``). ``LeaderRetrieval`` reads it from
any process, contender or not: an async iterator of the current value, then each change, or
``None`` when there is no leader or no contact with the backend (then we cannot know). In
standalone mode a fixed address stands in for the node.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Self

import anyio

from ..drivers.base import Driver, Subscription
from ..errors import CorruptData, DriverError, NoNode
from ..stores import codec

__all__ = ("STANDALONE_SESSION", "LeaderInfo", "LeaderRetrieval")

log = logging.getLogger("ha.services")

LEADER = "ha.leader"
STANDALONE_SESSION = uuid.UUID(int=0)  # the session id of addresses fixed in a none:// URL


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    """Where a component's leader is, and the session id it confirmed."""

    address: str
    session_id: uuid.UUID

    def encode(self) -> bytes:
        return codec.encode(LEADER, {"address": self.address, "session_id": str(self.session_id)})

    @classmethod
    def decode(cls, path: str, data: bytes) -> LeaderInfo:
        doc = codec.decode(path, data, LEADER)
        address = codec.field(path, doc, "address", str)
        raw = codec.field(path, doc, "session_id", str)
        try:
            return cls(address, uuid.UUID(raw))
        except ValueError:
            raise CorruptData(path, f"session_id is not a UUID: {raw!r}") from None


class LeaderRetrieval:
    """``async for info in retrieval``: the component's ``LeaderInfo`` or None, on each change.

    ``aclose()`` (or leaving ``async with``) drops its subscriptions; an iterator left behind
    costs two subscriptions and a flag, no buffer. With ``fixed`` (standalone mode) it yields
    that address and never reads the backend.
    """

    def __init__(self, driver: Driver, path: str, fixed: LeaderInfo | None = None) -> None:
        self.driver = driver
        self.path = path
        self._fixed = fixed
        self._subs: list[Subscription] = []
        self._changed: anyio.Event | None = None
        self._started = False
        self._last: LeaderInfo | None = None

    def _poke(self, event: object) -> None:
        if self._changed is not None:
            self._changed.set()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> LeaderInfo | None:
        if not self._started:
            self._started = True
            self._changed = anyio.Event()
            if self._fixed is None:
                self._subs = [
                    self.driver.subscribe(self.path, self._poke),
                    self.driver.subscribe(None, self._poke),
                ]
            info = await self._read()
            self._last = info
            return info
        assert self._changed is not None
        while True:
            await self._changed.wait()
            self._changed = anyio.Event()  # events from here on wake the next read
            info = await self._read()
            if info != self._last:
                self._last = info
                return info

    async def _read(self) -> LeaderInfo | None:
        if self._fixed is not None:
            return self._fixed
        driver = self.driver
        if not driver.connected:
            return None  # we cannot know who leads
        try:
            data, _ = await driver.get(self.path)
        except NoNode:
            return None
        except DriverError as exc:
            log.debug("%s: leader unknown for now: %s", self.path, exc)
            return None  # a connection event will wake us when contact is back
        if not data:
            return None
        return LeaderInfo.decode(self.path, data)

    async def aclose(self) -> None:
        for sub in self._subs:
            sub.close()
        self._subs = []

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
