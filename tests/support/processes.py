"""Process trees read from /proc: a job manager's Spark JVM, a worker's executors.

The tests check that no JVM outlives what should take it down (a killed driver, a stopped
cluster), so they find those JVMs by ancestry rather than by name.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ("command", "descendants", "java_under", "running")


def descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (Spark's JVM is a child of the job manager process); none
    if ``pid`` is gone."""
    found = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []
    for task in tasks:
        try:
            children = (task / "children").read_text().split()
        except OSError:  # the thread ended meanwhile
            continue
        for child in children:
            found += [int(child), *descendants(int(child))]
    return found


def command(pid: int) -> str:
    """The process's command name ('' once it is gone)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def java_under(pid: int) -> list[int]:
    """The JVMs under ``pid``."""
    return [child for child in descendants(pid) if command(child) == "java"]


def running(pids: list[int]) -> list[int]:
    """Those of ``pids`` that still run (a zombie has exited: not counted)."""
    alive = []
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                alive.append(pid)
        except (OSError, IndexError):
            continue
    return alive
