"""The memory backend for the backend-agnostic tests: a fresh named cluster per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from ha.drivers.memory import MemoryCluster, MemoryDriver

_names = itertools.count()


class MemoryBackend:
    name = "memory"
    cross_process = False

    def __init__(self) -> None:
        self.cluster_name = f"test-{next(_names)}"

    def url(self) -> str:
        return f"memory://{self.cluster_name}"

    def driver(self, **options: Any) -> MemoryDriver:
        return MemoryDriver(self.cluster_name, **options)


@pytest.fixture
def memory_backend() -> Iterator[MemoryBackend]:
    backend = MemoryBackend()
    yield backend
    MemoryCluster.drop(backend.cluster_name)
