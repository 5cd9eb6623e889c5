"""A driver's operations timed and its errors counted, and its node events shown to observers.

``BackendMetrics.measure(driver)`` wraps the driver's node operations on that one instance (not
its class): each call is timed (``time.perf_counter``) and, if it raises, counted by the
error's type (``NoNode`` and ``NodeExists`` included: for some callers they are answers, and the
label lets a query leave them out). A call that is cancelled is neither. An operation a driver
makes through another of its own (``ensure_path`` creating each parent) is counted under both.

``tap_node_events(driver, key, callback)`` shows every node event the driver delivers to its
subscribers to ``callback`` too, without subscribing to anything more (which could make the
backend set up watches): the elector's metrics see the leader's node and breadcrumb go through
it (``election.py``). Both wrap the instance's methods once; nothing is done per call but a
clock reading and a dict lookup.

Where the backend keeps the whole tree in one object of limited size (a Kubernetes ConfigMap:
1 MiB), ``ha_backend_tree_bytes`` and ``ha_backend_tree_limit_bytes`` show how full it is, as
the driver last saw it (``Driver.known_tree_size``, read at scrape time, no request): alert on
their ratio well before 1, where every write, the election's included, is refused.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..drivers.base import Driver, DriverEvent, NodeEvent
from .registry import Registry

__all__ = ("OPERATIONS", "BackendMetrics", "tap_node_events")

OPERATIONS = ("create", "get", "exists", "set", "delete", "children", "transaction")

log = logging.getLogger("ha.metrics")

_MEASURED = "_ha_metrics_measured"
_TAPS = "_ha_metrics_taps"


class BackendMetrics:
    """``ha_backend_operation_seconds`` and ``ha_backend_errors_total``, by backend and op."""

    def __init__(self, registry: Registry) -> None:
        self.seconds = registry.histogram(
            "ha_backend_operation_seconds",
            "Time of each backend operation that returned or raised, by operation",
            ("backend", "op"),
        )
        self.errors = registry.counter(
            "ha_backend_errors_total",
            "Backend operations that raised, by operation and error type",
            ("backend", "op", "error"),
        )
        self.tree_bytes = registry.gauge(
            "ha_backend_tree_bytes",
            "Bytes of the one backend object holding the tree, where its size is limited",
            ("backend",),
        )
        self.tree_limit = registry.gauge(
            "ha_backend_tree_limit_bytes",
            "The most bytes that object may hold (a write past it is refused)",
            ("backend",),
        )

    def measure(self, driver: Driver) -> Driver:
        """Time ``driver``'s operations from now on (once per driver); returns it."""
        if getattr(driver, _MEASURED, False):
            return driver
        backend = driver.capabilities.name
        for op in OPERATIONS:
            setattr(driver, op, self._timed(backend, op, getattr(driver, op)))
        setattr(driver, _MEASURED, True)

        def used() -> float | None:
            size = driver.known_tree_size()
            return None if size is None else size.used

        def limit() -> float | None:
            size = driver.known_tree_size()
            return None if size is None else size.limit

        self.tree_bytes.set_function(used, backend=backend)
        self.tree_limit.set_function(limit, backend=backend)
        return driver

    def _timed(
        self, backend: str, op: str, call: Callable[..., Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        seconds = self.seconds.labels(backend=backend, op=op)

        @functools.wraps(call)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()  # a duration only: the cheapest clock (not the loop's)
            try:
                result = await call(*args, **kwargs)
            except Exception as exc:
                seconds.observe(time.perf_counter() - start)
                self.errors.labels(backend=backend, op=op, error=type(exc).__name__).inc()
                raise
            seconds.observe(time.perf_counter() - start)
            return result

        return timed


def tap_node_events(driver: Driver, key: object, callback: Callable[[NodeEvent], None]) -> None:
    """Call ``callback(event)`` for each node event ``driver`` delivers; a later tap with the
    same ``key`` replaces this one (a new elector of the same election and identity)."""
    taps: dict[object, Callable[[NodeEvent], None]] | None = getattr(driver, _TAPS, None)
    if taps is None:
        taps = {}
        setattr(driver, _TAPS, taps)
        deliver = driver._emit

        def emit(event: DriverEvent) -> None:
            if isinstance(event, NodeEvent):
                for tap in tuple(taps.values()):
                    try:
                        tap(event)
                    except Exception:  # a metric's bug must not stop the election's events
                        log.exception("a metrics tap raised on %r", event)
            deliver(event)

        setattr(driver, "_emit", emit)  # noqa: B010 (the instance's, as above)
    taps[key] = callback
