"""The HA job manager for PySpark pipelines, and the pieces it is made of.

- ``api``: what users write: pipelines registered by name (``@pipeline``, ``registry``), a
  job's execution plan checked at submission (``plan``), streaming pipelines
  (``@streaming_pipeline``, ``file_source``: ``streaming``);
- ``client``: submitting, cancelling and watching jobs from any process (``JobState``);
- ``layout``: the job manager's nodes beside the stores (``JobLayout``);
- ``jobmanager``: the component that runs jobs while its process leads (``JobManager``), its
  terms (a pure ``rules`` core and the ``term`` that does its I/O), one ``JobRun`` per job
  (``runs``: batch and stream), attempts, a standby's rehearsals, and ``worker`` (a job
  manager process);
- ``commit``: exactly-once output (stage, then atomic rename; ``parquet``), a micro-batch's
  fenced record (``stream_commit``), a term's copy of Spark's checkpoint (``spark_checkpoint``);
- ``spark``: SparkSession settings, job groups, hot standby;
- ``examples``: the example pipelines ``clicks`` (batch) and ``events`` (stream);
- ``local``: job manager processes on one host (``LocalJobCluster``) and the pipeline demo
  (``ha demo --pipeline``, ``run_pipeline_demo``).

The calls behind the command line: ``make_plan`` + ``submit_job``, ``list_jobs``,
``job_status``, ``cancel_job``, ``wait_for_job`` (``ha jobs ...``), ``run_job_manager`` (a job
manager process). Importing this package imports neither pyspark nor ``local`` or
``ha.report``.
"""

from __future__ import annotations

from .api.plan import JobPlan, make_plan, parse_params
from .api.registry import REQUIRED, Param, Pipeline, get_pipeline, pipeline, pipeline_names
from .api.streaming import file_source, streaming_pipeline
from .client import JobState, JobStatus, cancel_job, job_status, list_jobs, submit_job, wait_for_job
from .jobmanager.worker import run_job_manager

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
