"""Building SparkSessions for the job manager, running Spark work in cancellable job groups.

Settings measured on the target machines (see FIELD-NOTES): Java 17, ``SPARK_LOCAL_IP`` on
loopback, the workers' python pinned to this interpreter (otherwise they run the system python
and miss packages), and JVM flags that cut start-up (C1 only, serial GC). A session still costs
4-8 s to start, so a standby builds its session ahead of time (:class:`WarmSession`).

pyspark is imported lazily: the registry and the job manager's bookkeeping work without it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import anyio.to_thread

from .._install import install_hint
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = (
    "SparkSettings",
    "WarmSession",
    "build_session",
    "cancel_job_group",
    "job_group",
    "prepare_environment",
    "run_in_group",
    "run_in_thread",
)

log = logging.getLogger("ha.pipeline.spark")

T = TypeVar("T")

DEFAULT_JAVA_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"
# C1 only and the serial GC: the JVM is up about a second sooner and small jobs do not miss C2.
FAST_START_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@dataclass(frozen=True, slots=True)
class SparkSettings:
    """How to build a session. ``master`` is anything Spark accepts (``local[4]``,
    ``spark://host:7077``, ``yarn``...); ``conf`` entries override the defaults below."""

    master: str = "local[2]"
    app_name: str = "ha-pipeline"
    # Spark's default of 200 shuffle partitions makes small batches slow for nothing.
    shuffle_partitions: int = 4
    log_level: str = "WARN"
    java_home: str | None = None
    # The address the driver binds and gives executors; None: see driver_ip().
    local_ip: str | None = None
    fast_start: bool = True
    conf: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.master:
            raise ConfigurationError("spark master must not be empty (e.g. local[2])")
        if self.shuffle_partitions < 1:
            raise ConfigurationError(
                f"shuffle_partitions must be at least 1, got {self.shuffle_partitions}"
            )

    def driver_ip(self) -> str | None:
        """Where the driver listens: ``local_ip``, else loopback when everything runs here
        (``local[N]``, a standalone master on loopback), else None: Spark's choice (the host's
        name, or ``SPARK_LOCAL_IP``), which executors on other hosts can reach."""
        if self.local_ip is not None:
            return self.local_ip
        return "127.0.0.1" if _on_loopback(self.master) else None

    def spark_conf(self) -> dict[str, str]:
        conf = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            # Outputs must not depend on the host's time zone: they are compared across hosts.
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.adaptive.enabled": "true",
        }
        if self.fast_start:
            conf["spark.driver.extraJavaOptions"] = FAST_START_JAVA_OPTIONS
        ip = self.driver_ip()
        if ip is not None and self.master.startswith("spark://"):
            # Executors are other processes: they dial back the address the driver gives them.
            conf["spark.driver.host"] = conf["spark.driver.bindAddress"] = ip
        conf.update(self.conf)
        return conf


def _on_loopback(master: str) -> bool:
    """Whether the master runs on this host's loopback: ``local``, ``local[N]``, or
    ``spark://`` with loopback hosts only (a standalone master list is comma-separated)."""
    if master == "local" or master.startswith("local["):
        return True
    if not master.startswith("spark://"):
        return False
    hosts = [h.rsplit(":", 1)[0] for h in master.removeprefix("spark://").split(",")]
    return all(h == "localhost" or h.startswith("127.") for h in hosts)


def prepare_environment(settings: SparkSettings | None = None) -> None:
    """Set the environment variables PySpark reads when it launches the JVM and workers.

    Values the user already exported are kept, except the workers' python, which must be this
    interpreter (a venv's packages are not visible to the system python).
    """
    settings = settings or SparkSettings()
    java_home = settings.java_home or os.environ.get("JAVA_HOME")
    if not java_home and Path(DEFAULT_JAVA_HOME).is_dir():
        java_home = DEFAULT_JAVA_HOME
    if java_home:
        if not Path(java_home, "bin", "java").exists():
            raise ConfigurationError(f"JAVA_HOME has no bin/java: {java_home}")
        os.environ["JAVA_HOME"] = java_home
    ip = settings.driver_ip()
    if ip is not None:
        os.environ.setdefault("SPARK_LOCAL_IP", ip)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


def build_session(settings: SparkSettings | None = None) -> SparkSession:
    """Build (or return the process's existing) SparkSession. Blocking: 4-8 s the first time."""
    settings = settings or SparkSettings()
    prepare_environment(settings)
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ConfigurationError(
            f"PySpark is not installed ({exc}): {install_hint('spark')}"
        ) from exc
    builder = SparkSession.builder.master(settings.master).appName(settings.app_name)
    for key, value in settings.spark_conf().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.log_level)
    return spark


