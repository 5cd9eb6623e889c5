"""The interface each backend plugin gives the backend-agnostic tests."""

from __future__ import annotations

from typing import Any, Protocol

from ha.drivers.base import Driver


class Backend(Protocol):
    name: str
    # True when several drivers of this backend live in other processes (sqlite, zookeeper).
    cross_process: bool

    def url(self) -> str:
        """A URL for a namespace private to the current test (fresh chroot, file or cluster)."""
        ...

    def driver(self, **options: Any) -> Driver:
        """An unstarted driver on ``url()``; options such as ``session_timeout`` (seconds)."""
        ...
