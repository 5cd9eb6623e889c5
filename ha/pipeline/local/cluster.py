"""Job manager processes on one host: ``LocalJobCluster``, for tests, benchmarks and the demo.

It starts job manager processes (``ha.pipeline.jobmanager.worker``) on the embedded sqlite
backend (or the backend at ``url``), follows their events (JSON lines on their stdout), submits
jobs and kills or pauses processes with real signals.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from ...drivers import connect
from ..api.plan import make_plan
from ..client import JobStatus, submit_job, wait_for_job

__all__ = ("Event", "LocalJobCluster", "Worker")


@dataclass(frozen=True, slots=True)
class Event:
    identity: str
    name: str
    fields: dict[str, Any]

    @property
    def t(self) -> float:
        return float(self.fields.get("t", 0.0))


@dataclass(slots=True)
class Worker:
    identity: str
    process: anyio.abc.Process
    stderr: Path
    state: str = "starting"  # from its events: standby, active, neutral, exited
    exited: anyio.Event = field(default_factory=anyio.Event)


class LocalJobCluster:
    """Job manager processes of one cluster on this host: ``async with LocalJobCluster(...)``."""

    def __init__(
        self,
        workdir: Path | str,
        *,
        cluster_id: str = "pipeline",
        url: str | None = None,
        session_timeout: float = 2.0,
        imports: Sequence[str] = (),
        master: str = "local[2]",
        extra_args: Sequence[str] = (),
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = cluster_id
        self.url = url or f"sqlite://{self.workdir / 'ha.db'}?session_timeout={session_timeout}"
        self.blobs = str(self.workdir / "blobs")
        self.imports = list(imports)
        self.master = master
        self.extra_args = list(extra_args)
        self.workers: dict[str, Worker] = {}
        self.events: list[Event] = []
        self._changed = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> Self:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        with anyio.CancelScope(shield=True):
            await self.stop_all()
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        return await self._tg.__aexit__(exc_type, exc, tb)

    # --- processes ----------------------------------------------------------------------------

    async def start(self, identity: str, *args: str, cold: bool = False) -> Worker:
        """Start a job manager process named ``identity``."""
        assert self._tg is not None, "use 'async with LocalJobCluster(...)'"
        argv = [
            sys.executable, "-m", "ha.pipeline.jobmanager.worker",
            "--url", self.url, "--cluster", self.cluster_id, "--id", identity,
            "--blobs", self.blobs, "--master", self.master, "--die-with-parent",
            "--journal", str(self.workdir / f"journal-{identity}.jsonl"),
            *(f"--import={m}" for m in self.imports), *self.extra_args, *args,
        ]  # fmt: skip
        if cold:
            argv.append("--cold")
        stderr = self.workdir / f"{identity}.log"
        with stderr.open("ab") as log:
            process = await anyio.open_process(argv, stdout=subprocess.PIPE, stderr=log)
        worker = Worker(identity, process, stderr)
        self.workers[identity] = worker
        self._tg.start_soon(self._follow, worker)
        return worker

    async def _follow(self, worker: Worker) -> None:
        assert worker.process.stdout is not None
        stream = BufferedByteReceiveStream(worker.process.stdout)
        try:
            while True:
                line = await stream.receive_until(b"\n", 1 << 20)
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                name = doc.pop("event", "?")
                if name in ("active", "standby", "neutral"):
                    worker.state = name
                self._add(Event(worker.identity, name, doc))
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError):
            pass
        finally:
            worker.state = "exited"
            worker.exited.set()
            self._add(Event(worker.identity, "exited", {"t": time.time()}))

    def _add(self, event: Event) -> None:
        self.events.append(event)
        self._changed.set()
        self._changed = anyio.Event()

    def signal(self, identity: str, sig: int) -> float:
        """Send ``sig`` to the worker; returns the wall-clock time it was sent."""
        sent = time.time()
        self.workers[identity].process.send_signal(signal.Signals(sig))
        if sig == signal.SIGKILL:
            self.workers[identity].state = "killed"
        return sent

    def kill(self, identity: str) -> float:
        return self.signal(identity, signal.SIGKILL)

    async def stop_all(self, grace: float = 5.0) -> None:
        for w in self.workers.values():
            if w.process.returncode is None and w.state != "killed":
                try:
                    w.process.send_signal(signal.SIGCONT)
                    w.process.terminate()
                except ProcessLookupError:
                    pass
        with anyio.move_on_after(grace):
            for w in self.workers.values():
                await w.process.wait()
        for w in self.workers.values():
            if w.process.returncode is None:
                w.process.kill()
            await w.process.aclose()  # waits, and closes the pipes

    # --- observing ----------------------------------------------------------------------------

    def find(self, name: str, predicate: Callable[[Event], bool] | None = None) -> list[Event]:
        return [e for e in self.events if e.name == name and (predicate is None or predicate(e))]

    async def wait_event(
        self, name: str, predicate: Callable[[Event], bool] | None = None
    ) -> Event:
        """The first event so named that matches (bound the wait with ``anyio.fail_after``)."""
        while True:
            found = self.find(name, predicate)
            if found:
                return found[0]
            await self._changed.wait()

    def active(self) -> str | None:
        live = [w.identity for w in self.workers.values() if w.state == "active"]
        return live[0] if len(live) == 1 else None

    async def wait_ready(self, count: int, *, warm: bool = True) -> str:
        """Until one worker is active with its SparkSession and ``count - 1`` are standbys
        (with ``warm``, standbys whose SparkSession is built: hot standbys)."""
        while True:
            ready = {e.identity for e in self.find("spark_ready")}
            built = {e.identity for e in self.find("spark_warm")}
            standbys = [
                w.identity
                for w in self.workers.values()
                if w.state == "standby" and (not warm or w.identity in built)
            ]
            active = self.active()
            if active is not None and active in ready and len(standbys) >= count - 1:
                return active
            await self._changed.wait()

    # --- jobs ---------------------------------------------------------------------------------

    async def submit(
        self, pipeline: str, params: dict[str, Any], output: str, *, job_id: str
    ) -> None:
        plan = make_plan(pipeline, params, output, job_id=job_id)
        async with connect(self.url) as driver:
            await submit_job(driver, self.cluster_id, plan)

    async def wait_job(self, job_id: str) -> JobStatus:
        async with connect(self.url) as driver:
            return await wait_for_job(driver, self.cluster_id, job_id, blobs=self.blobs)
