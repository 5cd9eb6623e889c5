"""``ha run``'s COMMAND: whether it runs, how often it was started and restarted, and what
its health checks said.

``CommandMetrics.of(registry, supervisor)`` reads whether COMMAND runs at scrape time (the
supervisor's ``child``); the supervisor calls ``started``, ``restarting`` and ``checked`` as
those happen. Without a registry (no ``--http``) it is a stand-in that records nothing.
Labels: ``election`` and ``identity``, as the elector's.
"""

from __future__ import annotations

from typing import Protocol

from .registry import Registry

__all__ = ("CommandMetrics",)


class _Supervised(Protocol):
    @property
    def child(self) -> object | None: ...


class CommandMetrics:
    """The ``ha_command_*`` metrics of one supervisor."""

    def __init__(self, registry: Registry | None, labels: dict[str, str]) -> None:
        self._on = registry is not None
        if registry is None:
            return
        names = tuple(labels)
        self.up = registry.gauge(
            "ha_command_up", "1 while COMMAND runs (only the active runs it), else 0", names
        )
        self.starts = registry.counter(
            "ha_command_starts_total",
            "COMMAND started (each term's first start and restarts)",
            names,
        ).labels(**labels)
        self.restarts = registry.counter(
            "ha_command_restarts_total",
            "COMMAND exited while active and is started again (--on-exit restart)",
            names,
        ).labels(**labels)
        health = registry.counter(
            "ha_command_health_checks_total",
            "--health checks by result (passed, failed)",
            (*names, "result"),
        )
        self.passed = health.labels(**labels, result="passed")
        self.failed = health.labels(**labels, result="failed")
        self.healthy = registry.gauge(
            "ha_command_healthy", "The last --health check: 1 passed, 0 failed", names
        )
        self._labels = labels

    @classmethod
    def of(
        cls, registry: Registry | None, supervisor: _Supervised, election: str, identity: str
    ) -> CommandMetrics:
        """The metrics of ``supervisor`` in the election at ``election`` as ``identity``."""
        metrics = cls(registry, {"election": election, "identity": identity})
        if metrics._on:
            metrics.up.set_function(lambda: float(supervisor.child is not None), **metrics._labels)
        return metrics

    def started(self) -> None:
        if self._on:
            self.starts.inc()

    def restarting(self) -> None:
        if self._on:
            self.restarts.inc()

    def checked(self, healthy: bool) -> None:
        if self._on:
            (self.passed if healthy else self.failed).inc()
            self.healthy.labels(**self._labels).set(float(healthy))
