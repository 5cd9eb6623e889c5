"""Job managers on one host: ``LocalJobCluster`` (``cluster``: job manager processes started,
watched, killed and paused with real signals, for tests, benchmarks and the demo) and the
pipeline demo (``demo``: ``ha demo --pipeline``, imported only then: it needs PySpark)."""

from __future__ import annotations

from .cluster import Event, LocalJobCluster, Worker

__all__ = ("Event", "LocalJobCluster", "Worker")