@contextmanager
def job_group(spark: SparkSession, group_id: str, description: str = "") -> Iterator[None]:
    """Tag every Spark job started by this thread inside the block with ``group_id``.

    PySpark pins each Python thread to its own JVM thread, so the group applies to this thread
    only; another thread can then stop the work with :func:`cancel_job_group`. Tasks are
    interrupted, not only abandoned, so executors stop writing at once.
    """
    sc = spark.sparkContext
    sc.setJobGroup(group_id, description or group_id, interruptOnCancel=True)
    try:
        yield
    finally:
        # The thread is reused (anyio's worker pool): do not leak the group to the next work.
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
        sc.setLocalProperty("spark.job.interruptOnCancel", None)  # type: ignore[arg-type]


def cancel_job_group(spark: SparkSession, group_id: str) -> None:
    """Cancel the active and pending jobs of ``group_id``; their actions raise in their thread."""
    spark.sparkContext.cancelJobGroup(group_id)


def run_in_group(spark: SparkSession, group_id: str, fn: Callable[[], T]) -> T:
    """Call ``fn()`` with every Spark job it starts tagged ``group_id`` (for worker threads)."""
    with job_group(spark, group_id):
        return fn()


async def run_in_thread(
    spark: SparkSession, group_id: str, fn: Callable[[], T], *, abandoned: threading.Event
) -> T:
    """``fn()`` in a worker thread, its Spark jobs tagged ``group_id``.

    Cancelling the caller does not wait for the thread: it sets ``abandoned`` (``fn`` may check
    it to drop its result), cancels the group's Spark jobs (shielded, at most a second) and
    re-raises the cancellation. The thread then finishes on its own.
    """
    try:
        return await anyio.to_thread.run_sync(
            run_in_group, spark, group_id, fn, abandon_on_cancel=True
        )
    except anyio.get_cancelled_exc_class():
        abandoned.set()
        with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
            try:
                await anyio.to_thread.run_sync(
                    cancel_job_group, spark, group_id, abandon_on_cancel=True
                )
            except Exception:  # Spark stopping too: its jobs end with it
                log.warning("cancelling Spark job group %s failed", group_id, exc_info=True)
        raise


class WarmSession:
    """A SparkSession built in a background thread ahead of need (hot standby).

    A standby job manager calls :meth:`start` as soon as it joins the election; when it is
    elected, :meth:`wait` returns at once instead of paying Spark's start-up. With
    ``hot=False`` nothing is built until the first :meth:`wait` (a cold standby, for
    comparison).
    """

    def __init__(self, settings: SparkSettings | None = None, *, hot: bool = True) -> None:
        self.settings = settings or SparkSettings()
        self.hot = hot
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._session: SparkSession | None = None
        self._error: BaseException | None = None
        self.owned = True  # built here: its JVM is ours to watch (``JobManager``)

    @classmethod
    def of(cls, session: SparkSession) -> WarmSession:
        """A WarmSession holding a session built elsewhere (tests share one per module); its
        owner watches its JVM."""
        warm = cls(hot=True)
        warm.owned = False
        warm._session = session
        warm._thread = threading.current_thread()  # nothing left to build
        warm._ready.set()
        return warm

    def start(self) -> None:
        """Begin building in a daemon thread (idempotent). Does nothing for a cold standby."""
        if self.hot:
            self._launch()

    def _launch(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._build, name="ha-spark-warmup", daemon=True
                )
                self._thread.start()

    def _build(self) -> None:
        try:
            self._session = build_session(self.settings)
        except BaseException as exc:  # handed to whoever waits, not lost in the thread
            self._error = exc
            log.exception("building the SparkSession failed")
        finally:
            self._ready.set()

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self._session is not None

    def get(self, timeout: float | None = None) -> SparkSession:
        """Block until the session is built (building it now if nobody started it)."""
        self._launch()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"SparkSession not ready after {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._session is not None
        return self._session

    async def wait(self) -> SparkSession:
        """Await the session without blocking the event loop; cancellable."""
        self._launch()
        if not self._ready.is_set():
            await anyio.to_thread.run_sync(self._ready.wait, abandon_on_cancel=True)
        return self.get(0)

    def stop(self) -> None:
        """Stop the session if it was built (blocking; waits for a build in progress). A
        session whose JVM is gone (killed: the job manager leaves for that) has nothing left to
        stop; the process still ends in good order."""
        if self._thread is None:
            return
        self._ready.wait()
        if self._session is not None:
            try:
                self._session.stop()
            except Exception as exc:  # Py4J: the JVM does not answer any more
                log.info("stopping the SparkSession failed: %s", exc)
            self._session = None
