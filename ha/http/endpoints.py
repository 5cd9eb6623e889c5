"""The routes of ``--http``: ``/healthz``, ``/readyz``, ``/leader``, ``/metrics``, and the
status page ``/`` with its document ``/status.json`` (``page.py``).

- ``/healthz``: 200 while the process serves (its local state and whether the backend is
  reachable, as JSON); a liveness probe restarts a process that stops answering it.
- ``/readyz``: 200 only on the active, 503 otherwise: what a load balancer or a readiness
  probe asks (Patroni's ``/leader``, ``/primary``).
- ``/member``: 200 on the active and on a standby (joined, able to take over), 503
  otherwise: the readiness of a pod whose Service selects the active by its role label
  (``deploy/kubernetes``), so that a rolling update can count a new standby as Ready.
- ``/leader``: the election's active read from the backend when asked (``identity``,
  ``epoch``, ``since`` as wall-clock seconds, ``self``: whether it is this process); 503 with
  nulls while there is none, and with ``error`` when the backend cannot be read in time.
- ``/metrics``: the registry in the Prometheus text format.
- ``/``: the status page, which draws ``/status.json`` (``page.py``).

The state is read from callables at request time; nothing is computed between requests.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from ..admin import election_status
from ..drivers.base import Driver
from ..errors import HAError
from ..metrics import Registry
from .page import Jobs, Readings, page_document, page_html
from .server import Response

__all__ = ("ElectionEndpoints",)


@dataclass(frozen=True, slots=True)
class ElectionEndpoints:
    """The routes for one process taking part in the election at ``path`` as ``identity``.

    ``state()`` is its local state ("active", "standby", "neutral", "fenced", "out");
    ``jobs``, a job manager's jobs for the page.
    """

    driver: Driver
    path: str
    identity: bytes
    state: Callable[[], str]
    registry: Registry
    jobs: Jobs | None = None
    readings: Readings = field(default_factory=Readings, compare=False)  # the page's, shared

    async def __call__(self, path: str) -> Response:
        route = path.rstrip("/") or "/"
        if route == "/healthz":
            return Response.json(200, self._health())
        if route == "/readyz":
            state = self.state()
            return Response.text(200 if state == "active" else 503, state)
        if route == "/member":
            state = self.state()
            return Response.text(200 if state in ("active", "standby") else 503, state)
        if route == "/leader":
            return await self._leader()
        if route == "/metrics":
            return Response(200, self.registry.render().encode(), Registry.CONTENT_TYPE)
        if route == "/":
            return Response(200, page_html(), "text/html; charset=utf-8")
        if route == "/status.json":
            document = await self.readings.get(
                lambda: page_document(
                    self.driver, self.path, self.identity, self.state(), self.jobs
                )
            )
            return Response.json(503 if "error" in document else 200, document)
        return Response.text(
            404, f"no {path}: try /, /status.json, /healthz, /readyz, /member, /leader or /metrics"
        )

    def _health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "election": self.path,
            "identity": self.identity.decode(errors="replace"),
            "state": self.state(),
            "connected": self.driver.connected,
        }

    async def _leader(self) -> Response:
        timeout = self.driver.session_timeout
        document: dict[str, Any] = {"identity": None, "epoch": None, "since": None}
        try:
            with anyio.fail_after(timeout if math.isfinite(timeout) else 10.0):
                status = await election_status(self.driver, self.path)
        except (HAError, TimeoutError) as exc:
            document["error"] = str(exc) or f"no answer in {timeout:g}s"
            return Response.json(503, document)
        if status.active is None:
            document["self"] = False
            return Response.json(503, document)
        document.update(
            identity=status.active.decode(errors="replace"),
            epoch=status.epoch,
            since=status.since,
            self=status.active == self.identity,
        )
        return Response.json(200, document)
