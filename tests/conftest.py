"""Shared fixtures: every async test runs under asyncio and trio; backends come from plugins.

Each backend plugin in ``tests/support/backends/<name>.py`` defines a fixture ``<name>_backend``
returning a ``tests.support.backends.Backend``; ``backend`` runs a test once per available backend.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

# `pytest --hypothesis-profile=long` for thousands of examples (registered before the plugin
# loads the profile named on the command line)
settings.register_profile("long", max_examples=3000)

# the helpers' asserts explain themselves as a test's do (they were tests' own, most of them)
pytest.register_assert_rewrite("tests.support")

pytest_plugins = [
    "tests.support.backends.memory",
    "tests.support.backends.sqlite",
    "tests.support.backends.zookeeper",
    "tests.support.backends.etcd",
    "tests.support.kubeapi.fixtures",
    "tests.support.backends.kubernetes",
]

BACKENDS = ["memory", "sqlite", "zookeeper", "etcd", "kubernetes"]


# where tests start Spark JVMs (besides those marked spark)
SPARK_TESTS = ("tests/pipeline/", "tests/report/", "tests/processes/test_pipeline_processes.py")


def slow_selected(config: pytest.Config) -> bool:
    """Long runs were asked for: ``-m slow`` (or an expression naming it) or ``HA_SLOW=1``."""
    return "slow" in (config.getoption("markexpr") or "") or bool(os.environ.get("HA_SLOW"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` are skipped unless asked for: the default run is CI's, which
    must stay under 20 minutes on 2 cores."""
    for item in items:
        if item.get_closest_marker("spark") is not None or item.nodeid.startswith(SPARK_TESTS):
            # with pytest-xdist's --dist loadgroup one worker runs them: one Spark JVM at a time
            item.add_marker(pytest.mark.xdist_group("spark"))
    if slow_selected(config) or os.environ.get("HA_CHAOS_ROUNDS"):
        return
    skip = pytest.mark.skip(reason="a long run: select it with -m slow or HA_SLOW=1")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _logging_left_as_found() -> Iterator[None]:
    """A test that runs the command in-process (its --log-level) or quiets ha's logs for a
    fault run leaves the loggers as it found them: later tests read what ha logs (caplog)."""
    named = [logging.getLogger(name) for name in ("ha", "ha.supervisor", "kazoo", "httpx")]
    saved = [(logger, logger.level, logger.propagate, list(logger.handlers)) for logger in named]
    root = logging.getLogger()
    root_level, root_handlers = root.level, list(root.handlers)
    yield
    for logger, level, propagate, handlers in saved:
        logger.setLevel(level)
        logger.propagate = propagate
        logger.handlers[:] = handlers
    root.setLevel(root_level)
    for handler in list(root.handlers):
        # the command's own (pytest's capture handlers are subclasses, and pytest's to manage)
        if handler not in root_handlers and type(handler) in (
            logging.StreamHandler,
            logging.NullHandler,
        ):
            root.removeHandler(handler)


@pytest.fixture(scope="session", params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    return request.getfixturevalue(f"{request.param}_backend")
