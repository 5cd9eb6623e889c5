"""A Spark standalone cluster for the tests: one master and two workers on loopback.

They are started from the PySpark package's own launcher (``<pyspark>/bin/spark-class``; the
wheel has no ``sbin/start-master.sh``), as plain JVMs that are children of the test process,
each with the fast-start flags of FIELD-NOTES and a small heap. Each worker offers 1 core and
1 GiB, so it hosts one executor (Spark's default executor size, 1 core and 1 GiB).

Cores per application: the master gives an application that does not set ``spark.cores.max``
``spark.deploy.defaultCores`` of them, here 1. Without it the first application takes every
core and a job manager's warm standby holds a SparkSession with no executor: at failover it
would pay an executor's start-up. With 1 core each, the active's application and one warm
standby's run side by side (two RUNNING applications, one executor each); a third session
registers and waits for a core. This is the cluster operator's choice (the master's setting,
or ``spark.cores.max`` in the job managers' ``spark-defaults.conf``), not the job manager's.

Fixture ``spark_cluster`` (module scope): a :class:`SparkCluster` with both workers ALIVE. Its
teardown stops every JVM it started (SIGTERM, then SIGKILL) with the executors the workers
started, and fails if one is left. Tests are skipped, with the reason, when Java or PySpark is
missing; a cluster that is installed but does not come up is an error.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ha._process import deathsig_preexec
from tests.support.backends.zookeeper import free_port
from tests.support.processes import command, descendants, running

__all__ = ("SparkCluster", "missing_reason", "spark_cluster")

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
WORKERS = 2
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"  # FIELD-NOTES: start-up, not speed
MASTER_OPTIONS = (
    "-Dspark.deploy.defaultCores=1"  # see the module docstring
    " -Dspark.master.rest.enabled=false"  # its fixed port 6066 would clash between clusters
)


def _spark_home() -> Path | None:
    try:
        import pyspark
    except ImportError:
        return None
    return Path(pyspark.__file__).parent


def _java_home() -> str | None:
    from ha.pipeline.spark import DEFAULT_JAVA_HOME

    for home in (os.environ.get("JAVA_HOME"), DEFAULT_JAVA_HOME):
        if home and Path(home, "bin", "java").exists():
            return home
    java = shutil.which("java")
    return str(Path(java).resolve().parent.parent) if java else None


def missing_reason() -> str | None:
    """Why a standalone cluster cannot run here, or None if it can."""
    home = _spark_home()
    if home is None:
        return "PySpark is not installed (pip install 'ha-elector[spark]')"
    if not (home / "bin" / "spark-class").exists():
        return f"{home}/bin/spark-class is missing (PySpark's launcher)"
    if _java_home() is None:
        return "java is not installed (apt-get install openjdk-17-jre-headless)"
    return None


class SparkCluster:
    """A master and ``WORKERS`` workers under ``directory`` (their logs, work dirs and conf)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.webui_port = free_port()
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._known: set[int] = set()  # every JVM seen under a daemon, checked at stop()

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        conf = self.directory / "conf"  # empty: a developer's own Spark conf cannot leak in
        conf.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(
            JAVA_HOME=str(_java_home()),
            SPARK_CONF_DIR=str(conf),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_MASTER_HOST="127.0.0.1",
            SPARK_DAEMON_MEMORY="256m",
            SPARK_DAEMON_JAVA_OPTS=JAVA_OPTIONS,
            SPARK_MASTER_OPTS=MASTER_OPTIONS,
            SPARK_LOG_DIR=str(self.directory),
        )
        return env

    def _launch(self, name: str, cls: str, *args: str) -> None:
        home = _spark_home()
        assert home is not None
        with (self.directory / f"{name}.log").open("ab") as log:
            self.processes[name] = subprocess.Popen(
                [str(home / "bin" / "spark-class"), cls, *args],
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # spark-class ends in exec java: the JVM keeps the pid, and dies with pytest
                preexec_fn=deathsig_preexec(),
            )

    def start(self, timeout: float = 120.0) -> None:
        """Start the master, then the workers once it leads (a worker that registers before
        that waits for its retry, seconds later), and return when every worker is ALIVE."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._launch(
            "master", MASTER, "--host", "127.0.0.1",
            "--port", str(self.port), "--webui-port", str(self.webui_port),
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        self._wait(lambda s: s.get("status") == "ALIVE", deadline, "the master to lead")
        for n in range(1, WORKERS + 1):
            work = self.directory / f"worker-{n}"
            work.mkdir(exist_ok=True)
            self._launch(
                f"worker-{n}", WORKER, self.url, "--host", "127.0.0.1",
                "--cores", "1", "--memory", "1g", "--work-dir", str(work), "--webui-port", "0",
            )  # fmt: skip
        self._wait(lambda s: len(self.alive_workers(s)) == WORKERS, deadline, "the workers")

    def _wait(self, done: Callable[[dict[str, Any]], bool], deadline: float, what: str) -> None:
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"Spark {name} exited; see {self.directory}/{name}.log")
            state = self.state()
            if state and done(state):
                return
            time.sleep(0.1)
        raise RuntimeError(f"Spark cluster: waited too long for {what}; logs in {self.directory}")

    def state(self) -> dict[str, Any]:
        """The master's JSON (workers, applications); {} while it does not answer."""
        url = f"http://127.0.0.1:{self.webui_port}/json/"
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                doc: dict[str, Any] = json.load(reply)
                return doc
        except (OSError, urllib.error.URLError, ValueError):
            return {}

    @staticmethod
    def alive_workers(state: dict[str, Any]) -> list[dict[str, Any]]:
        return [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]

    def applications(self, state: dict[str, Any] | None = None) -> dict[str, str]:
        """Application name -> state (RUNNING, WAITING, FINISHED, KILLED...), newest last; a
        name run twice shows its newest application."""
        state = state if state is not None else self.state()
        apps = [*state.get("completedapps", []), *state.get("activeapps", [])]
        return {a["name"]: a["state"] for a in sorted(apps, key=lambda a: a["starttime"])}

    def wait_until(self, done: Callable[[dict[str, Any]], bool], timeout: float = 60.0) -> None:
        """Poll the master's JSON until ``done(state)`` (blocking: run it in a thread)."""
        self._wait(done, time.monotonic() + timeout, "a state of the master")

    def jvms(self) -> list[int]:
        """The daemons' JVMs and the JVMs under them (executors), as of now."""
        pids = [p.pid for p in self.processes.values() if p.poll() is None]
        for pid in list(pids):
            pids += descendants(pid)
        # spark-class's launcher subshell outlives its exec for a moment: java only
        pids = [pid for pid in pids if command(pid) == "java"]
        self._known.update(pids)
        return pids

    def stop(self, grace: float = 15.0) -> list[int]:
        """SIGTERM the workers (they stop their executors), then the master; SIGKILL what is
        left after ``grace``. Returns the pids still running after that (none, normally)."""
        self.jvms()
        order = sorted(self.processes, key=lambda name: name == "master")  # workers first
        for name in order:
            if self.processes[name].poll() is None:
                self.processes[name].send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while running(sorted(self._known)) and time.monotonic() < deadline:
            for process in self.processes.values():
                process.poll()  # reap
            time.sleep(0.1)
        for pid in running(sorted(self._known)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for process in self.processes.values():
            process.wait(timeout=10)
        time.sleep(0.2)  # executors are the workers' children: reaped by init once orphaned
        return running(sorted(self._known))


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    reason = missing_reason()
    if reason:
        pytest.skip(f"a Spark standalone cluster needs: {reason}")
    cluster = SparkCluster(tmp_path_factory.mktemp("spark-standalone"))
    try:
        cluster.start()
        yield cluster
    finally:
        left = cluster.stop()
    assert left == [], f"JVMs of the Spark cluster still running after its stop: {left}"
