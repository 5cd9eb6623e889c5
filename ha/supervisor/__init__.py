"""``ha run``: a supervisor that runs COMMAND only while this process is the active.

In the spirit of Hadoop's ZKFC and ``etcdctl elect``: the supervisor is a contender. It starts
COMMAND in ``become_active`` and stops it (SIGTERM to its process group, SIGKILL after the grace
period) when that scope is cancelled; the elector awaits the stop before anyone else is told
anything, and its local deadline is shortened so the stop ends before the session can expire
(``timing_for``, in ``settings.py``). COMMAND runs under a guard process (``ha/_guard.py``, Linux,
started by ``ha/_process.py``): the stop reaches every descendant of COMMAND, even daemons that left its process group, and returns only when
none is left; if the supervisor itself dies, even by SIGKILL, the guard kills the whole tree,
so two copies never run because a supervisor vanished. A guard rather than a cgroup: it needs
no privileges, delegation or cgroup v2, and works in containers as they come.

A supervisor that is *frozen* (SIGSTOP, swap, a debugger) cannot stop its child itself, so the
guard is also a watchdog: the supervisor keeps renewing a deadline in it, derived from its last
contact with the backend (the lease's ``stop_deadline``), and the guard stops the tree on its
own once that passes, before the session can expire. COMMAND is not started on stale contact.
Not covered: the guard frozen *with* COMMAND (a whole cgroup, container or VM frozen and
resumed): the old COMMAND resumes beside the new active's. That is what ``--fence`` is for (as
with ZKFC): it runs before the new active starts, with the old active's breadcrumb (identity,
epoch, host and pid) in its environment, and can refuse the takeover; and the epoch
(``HA_EPOCH``, ``HA_NODE``) fences COMMAND's own writes.

``--health CMD`` (Hadoop's HealthMonitor): checked every interval; once it has failed
``--health-failures`` times in a row the supervisor leaves the election (stopping COMMAND first
if active) and rejoins once it passes;
not while the election is paused (``ha pause``: COMMAND is left alone, ``paused.py``).
Graceful failover requests are honoured as described in ``ha/admin/failover.py`` (the active
asks for one itself to hand the lead back to a preferred standby: ``ha/membership/handback.py``).
Whether to take part is decided by the pure rules of ``ha/membership/rules.py``; this module reads the facts (the
request, and the queue with its leader's epoch), hands them over, and does what the
``Decision`` says (leave, wake the waiting loop, log). Leaving quits the elector; taking part
again starts a new one, which joins at the back of the queue.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import math
import os
import signal
import socket
import time
from typing import TYPE_CHECKING

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream

from .. import admin
from .._process import Child, describe_exit, spawn
from ..drivers.base import ConnectionState, Driver
from ..election.elector import Elector
from ..election.journal import JournalWriter, Transition
from ..election.lease import Lease
from ..election.machine import State
from ..election.nodes import ElectionNodes
from ..election.timing import Backoff
from ..errors import ElectionFailed, HAError
from ..membership.follow import Wakeup, follow_failover, keep_member
from ..membership.handback import HandBack
from ..membership.members import claim_member, remove_member
from ..membership.records import Member
from ..membership.rules import Decision, Eligibility, Standing
from ..metrics.command import CommandMetrics
from .exits import OnExit, Restarts, status
from .fencing import old_active_env
from .health import check_health
from .paused import PauseWatch
from .settings import Settings, timing_for
from .systemd import Notifier

if TYPE_CHECKING:
    from ..metrics import ElectorMetrics, Registry

# the package's API: the supervisor, what it is asked to do, and the child processes it runs
__all__ = ("Child", "FenceRefused", "Settings", "Supervisor", "spawn", "timing_for")

log = logging.getLogger("ha.supervisor")


class FenceRefused(HAError):
    """The fence command failed: the takeover is refused."""


class Supervisor:
    """Runs ``settings.command`` while active in the election at ``settings.path``.

    ``await Supervisor(driver, settings).run()`` returns after ``stop()`` (or SIGINT/SIGTERM
    with ``handle_signals``, or handed to ``signalled`` by a caller that receives them itself)
    once COMMAND is stopped and the election quit; it raises
    ``ElectionFailed`` on a fatal election error. ``registry``: where its metrics go (made
    when ``settings.http`` asks for the endpoint, which serves them at ``/metrics``).
    ``systemd``: what it tells systemd (readiness, status, watchdog: ``systemd.py``).
    """

    def __init__(
        self,
        driver: Driver,
        settings: Settings,
        *,
        handle_signals: bool = False,
        registry: Registry | None = None,
        systemd: Notifier | None = None,
    ):
        self.driver = driver
        self._systemd = systemd if systemd is not None else Notifier()
        self.settings = settings
        if registry is None and settings.http is not None:
            from ..metrics import Registry

            registry = Registry()
        self.registry = registry
        self._metrics: ElectorMetrics | None = None
        if registry is not None:  # loaded only here: without --http nothing is measured
            from ..metrics import BackendMetrics, ElectorMetrics, ProcessMetrics

            self._metrics = ElectorMetrics(registry)
            BackendMetrics(registry).measure(driver)
            ProcessMetrics(registry)
        self._command_metrics = CommandMetrics.of(registry, self, settings.path, settings.identity)
        self.identity = settings.identity.encode()
        self.timing = dataclasses.replace(
            timing_for(
                driver.session_timeout,
                settings.grace,
                settings.hold_on_disconnect,
                driver.renewal_interval,
            ),
            fence_timeout=settings.fence_timeout,
            fence_backoff=Backoff.for_fences(settings.fence_retry_max),
        )
        # how often the guard's watchdog deadline follows the contact: often enough that a
        # renewal just before the deadline reaches it in time (the span exceeds the driver's
        # renewal interval: timing_for)
        span = self.timing.deadline_ratio * driver.session_timeout
        self._renew_every = min(0.2, max(0.01, span / 10))
        self._handle_signals = handle_signals
        self._journal = JournalWriter(settings.journal) if settings.journal else None
        info = {"host": socket.gethostname(), "pid": os.getpid()}
        self._data = json.dumps(info, separators=(",", ":")).encode()
        self._elector: Elector | None = None
        self._failure: ElectionFailed | None = None
        self._child: Child | None = None
        self._state = "neutral"
        self._epoch: int | None = None
        self._stopping = False
        self._claiming: anyio.CancelScope | None = None  # while claiming our member node
        self.exit_status: int | None = None  # after --on-exit fail: COMMAND's, never 0
        self._restarting = ""  # COMMAND exited and restarts soon (member note)
        self._eligibility = Eligibility(
            self.identity,
            health_check=bool(settings.health),
            health_failures=settings.health_failures,
        )
        self._changed = anyio.Event()
        self._failover_poke = Wakeup()
        self._member_poke = Wakeup()
        self._pause = PauseWatch(driver, settings.path)  # paused: COMMAND is left alone

    # --- public -------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """neutral | standby | active | fenced | out"""
        return self._state

    @property
    def child(self) -> Child | None:
        return self._child

    def stop(self) -> None:
        """Stop COMMAND, leave the election (without fencing) and make ``run`` return."""
        if not self._stopping:
            log.info("stopping")
            self._systemd.stopping()
        self._stopping = True
        if self._claiming is not None:  # the claim may wait long (a duplicate, the backend)
            self._claiming.cancel()
        self._quit()
        self._poke()

    async def run(self) -> None:
        if self.settings.http is None or self.registry is None:
            await self._run()
            return
        from ..http import ElectionEndpoints, serve  # the endpoint's code, only when asked

        host, port = self.settings.http
        routes = ElectionEndpoints(
            self.driver, self.settings.path, self.identity, lambda: self._state, self.registry
        )
        async with anyio.create_task_group() as tg:  # the endpoint lives as long as we do
            bound = await tg.start(serve, host, port, routes)
            log.info("http on %s:%d: / (status page) /healthz /readyz /leader /metrics", *bound)
            await self._run()
            tg.cancel_scope.cancel()

    async def _run(self) -> None:
        # refuse a duplicate --id before anything else: two supervisors of one identity
        # would confuse `ha failover` and `ha status`, and one's exit would delete the
        # other's member node
        with anyio.CancelScope() as self._claiming:  # a stop ends it: then we never join
            if not self._stopping:
                await claim_member(
                    self.driver,
                    self.settings.path,
                    self._member(),
                    wait=1.5 * self.driver.session_timeout,
                )
        self._claiming = None
        async with anyio.create_task_group() as tg:
            nodes = ElectionNodes(self.settings.path)
            subs = [
                self.driver.subscribe(nodes.failover, self._on_failover_node),
                self.driver.subscribe(None, self._on_connection),
                self.driver.subscribe(nodes.pause, self._pause.poke),
            ]
            try:
                tg.start_soon(
                    follow_failover,
                    self.driver,
                    self.settings.path,
                    self._failover_poke,
                    self._eligibility,
                    self._leading,
                    self._act,
                )
                tg.start_soon(
                    keep_member,
                    self.driver,
                    self.settings.path,
                    self._member,
                    self._member_poke,
                    # while fences are refused, refresh the note ("next try in 8s") now and then
                    lambda: 1.0 if self._fencing_note() else math.inf,
                )
                tg.start_soon(self._hand_back().run)
                if self.settings.health:
                    tg.start_soon(self._health_loop)
                if self._handle_signals:
                    tg.start_soon(self._signal_loop)
                tg.start_soon(self._systemd.keep_alive)  # only while this loop runs
                while await self._wait_eligible():
                    await self._take_part()
            finally:
                for sub in subs:
                    sub.close()
                tg.cancel_scope.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
            try:
                await remove_member(self.driver, self.settings.path, self.identity)
            except (HAError, OSError):
                pass
        if self._journal is not None:
            self._journal.close()

    # --- taking part --------------------------------------------------------------------------

    def _poke(self) -> None:
        self._changed.set()

    def _quit(self) -> None:
        if self._elector is not None:
            # without fence: we stop COMMAND ourselves (awaited) before our node goes
            self._elector.quit(need_fence=False)

    def _act(self, decision: Decision) -> None:
        """Do what the rules decided."""
        for level, line in decision.say:
            log.log(level, "%s", line)
        if decision.quit:
            self._quit()
        if decision.wake:
            self._poke()
        if decision.renote:
            self._member_poke.set()

    def _out_reason(self) -> str | None:
        """Why we stay out of the election now (the member node's note), or None."""
        verdict = self._eligibility.verdict(anyio.current_time())
        return None if verdict.eligible else verdict.note

    async def _wait_eligible(self) -> bool:
        """Wait until we may take part; False once stopping."""
        shown: tuple[Standing, str] | None = None
        while not self._stopping:
            verdict = self._eligibility.verdict(anyio.current_time())
            if verdict.eligible:
                return True
            if (verdict.standing, verdict.cause) != shown:
                shown = (verdict.standing, verdict.cause)
                log.info("out of the election: %s", verdict.note)
                self._set_state("out")
            self._changed = anyio.Event()
            with anyio.CancelScope(deadline=verdict.wake_at):
                await self._changed.wait()
        return False

    async def _take_part(self) -> None:
        elector = Elector(
            self.driver,
            self.settings.path,
            self.identity,
            data=self._data,
            timing=self.timing,
            journal=self._journal,
            priority=self.settings.priority,
        )
        self._failure = None
        self._elector = elector
        try:
            async with elector.transitions() as stream:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._follow, stream)
                    await tg.start(self._run_elector, elector, tg.cancel_scope)
                    # a stop or a failover request may have come before the elector could
                    # take a quit: look again now that it runs
                    if self._stopping or self._out_reason() is not None:
                        self._quit()
                while True:  # the last transitions (e.g. to neutral on quit)
                    try:
                        self._show(stream.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
        finally:
            self._elector = None
        if self._failure is not None:
            raise self._failure

    async def _run_elector(
        self,
        elector: Elector,
        scope: anyio.CancelScope,
        *,
        task_status: anyio.abc.TaskStatus[Elector] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        contender = self if self._metrics is None else self._metrics.watch(elector, self)
        try:
            await elector.run(contender, task_status=task_status)
        except ElectionFailed as exc:
            self._failure = exc
        finally:
            scope.cancel()  # stop following the transitions

    async def _follow(self, stream: MemoryObjectReceiveStream[Transition]) -> None:
        async for t in stream:
            self._show(t)

    def _show(self, t: Transition) -> None:
        cause = f"epoch {t.epoch}, {t.cause}" if t.epoch is not None else t.cause
        # the line shown at the default level: it carries the fields for JSON logs too
        log.info("%s -> %s (%s)", t.old.value, t.new.value, cause, extra=t.log_fields())
        self._epoch = t.epoch
        self._set_state(t.new.value)

    # --- the contender hooks ------------------------------------------------------------------

    async def become_active(self, lease: Lease) -> None:
        env = self._env(lease)
        name, grace = self.settings.command[0], self.settings.grace
        restarts = Restarts(self.settings.max_restarts, self.settings.started)  # this term's
        while True:
            started = anyio.current_time()
            try:
                # the guard refuses to start once the lease's deadline has passed, and is a
                # watchdog on it after (ha/_process.py): a frozen supervisor's COMMAND stops
                deadline = lease.stop_deadline()
                child = await spawn(self.settings.command, env, deadline=deadline, grace=grace)
            except OSError as exc:
                if exc.errno == errno.ETIME:  # stale contact: never start (the watchdog ends
                    await anyio.sleep(0.05)  # this term, unless contact is fresh by then)
                    continue
                # e.g. the program was removed since we checked it
                log.error("cannot start %s: %s", name, exc.strerror or exc)
                note, code = f"cannot start {name}", 127  # a shell's "command not found"
            else:
                code = await self._run_child(child, lease)
                how = describe_exit(code)
                log.warning("%s exited while active (%s)", name, how)
                note = f"{name} exited ({how})"  # for `ha failover`: why we left
            ran = anyio.current_time() - started
            if await self._pause.paused():  # left down until resumed (paused.py)
                await self._wait_resumed(note)
            if self.settings.on_exit is not OnExit.RESTART:
                self._end(code)
                return
            delay = restarts.after_exit(ran)
            if delay is None:
                if restarts.done:
                    log.warning("%s restarted %d times in a row: ceding", name, restarts.done)
                self._act(self._eligibility.command_ended(anyio.current_time(), note, ran))
                return
            self._restarting = f"{note}: restart {restarts.done} of {restarts.limit}"
            self._command_metrics.restarting()
            log.info("%s in %.1fs", self._restarting, delay)
            self._member_poke.set()  # the note says it (ha status, ha failover)
            try:
                await anyio.sleep(delay)  # still active: a lost lead cancels this
            finally:
                self._restarting = ""

    async def _wait_resumed(self, note: str) -> None:
        log.warning("%s while the election is paused: left down until ha resume", note)
        self._restarting = f"{note}: paused, down until resumed"
        self._member_poke.set()
        try:
            await self._pause.resumed()  # still active: a lost lead cancels this
        finally:
            self._restarting = ""
        log.info("resumed: --on-exit %s applies", self.settings.on_exit)

    async def _run_child(self, child: Child, lease: Lease) -> int:
        """Wait for COMMAND to end (stopping it, with its tree, if we are cancelled)."""
        self._child = child
        name = self.settings.command[0]
        log.info("started %s (pid %d, epoch %d)", name, child.pid, lease.epoch)
        self._command_metrics.started()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(child.keep_renewed, lease.stop_deadline, self._renew_every)
                await child.wait()
                tg.cancel_scope.cancel()
        finally:
            # whatever was cancelled, wherever: the tree is dead before we go on (at once
            # when COMMAND ended by itself)
            with anyio.CancelScope(shield=True):
                code = await child.stop(self.settings.grace)
            self._child = None
            how = "?" if child.returncode is None else describe_exit(child.returncode)
            log.info("%s (pid %d) stopped: %s", name, child.pid, how)
        return code

    def _end(self, code: int) -> None:
        """``--on-exit quit|fail``: leave the election and make ``run`` return."""
        policy = self.settings.on_exit
        self.exit_status = status(code) if policy is OnExit.FAIL else None
        level = logging.ERROR if policy is OnExit.FAIL else logging.INFO
        name, how = self.settings.command[0], describe_exit(code)
        log.log(level, "%s exited (%s): leaving the election (--on-exit %s)", name, how, policy)
        self.stop()

    async def fence_old_active(self, breadcrumb: bytes) -> bool:
        if not self.settings.fence:
            return False  # the epoch fences the old active's writes; nothing was run
        env = self._env(None)
        env.update(old_active_env(breadcrumb))
        who = env.get("HA_OLD_IDENTITY", "an unreadable breadcrumb")
        log.info("fencing the old active %r with %s", who, self.settings.fence[0])
        child = await spawn(self.settings.fence, env)
        code = await child.wait_or_stop(0.0)  # timed out: killed
        if code != 0:
            # the member note follows once the elector has counted it (refreshed every second
            # while fences are refused): a poke now would publish the count before this one
            log.warning("fence command %s: takeover refused", describe_exit(code))
            raise FenceRefused(f"fence command {self.settings.fence[0]} {describe_exit(code)}")
        return True

    async def on_fatal_error(self, error: Exception) -> None:
        log.error("election failed: %s", error)

    def _env(self, lease: Lease | None) -> dict[str, str]:
        env = dict(self.settings.extra_env)
        env["HA_ELECTION"] = self.settings.path
        env["HA_IDENTITY"] = self.settings.identity
        if lease is not None:
            env["HA_EPOCH"] = str(lease.epoch)  # a fencing token for COMMAND's own writes
            # the leader's queue node: a transaction that checks it exists lands only while
            # this leader leads (the node is never created again)
            env["HA_NODE"] = lease.node
        return env

    # --- failover requests --------------------------------------------------------------------

    def _hand_back(self) -> HandBack:
        """Hands the lead to a preferred standby while we are active (``membership/handback.py``)."""

        def lease() -> Lease | None:
            return None if self._elector is None else self._elector.lease

        s = self.settings
        return HandBack(
            self.driver, s.path, self.identity, s.priority, s.settle, lease, admin.request_failover
        )

    def _on_failover_node(self, _event: object) -> None:
        self._failover_poke.set()

    def _on_connection(self, event: object) -> None:
        lost = getattr(event, "state", None) is ConnectionState.DISCONNECTED
        if lost and self._child is not None:
            hold = self.settings.hold_on_disconnect
            held = f"holding COMMAND up to {hold:g}s after the last contact" if hold else ""
            log.warning("lost contact with the backend%s", held and f": {held}")
        self._member_poke.set()  # a new session lost our ephemeral member node: write it again
        self._failover_poke.set()

    def _leading(self) -> int | None:
        """Our lease's epoch while active: the failover rules' ``leading``."""
        lease = self._elector.lease if self._elector is not None else None
        return lease.epoch if lease is not None else None

    # --- health -------------------------------------------------------------------------------

    async def _health_loop(self) -> None:
        held = False
        while True:
            env = {"HA_ELECTION": self.settings.path, "HA_IDENTITY": self.settings.identity}
            env["HA_STATE"] = self._state
            s = self.settings
            healthy, why = await check_health(s.health, env, s.health_timeout)
            self._command_metrics.checked(healthy)
            if healthy or self._state != "active" or not await self._pause.paused():
                held = False
                self._act(self._eligibility.health_checked(anyio.current_time(), healthy, why))
            elif not held:  # paused: stay active (paused.py), said once per failing spell
                held = True
                log.warning("health check failed (%s): the election is paused, staying", why)
            await anyio.sleep(self.settings.health_interval)

    # --- signals and the member node ----------------------------------------------------------

    async def _signal_loop(self) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                self.signalled(signum)

    def signalled(self, signum: int) -> None:
        """SIGINT or SIGTERM came: the first stops, the next kills COMMAND at once."""
        if not self._stopping:
            log.info("%s received", signal.Signals(signum).name)
            self.stop()
        elif self._child is not None:  # asked twice: do not wait for the grace period
            log.warning("%s received again: killing COMMAND", signal.Signals(signum).name)
            self._child.signal_group(signal.SIGKILL)

    def _set_state(self, state: str) -> None:
        self._state = state
        self._member_poke.set()
        self._systemd.state(self.settings.path, state, self._epoch, self._out_reason())

    def _fencing_note(self) -> str | None:
        return None if self._elector is None else self._elector.fencing_note()

    def _member(self) -> Member:
        note = "" if self._state != "out" else (self._out_reason() or "")
        note = note or self._fencing_note() or self._restarting
        verdict = self._eligibility.verdict(anyio.current_time())
        if not note and verdict.eligible:
            note = verdict.note  # "health check failed 1 of 3": still in, for now
        return Member(
            self.identity,
            self._state,
            self._epoch if self._state == State.ACTIVE.value else None,
            socket.gethostname(),
            os.getpid(),
            time.time(),
            note,
        )
