"""Which engine analyzes a journal: this process (``local``) or Spark.

Spark pays for a JVM before it reads a line (seconds), then scales to any input and to a
cluster; the local engine (``ha.report.local``: Arrow and numpy) starts at once and holds
the records in memory. ``choose`` takes the local engine when it can: every journal is a
local file, the master is ``local[...]``, and the files take at most ``LOCAL_SHARE`` of the
memory available now: the engine's peak is about five times the JSON's size (1M events,
133 MB of JSON: 700 MB resident), and the rest is left to everything else.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ("ENGINES", "LOCAL_SHARE", "choose", "memory_available")

ENGINES = ("auto", "local", "spark")
LOCAL_SHARE = 0.125


def memory_available() -> int | None:
    """Bytes of memory available to new allocations (Linux ``MemAvailable``), or None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _local_bytes(paths: Sequence[str]) -> int | None:
    """The size of the local files ``paths`` names, or None when one is not local."""
    from .local import journal_files

    if any("://" in path for path in paths):
        return None
    return sum(os.path.getsize(path) for path in journal_files(paths))


def choose(engine: str, paths: Sequence[str], master: str) -> str:
    """``local`` or ``spark`` for ``engine`` (one of ``ENGINES``)."""
    if engine != "auto":
        return engine
    if not master.startswith("local"):
        return "spark"  # a cluster was asked for
    size = _local_bytes(paths)
    available = memory_available()
    if size is None or available is None:
        return "spark"
    return "local" if size <= LOCAL_SHARE * available else "spark"
