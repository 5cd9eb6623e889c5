"""The HA job manager for PySpark pipelines, and the pieces it is made of.

- ``registry``: pipelines registered by name (``@pipeline``), their parameters and batches;
- ``plan``: a job's execution plan, checked at submission;
- ``commit`` and ``parquet``: exactly-once batch output (stage, then atomic rename);
- ``spark``: SparkSession settings, job groups, hot standby;
- ``layout``: the job manager's nodes beside the stores (``JobLayout``);
- ``jobmanager``: the contender that runs jobs while active; ``worker``: it as a process;
- ``jobs``: submitting, cancelling and watching jobs from any process (``JobState``);
- ``streaming``: streaming pipelines (``@streaming_pipeline``, ``file_source``); ``stream_run``
  runs one as a Structured Streaming query, ``stream_commit`` commits each micro-batch by a
  fenced record, ``spark_checkpoint`` repairs a checkpoint a killed driver left half-written;
- ``clicks``: the example pipeline and its data generator; ``events``: the example stream;
- ``local``: job manager processes on one host (``LocalJobCluster``);
- ``demo``: the pipeline demo (``ha demo --pipeline``, ``run_pipeline_demo``).

The calls behind the command line: ``make_plan`` + ``submit_job``, ``list_jobs``,
``job_status``, ``cancel_job``, ``wait_for_job`` (``ha jobs ...``), ``run_job_manager`` (a job
manager process). Importing this package imports neither pyspark nor ``demo``, ``local`` or
``ha.report``.
"""

from __future__ import annotations

from .jobs import JobState, JobStatus, cancel_job, job_status, list_jobs, submit_job, wait_for_job
from .plan import JobPlan, make_plan, parse_params
from .registry import REQUIRED, Param, Pipeline, get_pipeline, pipeline, pipeline_names
from .streaming import file_source, streaming_pipeline
from .worker import run_job_manager

__all__ = (
    "REQUIRED",
    "JobPlan",
    "JobState",
    "JobStatus",
    "Param",
    "Pipeline",
    "cancel_job",
    "file_source",
    "get_pipeline",
    "job_status",
    "list_jobs",
    "make_plan",
    "parse_params",
    "pipeline",
    "pipeline_names",
    "run_job_manager",
    "streaming_pipeline",
    "submit_job",
    "wait_for_job",
)
