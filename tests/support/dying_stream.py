"""A streaming pipeline whose micro-batch kills its job manager's process (``test_job_deaths``;
job manager processes load it with ``--import tests.support.dying_stream``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ha.pipeline.api.registry import Param
from ha.pipeline.api.streaming import file_source, streaming_pipeline
from ha.pipeline.examples.events import SCHEMA


@streaming_pipeline(
    "test.stream_dies",
    source=file_source("json", SCHEMA),
    params={"input": Param(str, help="directory of events-*.json files")},
)
def dies(spark: Any, params: Mapping[str, Any], batch: Any) -> Any:
    """Its first micro-batch ends the process, as a segfault in a UDF would."""
    os._exit(137)
