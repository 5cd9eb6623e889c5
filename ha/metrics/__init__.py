"""Metrics in the Prometheus text format: the registry, and what ``ha`` measures with it.

``registry.py`` holds the metric kinds and the exposition; ``election.py`` an elector's
metrics, ``backend.py`` a driver's operations, ``command.py`` ``ha run``'s COMMAND,
``process.py`` the process (``process_*``, ``ha_build_info``), ``jobs.py`` the job manager's
batches and recoveries. ``ha run --http`` and ``ha jobs manager --http`` serve them at ``/metrics``
(``ha/http/``); a program of its own does the same with a ``Registry`` and ``ha.http.serve``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from .backend import BackendMetrics, tap_node_events
    from .command import CommandMetrics
    from .election import ElectorMetrics, cause_label
    from .jobs import JobManagerMetrics
    from .process import ProcessMetrics
    from .registry import LATENCY_BUCKETS, Counter, Gauge, Histogram, Metric, Registry
else:  # loaded on first use: ha run without --http needs CommandMetrics' stand-in alone
    __getattr__, __dir__ = lazy_names(
        __name__,
        {
            "BackendMetrics": ".backend:BackendMetrics",
            "tap_node_events": ".backend:tap_node_events",
            "CommandMetrics": ".command:CommandMetrics",
            "ElectorMetrics": ".election:ElectorMetrics",
            "cause_label": ".election:cause_label",
            "JobManagerMetrics": ".jobs:JobManagerMetrics",
            "ProcessMetrics": ".process:ProcessMetrics",
            "LATENCY_BUCKETS": ".registry:LATENCY_BUCKETS",
            "Counter": ".registry:Counter",
            "Gauge": ".registry:Gauge",
            "Histogram": ".registry:Histogram",
            "Metric": ".registry:Metric",
            "Registry": ".registry:Registry",
        },
    )

__all__ = (
    "LATENCY_BUCKETS",
    "BackendMetrics",
    "CommandMetrics",
    "Counter",
    "ElectorMetrics",
    "Gauge",
    "Histogram",
    "JobManagerMetrics",
    "Metric",
    "ProcessMetrics",
    "Registry",
    "cause_label",
    "tap_node_events",
)
