"""A rolling update of deploy/kubernetes, played with real `ha run` processes (one per pod, the
pod's name as --id and ?pod=) on the FAKE API server of tests/support/kubeapi: the test plays
the Deployment controller (maxSurge 1, maxUnavailable 0: start a new pod, wait until its
readiness probe, /member, answers 200, then SIGTERM an old pod; the active first, the worst
case) and the Service (its endpoints: the Ready pods labelled ha.io/role=active), and samples
both all along.

What it shows: Ready pods never fall below two (the election always has a standby); the
Service never has two endpoints; at the end the first new pod leads with the second as its
standby. The longest time the Service had no endpoint is printed (each handover's gap: the
new active's label is written after it took over).
"""

from __future__ import annotations

import re
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from ha.drivers.kubernetes.announce import ROLE
from tests.support.backends.kubernetes import KubernetesBackend
from tests.support.cli import Supervisors, popen_ha, stop_procs, wait_until

pytestmark = pytest.mark.timeout(120)

SLEEP = (sys.executable, "-c", "import time; time.sleep(600)")


def member(port: int | None) -> bool:
    """The readiness probe: /member answers 200."""
    if port is None:
        return False
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/member", timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class Pods:
    def __init__(self, backend: KubernetesBackend, directory: Path) -> None:
        self.backend = backend
        self.directory = directory
        self.env = Supervisors(directory).env
        self.procs: dict[str, Any] = {}
        self.ports: dict[str, int] = {}

    def start(self, name: str) -> None:
        body = {"metadata": {"name": name, "labels": {"app": "myapp"}}, "spec": {}}
        b = self.backend
        assert b.server.request("POST", f"/api/v1/namespaces/{b.namespace}/pods", body)[0] == 201
        url = f"{b.url()}&session_timeout=2&pod={name}"
        log = self.directory / f"{name}.log"
        self.procs[name] = popen_ha(
            "--url", url, "run", "/myapp", "--id", name, "--http", "127.0.0.1:0", "--", *SLEEP,
            env=self.env, log=log,
        )  # fmt: skip
        found = wait_until(
            lambda: re.search(r"http on 127\.0\.0\.1:(\d+)", log.read_text(errors="replace")),
            f"{name}'s http",
        )
        self.ports[name] = int(found.group(1))

    def ready(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.poll() is None and member(self.ports.get(name))

    def labels(self) -> dict[str, str | None]:
        b = self.backend
        status, pods = b.server.request("GET", f"/api/v1/namespaces/{b.namespace}/pods")
        assert status == 200
        return {
            p["metadata"]["name"]: (p["metadata"].get("labels") or {}).get(ROLE)
            for p in pods["items"]
        }

    def stop(self, name: str) -> None:
        proc = self.procs[name]
        proc.terminate()  # the kubelet's SIGTERM: a graceful handover
        proc.wait(timeout=30)


def test_a_rolling_update_keeps_a_standby_and_one_endpoint(
    kubernetes_backend: KubernetesBackend, tmp_path: Path
) -> None:
    pods = Pods(kubernetes_backend, tmp_path)
    samples: list[tuple[float, int, list[str]]] = []  # (time, Ready pods, Service endpoints)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            ready = [n for n in list(pods.procs) if pods.ready(n)]
            labels = pods.labels()
            endpoints = [n for n in ready if labels.get(n) == "active"]
            samples.append((time.monotonic(), len(ready), endpoints))

    try:
        pods.start("old-0")
        wait_until(lambda: pods.ready("old-0") and pods.labels()["old-0"] == "active", "old-0")
        pods.start("old-1")
        wait_until(lambda: pods.ready("old-1"), "old-1 Ready (a standby)")
        assert pods.labels() == {"old-0": "active", "old-1": "standby"}
        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            for new, old in (("new-0", "old-0"), ("new-1", "old-1")):
                pods.start(new)  # the surge
                wait_until(lambda n=new: pods.ready(n), f"{new} Ready")  # type: ignore[misc]
                pods.stop(old)  # only then, the active first
            wait_until(lambda: pods.labels().get("new-0") == "active", "new-0 labelled active")
            time.sleep(0.5)  # a few more samples of the end state
        finally:
            done.set()
            sampler.join()
        final = pods.labels()
        assert (final["new-0"], final["new-1"]) == ("active", "standby")
        assert pods.ready("new-0") and pods.ready("new-1")  # 2/2 Ready
    finally:
        stop_procs(pods.procs.values())
    assert len(samples) > 20
    assert min(count for _, count, _ in samples) >= 2, "a moment with no standby"
    assert max(len(ends) for _, _, ends in samples) <= 1, "two endpoints at once"
    gap, longest, start = False, 0.0, 0.0
    for at, _, ends in samples:
        if not ends and not gap:
            gap, start = True, at
        elif ends and gap:
            gap, longest = False, max(longest, at - start)
    assert not gap  # it ends with an endpoint
    print(
        f"rollout: {len(samples)} samples, longest time without a Service endpoint {longest:.3f}s"
    )
