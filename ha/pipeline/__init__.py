"""The HA job manager for PySpark pipelines, and the pieces it is made of.

- ``registry``: pipelines registered by name (``@pipeline``), their parameters and batches;
- ``plan``: a job's execution plan, checked at submission;
- ``commit``: exactly-once batch output (stage, then atomic rename);
- ``spark``: SparkSession settings, job groups, hot standby;
- ``clicks``: the example pipeline and its data generator;
- ``journal`` and ``report``: synthetic election journals and the journal report.

Importing this package does not import pyspark.
"""

from __future__ import annotations

from .registry import REQUIRED, Param, Pipeline, get_pipeline, pipeline, pipeline_names

__all__ = ("REQUIRED", "Param", "Pipeline", "get_pipeline", "pipeline", "pipeline_names")
