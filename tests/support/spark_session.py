"""The one local SparkSession fixture: ``spark``, one session per test module.

A module that uses it imports it (``from tests.support.spark_session import spark``) after its
``pytest.importorskip("pyspark")``. Its session is ``build_session``'s (local[2], the field
notes' settings), named after the module; a module that sets ``SPARK_SESSION = "report"``
gets the session ``ha report`` builds (its JVM options, its JVM's output in a log file).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def spark(request: pytest.FixtureRequest) -> Iterator[Any]:
    name = "ha-test-" + request.module.__name__.rpartition(".")[2].removeprefix("test_")
    if getattr(request.module, "SPARK_SESSION", None) == "report":
        from ha.report.session import report_session, report_settings

        session = report_session(report_settings(app_name=name))
    else:
        from ha.pipeline.spark import SparkSettings, build_session

        session = build_session(SparkSettings(app_name=name))
    yield session
    session.stop()
