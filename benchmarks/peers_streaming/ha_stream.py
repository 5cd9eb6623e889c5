"""The streaming pipeline the recovery benchmark runs on ``ha``: ``events.count`` (the built-in
example, ``ha.pipeline.examples.events``) with an interval trigger, so its query runs until cancelled.

Job manager processes import it (``--import=ha_stream``, this directory on ``PYTHONPATH``), and
so does the benchmark, which submits the job. The uninterrupted reference run is
``events.count`` itself: the same source, function, order and file count, read at once.
"""

from __future__ import annotations

from ha.pipeline.api.registry import get_pipeline
from ha.pipeline.api.streaming import file_source, streaming_pipeline
from ha.pipeline.examples.events import SCHEMA

NAME = "bench.events.count_every"
INTERVAL = 1.0  # seconds between micro-batch triggers

_base = get_pipeline("events.count")
streaming_pipeline(
    NAME,
    source=file_source("json", SCHEMA),
    params=_base.params,
    sort_by=_base.sort_by,
    interval=INTERVAL,
    description="events.count with a trigger every second (benchmarks/streaming_recovery.py)",
    validate=_base.validate,
)(_base.compute)
