"""The job manager's metrics, counted from the events it already emits (``EventSink``).

``JobManagerMetrics.sink(then)`` returns an event sink that counts and hands each event on to
``then`` (the printing of ``ha jobs manager``): batches committed, failed and cancelled, the
recoveries of each leadership term and the jobs they found, jobs accepted and finished.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .registry import Registry

__all__ = ("JobManagerMetrics",)

EventSink = Callable[[str, dict[str, Any]], None]

_BATCHES = {
    "batch_committed": "committed",
    "batch_failed": "failed",
    "batch_cancelled": "cancelled",
}


class JobManagerMetrics:
    """``ha_jobmanager_*``, labelled by the job manager's ``identity``."""

    def __init__(self, registry: Registry) -> None:
        self.batches = registry.counter(
            "ha_jobmanager_batches_total",
            "Batches that ended, by outcome (committed, failed, cancelled)",
            ("identity", "outcome"),
        )
        self.recoveries = registry.counter(
            "ha_jobmanager_recoveries_total",
            "Leadership terms that recovered the stored jobs",
            ("identity",),
        )
        self.recovered_jobs = registry.counter(
            "ha_jobmanager_recovered_jobs_total",
            "Jobs found unfinished by a recovery (run again from their checkpoint)",
            ("identity",),
        )
        self.deaths = registry.counter(
            "ha_jobmanager_attempt_deaths_total",
            "Jobs found with an attempt left open by a job manager that died running it",
            ("identity",),
        )
        self.jobs = registry.counter(
            "ha_jobmanager_jobs_total",
            "Jobs accepted, refused and finished (by outcome)",
            ("identity", "event"),
        )

    def count(self, identity: str, name: str, fields: dict[str, Any]) -> None:
        outcome = _BATCHES.get(name)
        if outcome is not None:
            self.batches.labels(identity=identity, outcome=outcome).inc()
        elif name == "recovered":
            self.recoveries.labels(identity=identity).inc()
            self.recovered_jobs.labels(identity=identity).inc(len(fields.get("jobs", ())))
        elif name == "attempt_died":
            self.deaths.labels(identity=identity).inc()
        elif name in ("accepted", "refused"):
            self.jobs.labels(identity=identity, event=name).inc()
        elif name == "job_finished":
            event = f"finished_{fields.get('outcome', 'unknown')}"
            self.jobs.labels(identity=identity, event=event).inc()

    def sink(self, identity: str, then: EventSink | None = None) -> EventSink:
        """An event sink for ``JobManager(on_event=...)`` that counts, then calls ``then``."""
        self.recoveries.labels(identity=identity)  # shown as 0 before the first
        self.recovered_jobs.labels(identity=identity)
        self.deaths.labels(identity=identity)
        for outcome in _BATCHES.values():
            self.batches.labels(identity=identity, outcome=outcome)

        def on_event(name: str, fields: dict[str, Any]) -> None:
            self.count(identity, name, fields)
            if then is not None:
                then(name, fields)

        return on_event
