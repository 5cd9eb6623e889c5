"""The HA job manager for PySpark pipelines, and the pieces it is made of.

- ``registry``: pipelines registered by name (``@pipeline``), their parameters and batches;
- ``plan``: a job's execution plan, checked at submission;
- ``commit`` and ``parquet``: exactly-once batch output (stage, then atomic rename);
- ``spark``: SparkSession settings, job groups, hot standby;
- ``jobmanager``: the contender that runs jobs while active; ``worker``: it as a process;
- ``jobs``: submitting, cancelling and watching jobs from any process;
- ``clicks``: the example pipeline and its data generator;
- ``demo``: job manager processes on one host, and the pipeline demo.

The calls behind the command line: ``make_plan`` + ``submit_job``, ``list_jobs``,
``job_status``, ``cancel_job``, ``wait_for_job`` (``ha jobs ...``), ``run_job_manager`` (a job
manager process), ``run_pipeline_demo`` (``ha demo --pipeline``).
Importing this package does not import pyspark.
"""

from __future__ import annotations

from .demo import run_pipeline_demo
from .jobs import JobStatus, cancel_job, job_status, list_jobs, submit_job, wait_for_job
from .plan import JobPlan, make_plan, parse_params
from .registry import REQUIRED, Param, Pipeline, get_pipeline, pipeline, pipeline_names
from .worker import run_job_manager

__all__ = (
    "REQUIRED",
    "JobPlan",
    "JobStatus",
    "Param",
    "Pipeline",
    "cancel_job",
    "get_pipeline",
    "job_status",
    "list_jobs",
    "make_plan",
    "parse_params",
    "pipeline",
    "pipeline_names",
    "run_job_manager",
    "run_pipeline_demo",
    "submit_job",
    "wait_for_job",
)
