"""The process's own metrics, as every Prometheus client exports them, and ``ha``'s build.

``process_*`` (CPU seconds, resident and virtual memory, open and most file descriptors,
start time), read from ``/proc/self`` at scrape time, under the names and meanings of the
Prometheus client libraries, so the usual dashboards and alerts apply; where ``/proc`` is
missing (not Linux) they are left out. ``ha_build_info`` is 1 with the version of ``ha``,
Python and the event loop as labels: a fleet's versions in one query.
"""

from __future__ import annotations

import os
import platform
import resource
import sys
from collections.abc import Callable, Iterator, Sequence

from .._install import version
from .registry import Counter, Registry

__all__ = ("ProcessMetrics",)

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class _ReadCounter(Counter):
    """A counter whose one value is read at scrape time (the kernel counts, not us)."""

    def __init__(self, name: str, help: str, read: Callable[[], float | None]) -> None:
        super().__init__(name, help)
        self._read = read

    def samples(self) -> Iterator[tuple[str, Sequence[str], Sequence[str], float]]:
        value = self._read()
        if value is not None:
            yield self.name, (), (), value


def _stat() -> list[str] | None:
    """The fields of /proc/self/stat after the command name (which may hold spaces)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _boot_time() -> float | None:
    try:
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


def _cpu() -> float | None:
    fields = _stat()
    return None if fields is None else (int(fields[11]) + int(fields[12])) / _TICK


def _virtual() -> float | None:
    fields = _stat()
    return None if fields is None else float(fields[20])


def _resident() -> float | None:
    fields = _stat()
    return None if fields is None else float(int(fields[21]) * _PAGE)


def _open_fds() -> float | None:
    try:
        return float(len(os.listdir("/proc/self/fd")))
    except OSError:
        return None


def _max_fds() -> float | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else float(soft)


class ProcessMetrics:
    """Registers ``process_*`` and ``ha_build_info`` in ``registry`` (once per process)."""

    def __init__(self, registry: Registry, *, event_loop: str = "") -> None:
        registry.add(
            _ReadCounter(
                "process_cpu_seconds_total", "Total user and system CPU time spent in seconds", _cpu
            )
        )
        gauges: list[tuple[str, str, Callable[[], float | None]]] = [
            ("process_resident_memory_bytes", "Resident memory size in bytes", _resident),
            ("process_virtual_memory_bytes", "Virtual memory size in bytes", _virtual),
            ("process_open_fds", "Number of open file descriptors", _open_fds),
            ("process_max_fds", "Maximum number of open file descriptors", _max_fds),
        ]
        fields, boot = _stat(), _boot_time()
        if fields is not None and boot is not None:
            started = boot + int(fields[19]) / _TICK
            gauges.append(
                (
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds",
                    lambda: started,
                )
            )
        for name, help, read in gauges:
            registry.gauge(name, help).set_function(read)
        info = registry.gauge(
            "ha_build_info",
            "Always 1: the versions of ha, Python and the event loop this process runs",
            ("version", "python", "implementation", "event_loop"),
        )
        info.labels(
            version=version(),
            python=".".join(map(str, sys.version_info[:3])),
            implementation=platform.python_implementation(),
            event_loop=event_loop,
        ).set(1)
