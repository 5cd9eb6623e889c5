"""`ha status` and `ha failover` on a job manager cluster's election (#15), through the real
command, with two real job manager processes on one sqlite file (the real ``JobManager`` and
its HA services; Spark stood in for: no JVM).

The job managers are the component ``jobmanager`` of their processes' HA services, whose one
election is ``/ha/CLUSTER/election``: ``ha status`` shows them there (queue, active, standby,
member nodes) and ``ha failover`` hands the lead to the standby, which publishes itself as the
job manager's leader.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import ha, ha_env

CHILD = """
import json, sys
import anyio
from ha._process import die_with_parent, quit_on_signals
from ha.drivers import connect
from ha.pipeline.jobmanager import JobManager
from ha.pipeline.spark import WarmSession

url, blobs, name = sys.argv[1:]
die_with_parent()


class Context:  # what the job manager asks of a SparkContext around a batch
    def setJobGroup(self, *args, **kwargs): pass
    def setLocalProperty(self, *args): pass
    def cancelJobGroup(self, *args): pass


class Spark:
    sparkContext = Context()


def emit(event, fields):
    print(json.dumps({"event": event, **fields}, default=str), flush=True)


async def main():
    async with connect(url) as driver:
        jm = JobManager(driver, "c1", identity=name, blobs=blobs,
                        spark=WarmSession.of(Spark()), poll_interval=0.1, on_event=emit)
        async with anyio.create_task_group() as tg:
            tg.start_soon(quit_on_signals, jm.quit)
            await jm.run()
            tg.cancel_scope.cancel()

anyio.run(main)
"""

PATH = "/ha/c1/election"


class Manager:
    def __init__(self, name: str, tmp: Path, url: str) -> None:
        self.name = name
        self.out = tmp / f"{name}.out"
        with self.out.open("wb") as out, (tmp / f"{name}.log").open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-c", CHILD, url, str(tmp / "blobs"), name],
                stdout=out,
                stderr=err,
            )

    def events(self) -> list[str]:
        lines = self.out.read_text().splitlines()
        return [json.loads(line)["event"] for line in lines if line.startswith("{")]

    @property
    def state(self) -> str | None:
        told = [e for e in self.events() if e in ("active", "standby", "neutral")]
        return told[-1] if told else None


def wait_until(check: Callable[[], bool], what: str, within: float = 20) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {within}s")
        time.sleep(0.05)


@pytest.fixture
def managers(tmp_path: Path) -> Iterator[tuple[dict[str, str], list[Manager]]]:
    url = f"sqlite://{tmp_path / 'ha.db'}?session_timeout=1"
    env = ha_env(tmp_path, HA_URL=url)
    started: list[Manager] = []
    try:
        yield env, started
    finally:
        for m in started:
            m.process.send_signal(signal.SIGTERM)
        for m in started:
            try:
                m.process.wait(10)
            except subprocess.TimeoutExpired:
                m.process.kill()
                m.process.wait()


def status(env: dict[str, str]) -> dict[str, Any]:
    found = ha("status", PATH, "--json", env=env)
    assert found.returncode in (0, 3), found.stderr
    doc: dict[str, Any] = json.loads(found.stdout)
    return doc


def members(doc: dict[str, Any]) -> dict[str, str]:
    return {m["identity"]: m["state"] for m in doc["members"]}


def status_once(env: dict[str, str], expected: dict[str, str]) -> dict[str, Any]:
    """``ha status --json`` once its member nodes say ``expected`` (they are written just
    after the job managers' own events: usually at the first reading)."""
    deadline = time.monotonic() + 20
    while members(doc := status(env)) != expected:
        assert time.monotonic() < deadline, f"members {members(doc)}, not {expected}"
        time.sleep(0.05)
    return doc


def test_ha_status_and_ha_failover_on_the_job_managers_election(
    tmp_path: Path, managers: tuple[dict[str, str], list[Manager]]
) -> None:
    env, started = managers
    url = env["HA_URL"]
    jm1 = Manager("jm-1", tmp_path, url)
    started.append(jm1)
    wait_until(lambda: jm1.state == "active", "jm-1 active")
    jm2 = Manager("jm-2", tmp_path, url)
    started.append(jm2)
    wait_until(lambda: jm2.state == "standby", "jm-2 standby")

    # ha status: the queue (the active first), and each job manager's member node
    doc = status_once(env, {"jm-1": "active", "jm-2": "standby"})
    assert doc["active"] == "jm-1"
    assert [c["identity"] for c in doc["contenders"]] == ["jm-1", "jm-2"]
    shown = ha("status", PATH, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "jm-1" in shown.stdout and "jm-2" in shown.stdout

    # ha failover: jm-1 cedes, jm-2 takes over (and publishes itself), jm-1 queues again
    moved = ha("failover", PATH, "--cooldown", "1", "--confirm", "0.5", env=env, timeout=60)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    # the election has moved (ha failover confirmed it); jm-2's events reach us by its stdout
    wait_until(lambda: jm2.state == "active" and "spark_ready" in jm2.events(), "jm-2 active")
    wait_until(lambda: jm1.state == "standby", "jm-1 back after its cooldown")
    doc = status_once(env, {"jm-1": "standby", "jm-2": "active"})
    assert doc["active"] == "jm-2"
    assert [c["identity"] for c in doc["contenders"]] == ["jm-2", "jm-1"]
    # nothing was fenced: a graceful handover
    assert "neutral" in jm1.events() and jm1.process.poll() is None
