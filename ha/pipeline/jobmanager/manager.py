"""The HA job manager: a component of the cluster's HA services that runs pipeline jobs on
Spark while its process leads.

One election per cluster (Flink's multi-component leader election). The job manager is the
component ``jobmanager`` of ``ha.services`` (``HAServices.leader_election("jobmanager")``): every
job manager process, and every other component a process hosts beside it (a user's dispatcher),
takes part in the one election at ``<prefix>/<cluster_id>/election``, so one failover moves them
all and ``ha status``/``ha failover`` work on that path. Given no services, a job manager makes
its own for its process (with a member node: ``ha failover`` can move it); given a process's
services (``services=``), it joins them and leads whenever that process does. When the process
wins, the job manager is granted leadership with a session id and, inside that grant only:

1. waits for its SparkSession (built at start: hot standby), confirms the grant, which publishes
   its identity at ``<prefix>/<cluster_id>/leader/jobmanager`` (``leader_retrieval``), then
   finishes the cleanup of jobs whose result is recorded but dirty, and recovers every job whose
   execution plan is stored and that has no result (locking its plan);
2. takes submissions from the inbox into the execution plan store (fenced) and refuses the
   malformed ones with a failed result that says why;
3. runs the jobs one at a time (``runs.batch``; streams: ``runs.stream``), batch by batch
   from the latest checkpoint: stage the batch's output (Spark), commit it (atomic rename,
   ``commit``), then record checkpoint ``n`` = "n batches committed" (fenced);
4. records each job's result (dirty), cleans its plan, checkpoints and registry entry, and
   marks the result clean. A job found with a plan but no result is run again from its
   checkpoint, even if the registry says DONE (the result was lost with its active): batches
   are idempotent, so running it again is how its real outcome is learned.

Why nothing is lost or duplicated: a batch's checkpoint is written only after its output is
committed, so a crash can only make a batch run again, never skip one; running it again writes
the same bytes to the same place (``commit``). Store writes carry the lease of the grant (the
process's, fenced by its node in the election: ``lease.fence_ops()``), so a deposed active
cannot move a checkpoint or record a result; its late commit of a batch output is harmless for
the same reason a redo is.

On loss of leadership the services cancel the grant before the elector does anything else
(``term.py``'s work runs in the grant's task): the running batch's Spark job group is
cancelled, its staging directory is never committed, and the active stops touching outputs (it
also checks ``lease.valid``, with ``Lease.stop_deadline()``, before each commit: a paused
process may wake up late). A term that fails (not cancelled: a backend error while the lease
holds) gives the process's lead up (``give_up_leadership``), as a failed ``become_active`` did
before, so that another process serves meanwhile; one that fails with its Spark gone (never
built, or its context stopped: a standalone master down) leaves the election instead, as a
standby whose JVM died does, for every later term of the process would fail the same way at
once (``spark_lost``: the process exits 69). A job whose pipeline
raises, or whose job managers die running it, is tried again up to its ``max_attempts`` across
failovers, then failed with the reason (``attempts``).

Earlier versions' job managers had an election of their own at ``<cluster root>/jobmanager``. A
job manager refuses to start while a contender is queued there (an older job manager still
running would lead beside it): stop the old ones first, then start the new ones.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from contextlib import AsyncExitStack
from functools import partial
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
from anyio.from_thread import BlockingPortal

from ...drivers.base import Driver
from ...election.elector import Elector
from ...election.journal import JournalWriter, Transition
from ...election.lease import Lease
from ...election.machine import State
from ...election.nodes import ElectionNodes
from ...election.timing import Timing
from ...errors import ConfigurationError, DriverError
from ...metrics.jobs import EventSink  # (name, fields): what the http layer counts through
from ...services import HAServices
from ...stores import BlobStore, Stores, Writer
from ..layout import JobLayout
from ..spark import SparkSettings, WarmSession
from .rehearsal import rehearse_stored_streams
from .rows import job_rows
from .runs.base import TermContext
from .runs.stream import session_alive, warm_streaming
from .term import Term

__all__ = ("JobManager", "EventSink")

log = logging.getLogger("ha.pipeline.jobmanager")

COMPONENT = "jobmanager"  # its name among the components of the cluster's HA services


class JobManager:
    """One job manager: a component of its process's HA services. ``await manager.run()``
    until ``quit()``.

    ``blobs``: the blob directory shared by every job manager of the cluster (plans and
    checkpoints are kept there, the coordination backend holds pointers). ``spark``: settings
    or a ``WarmSession``; with ``hot_standby`` the session is built at start, not when elected
    (``warm_streams``: and a tiny stream runs once, then, while standby, each stored streaming
    job is rehearsed once in private: ``rehearsal``). ``checkpointing=False`` skips the
    per-batch checkpoint (a job restarts from its first batch after a failover): for benchmarks
    only.
    ``services``: the process's HA services (entered, on ``driver``, of ``cluster_id``) to join
    as one of their components; without them the job manager makes its own, with ``identity``,
    ``timing`` and ``journal``, and ``quit()`` leaves the election. With services given,
    ``quit()`` ends only the job manager: its process stays in the election for its other
    components (close the services too if the job manager must be served elsewhere).
    """

    def __init__(
        self,
        driver: Driver,
        cluster_id: str,
        *,
        identity: str,
        blobs: BlobStore | str | os.PathLike[str],
        spark: SparkSettings | WarmSession | None = None,
        hot_standby: bool = True,
        prefix: str = "/ha",
        timing: Timing | None = None,
        journal: JournalWriter | str | None = None,
        poll_interval: float = 1.0,
        checkpointing: bool = True,
        on_event: EventSink | None = None,
        warm_streams: bool = False,
        services: HAServices | None = None,
    ) -> None:
        if poll_interval <= 0:
            raise ConfigurationError(f"poll_interval must be positive, got {poll_interval}")
        if services is not None and (services.driver is not driver or services.layout.root
                                     != JobLayout(cluster_id, prefix).root):  # fmt: skip
            raise ConfigurationError("the services given must be of the same driver and cluster")
        self.driver = driver
        self.cluster_id = cluster_id
        self.identity = identity
        self.blobs = blobs
        self.prefix = prefix
        self.layout = JobLayout(cluster_id, prefix)
        self.warm = spark if isinstance(spark, WarmSession) else WarmSession(spark, hot=hot_standby)
        self._owns_services = services is None
        self.services = services or HAServices(
            driver,
            cluster_id,
            identity=identity,
            prefix=prefix,
            timing=timing,
            journal=journal,
            members=True,
        )
        self.services.on_elector(self._observe)
        self.election = self.services.leader_election(COMPONENT)
        self.poll_interval = poll_interval
        self.checkpointing = checkpointing
        self.on_event: EventSink = on_event or partial(log.info, "%s %s")
        self.portal: BlockingPortal | None = None
        self.warm_streams = warm_streams
        self._leading = threading.Event()  # a term runs: standby-only work stands aside
        self._stop: anyio.Event | None = None
        self._quit = False
        self._observed: Elector | None = None
        self.spark_lost: str | None = None  # why it left, if Spark was lost: a failed process

    @property
    def elector(self) -> Elector:
        """The process's elector (the services'): running, or the next to run."""
        return self.services.elector

    async def job_rows(self) -> list[dict[str, Any]]:
        """The cluster's jobs, for the status page (``rows.py``)."""
        return await job_rows(self.driver, self.layout, blobs=self.blobs, prefix=self.prefix)

    def emit(self, name: str, **fields: Any) -> None:
        fields.setdefault("t", time.time())
        fields.setdefault("identity", self.identity)
        try:
            self.on_event(name, fields)
        except Exception:  # an observer's bug must not stop the job manager
            log.exception("event sink raised on %s", name)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[Any] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Take part in the cluster's election and serve until ``quit()``."""
        await self._refuse_old_election()
        self.warm.start()
        self._stop = anyio.Event()
        if self._quit:
            self._stop.set()
        election = self.services.election_path
        self.emit(
            "started",
            election=election,
            component=COMPONENT,
            hot_standby=self.warm.hot,
            warm_streams=self.warm_streams,
        )
        # Streams commit through the portal from Spark's threads, past their term
        # (``runs.stream``).
        async with AsyncExitStack() as stack:
            if self._owns_services:
                await stack.enter_async_context(self.services)
            else:  # it may run already, for the process's other components
                self._observe(self.services.elector, None)
            self.portal = await stack.enter_async_context(BlockingPortal())
            tg = await stack.enter_async_context(anyio.create_task_group())
            if self.warm.hot:
                tg.start_soon(self._announce_warm)
                tg.start_soon(self._watch_spark)
            await self.election.start(self)
            task_status.started(self.elector)
            try:
                await self._stop.wait()
            finally:
                with anyio.CancelScope(shield=True):
                    await self.election.close()  # revoked first; alone: leaves the election
            tg.cancel_scope.cancel()

    async def _refuse_old_election(self) -> None:
        old = ElectionNodes(self.layout.old_election)
        queued = await old.entries(self.driver)
        if queued:
            who = ", ".join(sorted({e.identity.decode(errors="replace") for e in queued}))
            raise ConfigurationError(
                f"job managers of an earlier version are running in {old.path} ({who}): stop"
                " them before starting this one (their election is not this version's)"
            )

    async def _announce_warm(self) -> None:
        try:
            spark = await self.warm.wait()
            if self.warm_streams:
                await anyio.to_thread.run_sync(warm_streaming, spark, abandon_on_cancel=True)
        except Exception:  # reported when it matters: on election
            return
        self.emit("spark_warm")
        if self.warm_streams:  # and the streams it may take over: their first batch is slow
            stores = Stores(self.driver, self.cluster_id, blobs=self.blobs, prefix=self.prefix)
            await rehearse_stored_streams(
                stores, spark, leading=self._leading, emit=self.emit, poll=self.poll_interval
            )

    async def _watch_spark(self) -> None:
        """Leave the election once the standby's Spark is gone for good: its JVM killed (the
        OOM killer), or never built (killed as it started, no Java; a WarmSession does not
        build twice).

        Elected, such a standby could run nothing: its stream would fail at once and the job
        count the term as one more death of a job manager running it, or its term would fail
        and give the lead up, again at each election. The active's stream notices by itself
        (``stream_run``) and counts that death (the job may have killed its JVM).
        """
        try:
            spark = await self.warm.wait()
        except Exception as exc:
            self._leave(f"building Spark failed: {type(exc).__name__}: {exc}")
            return
        while self.warm.owned:
            await anyio.sleep(self.poll_interval)
            if self._leading.is_set():
                continue
            # a paused JVM keeps this call waiting: paused is not gone
            alive = await anyio.to_thread.run_sync(session_alive, spark, abandon_on_cancel=True)
            if not alive and not self._leading.is_set():
                self._leave("Spark's JVM is gone")
                return

    async def _spark_gone(self, spark: Any, error: Exception) -> str | None:
        """Why this process's Spark can serve no term any more, after a failed one: never
        built, or its context stopped (a cold standby is not watched: ``_watch_spark``). A
        standalone master down stops the context of an application it never registered,
        after Spark's registration retries; a WarmSession does not build twice, so such a
        job manager would win, fail at once and give the lead up again, over and over."""
        if not self.warm.owned:
            return None  # the caller's session: not ours to give up on
        if spark is None:  # (a Py4J error's message is pages of Java stack)
            return f"building Spark failed: {type(error).__name__}"
        alive = await anyio.to_thread.run_sync(session_alive, spark, abandon_on_cancel=True)
        return None if alive else "Spark's context is stopped"

    def _leave(self, why: str) -> None:
        log.error("%s: leaving the election", why)
        self.emit("spark_lost", error=why)
        self._lost(why)

    def _lost(self, why: str) -> None:
        """Leave for good: this process can run nothing more (``spark_lost``), so its exit
        says it failed and a supervisor starts it again, with a new JVM (``worker``)."""
        self.spark_lost = self.spark_lost or why
        self.quit()

    def quit(self) -> None:
        """Stop serving: the job manager leaves (and, with services of its own, the process
        leaves the election: a standby takes over at once)."""
        self._quit = True
        if self._stop is not None:
            self._stop.set()

    # --- the process's elector, observed ----------------------------------------------------------

    def _observe(self, elector: Elector, contender: object) -> object:
        if elector is not self._observed:
            self._observed = elector
            elector.add_listener(self._on_transition)
        return contender

    def _on_transition(self, t: Transition) -> None:
        if t.new is State.STANDBY:
            self.emit("standby")
        elif t.new in (State.NEUTRAL, State.FENCED):
            self.emit("neutral", state=t.new.value, cause=t.cause)

    # --- the component's hooks ----------------------------------------------------------------

    async def grant_leadership(self, session_id: uuid.UUID) -> None:
        """The term: runs until the grant ends (cancelled) or fails (the lead is given up)."""
        lease = self.services.lease
        if lease is None or not self.election.has_leadership(session_id):
            return  # lost already
        self._leading.set()
        self.emit("active", epoch=lease.epoch)
        stores = Stores(
            self.driver, self.cluster_id, blobs=self.blobs, lease=lease, prefix=self.prefix
        )
        spark: Any = None
        try:
            spark = await self.warm.wait()
            self.emit("spark_ready", epoch=lease.epoch)
            await self.election.confirm_leadership(session_id, self.identity)
            await Term(self._context(stores, lease, spark), poll_interval=self.poll_interval).run()
        except Exception as exc:
            log.exception("the job manager's term failed")
            self.emit("term_failed", epoch=lease.epoch, error=f"{type(exc).__name__}: {exc}")
            gone = await self._spark_gone(spark, exc)
            if gone is not None:  # every term of this process would fail so: leave for good
                self._leave(gone)
            else:
                self.services.give_up_leadership(f"job manager {self.identity}: {exc!r}")
        finally:
            self._leading.clear()
            with anyio.CancelScope(shield=True), anyio.move_on_after(2.0):
                try:
                    await stores.close()  # releases our locks; every byte stays
                except DriverError as exc:  # the session may be gone: its locks went with it
                    log.info("store locks not released: %s", exc)

    def _context(self, stores: Stores, lease: Lease, spark: Any) -> TermContext:
        """What this term's runs may use: not the term, not the manager."""
        assert self.portal is not None  # made in run(), before the election starts
        return TermContext(
            identity=self.identity,
            stores=stores,
            writer=Writer(self.driver, lease),
            layout=self.layout,
            lease=lease,
            spark=spark,
            emit=self.emit,
            portal=self.portal,
            leave=partial(self._lost, "Spark's JVM is gone"),
            checkpointing=self.checkpointing,
        )

    async def revoke_leadership(self) -> None:
        """The grant's work has stopped already (its task was cancelled and awaited)."""
