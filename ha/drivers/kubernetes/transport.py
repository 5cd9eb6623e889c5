"""The Kubernetes driver's requests: the API server's client, where things are in the
namespace, and the fault gate.

``request`` is every request of the driver: ``own`` ones (renewals, the watch's, reaping,
the leaders' Leases) are the driver's, which the faults of operations leave alone; the others
are node operations, whose lost contact wakes the session (``on_lost``). ``raw``: a request
made as from the server's side (a test's expiry), which no fault of the client stops.

Faults: ``gate`` is this transport's ``FaultGate``. Until a test arms it, ``request`` and
``watch`` are the plain functions below; arming swaps them for gated ones (``_armed``), so a
request of an untouched driver reads no fault flag.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from ...errors import ConnectionLost
from .._faults import FaultGate
from .api import COORDINATION, CORE, Api
from .config import Cluster
from .settings import Settings

__all__ = ("Transport",)

Reply = tuple[int, dict[str, Any]]


class Transport:
    """Requests to one API server, in one namespace."""

    def __init__(
        self, settings: Settings, cluster: Cluster, namespace: str, on_lost: Callable[[], None]
    ) -> None:
        self.settings = settings
        self.namespace = namespace
        self.server = cluster.server
        self._api = Api(cluster)
        self._on_lost = on_lost
        self.running = False  # between start and the end of aclose: requests may go
        self.gate = FaultGate("Kubernetes", self._armed)
        # the request paths: gated ones once a test armed the gate
        self.request: Callable[..., Awaitable[Reply]] = self._request
        self.watch: Callable[..., AbstractAsyncContextManager[Any]] = self._api.watch

    # --- where things are -------------------------------------------------------------------

    @property
    def where(self) -> str:
        return f"namespace {self.namespace}"

    @property
    def tree_url(self) -> str:
        return f"{CORE}/namespaces/{self.namespace}/configmaps/{self.settings.tree}"

    @property
    def leases_url(self) -> str:
        return f"{COORDINATION}/namespaces/{self.namespace}/leases"

    def lease_url(self, session: int) -> str:
        return f"{self.leases_url}/{self.settings.lease(session)}"

    # --- lifecycle --------------------------------------------------------------------------

    def open(self) -> None:
        self._api.open()
        self.running = True

    async def aclose(self) -> None:
        self.running = False
        await self._api.aclose()

    # --- the request paths ------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        url: str,
        body: Any = None,
        *,
        within: float | None = None,
        params: dict[str, str] | None = None,
        own: bool = False,
        content_type: str | None = None,  # a PATCH's media type
    ) -> Reply:
        """One request of the driver's (``own``) or of a node operation."""
        try:
            if not self.running:
                raise ConnectionLost("the Kubernetes driver is not started (or closed)")
            return await self.raw(
                method, url, body, within=within, params=params, content_type=content_type
            )
        except ConnectionLost:
            if not own:
                self._on_lost()  # let the session loop find out what happened, now
            raise

    async def raw(
        self,
        method: str,
        url: str,
        body: Any = None,
        *,
        within: float | None = None,
        params: dict[str, str] | None = None,
        content_type: str | None = None,
    ) -> Reply:
        """One request as from the server's side: whatever the client's faults."""
        within = within or self.settings.op_timeout
        return await self._api.call(
            method, url, body, within=within, params=params, content_type=content_type
        )

    # --- faults -----------------------------------------------------------------------------

    def _armed(self) -> None:
        """A test armed the gate: from now on requests pass through it."""
        gate, request, watch = self.gate, self._request, self._api.watch

        async def gated_request(
            method: str, url: str, body: Any = None, *, own: bool = False, **options: Any
        ) -> Reply:
            if not own:
                await gate.admit()
            try:
                await gate.passage(options.get("within") or self.settings.op_timeout)
            except ConnectionLost:
                if not own:
                    self._on_lost()
                raise
            return await request(method, url, body, own=own, **options)

        @asynccontextmanager
        async def gated_watch(url: str, params: dict[str, str]) -> AsyncIterator[Any]:
            gate.stream()
            async with watch(url, params) as opened:
                yield opened

        self.request, self.watch = gated_request, gated_watch
