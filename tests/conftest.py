"""Shared fixtures: every async test runs under asyncio and trio; backends come from plugins.

Each backend plugin in ``tests/support/backends/<name>.py`` defines a fixture ``<name>_backend``
returning a ``tests.support.backends.Backend``; ``backend`` runs a test once per available backend.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

# `pytest --hypothesis-profile=long` for thousands of examples (registered before the plugin
# loads the profile named on the command line)
settings.register_profile("long", max_examples=3000)

pytest_plugins = [
    "tests.support.backends.memory",
    "tests.support.backends.sqlite",
    "tests.support.backends.zookeeper",
    "tests.support.backends.etcd",
    "tests.support.kubeapi.fixtures",
    "tests.support.backends.kubernetes",
]

BACKENDS = ["memory", "sqlite", "zookeeper", "etcd", "kubernetes"]


@pytest.fixture(scope="session", params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    return request.getfixturevalue(f"{request.param}_backend")
