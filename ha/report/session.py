"""The report's SparkSession: a master that answers, and a JVM that keeps quiet.

Spark's JVM prints its banner, its log4j warnings and, when anything fails, pages of Java
stack traces on the stderr it inherits: the user's terminal. ``report_session`` starts it
with its output in a log file instead (``jvm_log_path``); Spark's errors still reach Python
as exceptions, which ``ha report`` prints in one line, naming that file.

A ``spark://`` master that does not answer makes Spark retry its registration three times,
20 s apart, with a stack trace each time, before it gives up. So each master address is
first tried with a plain TCP connection (``CONNECT_TIMEOUT`` at most), and one that cannot
be reached is reported in one line before any JVM starts.
"""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigurationError
from ..pipeline.spark import SparkSettings, build_session, prepare_environment

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = (
    "CONNECT_TIMEOUT",
    "REPORT_JAVA_OPTIONS",
    "check_master_reachable",
    "jvm_log_path",
    "report_session",
    "report_settings",
)

CONNECT_TIMEOUT = 3.0  # seconds per master address
STANDALONE_PORT = 7077  # a spark:// master's port when the URL gives none
# Full JIT: C1-only code (SparkSettings.fast_start) parses JSON about half as fast, which
# matters more here than the second it saves at start-up. The parallel collector: the
# report allocates rows at a high rate, and G1's bookkeeping cost about 8% more JVM CPU
# (10M events: 89 vs 97 CPU s, twice). Compile thresholds 6 times the default: the JIT's
# threads used a third of the JVM's CPU (10M events: 22 of 67 s), mostly on code that runs
# a short while (planning, each query's generated classes); with them raised, 14 s, the
# tasks 1 s more (C1 only made the tasks 3 times slower).
REPORT_JAVA_OPTIONS = "-XX:+UseParallelGC -XX:CompileThresholdScaling=6"


def jvm_log_path() -> Path:
    """Where the report's JVM writes its output: one file per user, rewritten each run."""
    return Path(tempfile.gettempdir()) / f"ha-report-jvm-{os.getuid()}.log"


def check_master_reachable(master: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """For ``spark://host:port[,host:port...]``, raise ConfigurationError (one line) unless
    some address accepts a TCP connection. Other masters (local, yarn, k8s) are not checked."""
    if not master.startswith("spark://"):
        return
    failures = []
    for address in master[len("spark://") :].split(","):
        host, _, port = address.strip().rpartition(":")
        if not host:
            host, port = port, str(STANDALONE_PORT)
        try:
            number = int(port)
        except ValueError:
            raise ConfigurationError(f"--master {master}: {port!r} is not a port") from None
        try:
            with socket.create_connection((host.strip("[]"), number), timeout=timeout):
                return
        except TimeoutError:
            failures.append(f"{host}:{number}: no answer within {timeout:g} s")
        except OSError as exc:
            failures.append(f"{host}:{number}: {exc.strerror or exc}")
    raise ConfigurationError(f"cannot reach the Spark master ({'; '.join(failures)})")


def report_settings(
    master: str = "local[2]", driver_memory: str = "2g", app_name: str = "ha-report"
) -> SparkSettings:
    """The settings ``ha report`` builds its session with."""
    return SparkSettings(
        master=master,
        app_name=app_name,
        fast_start=False,
        conf={
            "spark.driver.memory": driver_memory,
            "spark.driver.extraJavaOptions": REPORT_JAVA_OPTIONS,
            # analyze caches a few columns of a third of the records, then the intervals,
            # and reads each a few times: choosing and applying each column's compression
            # cost more CPU than the reads saved (10M events: 26 vs 29 CPU s to fill the
            # first cache); blocks beyond memory go to disk all the same.
            "spark.sql.inMemoryColumnarStorage.compressed": "false",
        },
    )


def report_session(settings: SparkSettings, *, quiet: bool = True) -> SparkSession:
    """Build the report's session on a reachable master; ``quiet``: the JVM's output to
    ``jvm_log_path()`` (when this process has no JVM yet; an existing one is reused as is)."""
    from pyspark import SparkConf, SparkContext

    check_master_reachable(settings.master)
    prepare_environment(settings)
    log = jvm_log_path()
    if quiet and SparkContext._gateway is None:
        from pyspark.java_gateway import launch_gateway

        # The same options build_session gives: the JVM's own (memory, java options) must be
        # on its command line, so they are passed here, where it starts.
        conf = SparkConf(loadDefaults=False).setMaster(settings.master)
        conf.setAppName(settings.app_name).setAll(list(settings.spark_conf().items()))
        with log.open("wb") as out:  # the JVM keeps its own descriptor
            gateway = launch_gateway(conf, popen_kwargs={"stdout": out, "stderr": out})  # type: ignore[no-untyped-call]
        SparkContext._ensure_initialized(gateway=gateway)
    try:
        spark = build_session(settings)
    except Exception as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        first = lines[0][:300] if lines else type(exc).__name__
        where = f" (the JVM's output: {log})" if quiet else ""
        raise ConfigurationError(
            f"Spark did not start on {settings.master}: {first}{where}"
        ) from exc
    # The report's results reach pandas as Arrow batches, not row by row through pickle
    # (a gap sample of 200k rows, a rate per hour over years).
    spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
    return spark
