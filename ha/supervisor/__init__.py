"""``ha run``: a supervisor that runs COMMAND only while this process is the active.

In the spirit of Hadoop's ZKFC and ``etcdctl elect``: the supervisor is a contender. It starts
COMMAND in ``become_active`` and stops it (SIGTERM to its process group, SIGKILL after the grace
period) when that scope is cancelled; the elector awaits the stop before anyone else is told
anything, and its local deadline is shortened so the stop ends before the session can expire
(``timing_for``). COMMAND runs under a guard process (``ha/supervisor/_guard.py``, Linux): the stop reaches
every descendant of COMMAND, even daemons that left its process group, and returns only when
none is left; if the supervisor itself dies, even by SIGKILL, the guard kills the whole tree,
so two copies never run because a supervisor vanished. A guard rather than a cgroup: it needs
no privileges, delegation or cgroup v2, and works in containers as they come.

Not covered: a supervisor that is *frozen* (SIGSTOP, a stuck VM) cannot stop its child; when
its lease runs out another host takes over while the old COMMAND may still run. That is what
``--fence`` is for (as with ZKFC): it runs before the new active starts, with the old active's
breadcrumb (identity, epoch, host and pid) in its environment, and can refuse the takeover.

``--health CMD`` (Hadoop's HealthMonitor): checked every interval; while it fails the
supervisor leaves the election (stopping COMMAND first if active) and rejoins once it passes.
Graceful failover requests are honoured as described in ``ha/admin.py``.
"""

from __future__ import annotations

import base64
import ctypes
import dataclasses
import errno
import json
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import anyio
import anyio.abc
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream

from .. import admin
from ..drivers.base import Driver, validate_path
from ..election.elector import Elector, Timing
from ..election.journal import JournalWriter, Transition
from ..election.lease import Lease
from ..election.machine import State, decode_breadcrumb
from ..errors import ConfigurationError, DriverError, ElectionFailed, HAError, NoNode

__all__ = ("Child", "FenceRefused", "Settings", "Supervisor", "spawn", "timing_for")

log = logging.getLogger("ha.supervisor")

PR_SET_PDEATHSIG = 1
RESTART_DELAY = (1.0, 30.0)  # after COMMAND exits on its own: first delay, cap
GUARD_MARGIN = 2.0  # seconds a guard may take beyond the grace period to end the tree


class FenceRefused(HAError):
    """The fence command failed: the takeover is refused."""


# --- child processes ------------------------------------------------------------------------
#
# prctl(PR_SET_PDEATHSIG) fires when the *thread* that forked the child exits, not the process.
# anyio's worker threads (and trio's) exit when idle, so children are forked by one dedicated
# thread that lives as long as the process: the signal then comes only when the process dies.

_spawner: ThreadPoolExecutor | None = None


def _spawner_pool() -> ThreadPoolExecutor:
    global _spawner
    if _spawner is None:
        _spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ha-spawn")
    return _spawner


def _deathsig_preexec() -> Callable[[], None] | None:
    """A preexec_fn arming PR_SET_PDEATHSIG=SIGKILL, or None off Linux.

    Everything is looked up before the fork: the child only makes two system calls.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()
    kill, getppid, getpid, sigkill = os.kill, os.getppid, os.getpid, int(signal.SIGKILL)

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, sigkill, 0, 0, 0)
        if getppid() != parent:  # the supervisor died before the prctl: do not run at all
            kill(getpid(), sigkill)

    return preexec


class Child:
    """A child process in its own process group; waited for without blocking the loop.

    With a guard (``ha/supervisor/_guard.py``, the default on Linux), ``popen`` is the guard and ``pid``
    is COMMAND's: signals and the stop reach every descendant of COMMAND, even those that left
    its process group, and the guard exits (so ``wait`` returns) only once none is left.
    """

    def __init__(
        self, popen: subprocess.Popen[bytes], pid: int | None = None, control: int | None = None
    ) -> None:
        self.popen = popen
        self.pid = popen.pid if pid is None else pid
        self._control = control  # write end of the guard's control pipe
        self._pidfd: int | None = None
        if hasattr(os, "pidfd_open"):
            try:
                self._pidfd = os.pidfd_open(popen.pid)
            except OSError:  # an old kernel: poll instead
                self._pidfd = None

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    async def _exited(self) -> None:
        """Return once the process has terminated, without reaping it (when a pidfd exists)."""
        if self._pidfd is not None:
            await anyio.wait_readable(self._pidfd)
            return
        while self.popen.poll() is None:  # noqa: ASYNC110 (no pidfd: nothing to wait on)
            await anyio.sleep(0.05)

    async def wait(self) -> int:
        """Wait for the child to exit; return its status (negative: killed by that signal)."""
        if self.popen.returncode is None:
            await self._exited()
        return self._reap()

    def _reap(self) -> int:
        # the process has terminated: first kill what it left in its group (the pid, hence
        # the group id, cannot be reused before the reap), then reap (does not block); a
        # guard has killed every descendant before exiting
        if self._control is None:
            self.signal_group(signal.SIGKILL)
        code = self.popen.wait()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        if self._control is not None:
            os.close(self._control)
            self._control = None
        return code

    def _tell(self, line: str) -> bool:
        """Send a line to the guard; False when it is gone."""
        if self._control is None or self.popen.returncode is not None:
            return False
        try:
            os.write(self._control, line.encode() + b"\n")
        except OSError:  # it exited: nothing left to signal
            return False
        return True

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to COMMAND's process group (with a guard: to each descendant, once)."""
        if self._control is not None:
            self._tell(f"signal {int(sig)}")
            return
        if self.popen.returncode is not None:
            return
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    async def stop(self, grace: float) -> int:
        """SIGTERM, SIGKILL after ``grace`` seconds; return once the child (with a guard: its
        whole tree) is dead.

        Call it shielded: it must finish even when the caller is being cancelled.
        """
        if self.popen.returncode is None and self._control is not None:
            self._tell(f"stop {grace!r}")
            with anyio.move_on_after(grace + GUARD_MARGIN):
                await self._exited()
            if self.popen.poll() is None:  # a stuck guard: COMMAND dies with it (PDEATHSIG)
                log.error("the guard of pid %d did not stop it in time: killing it", self.pid)
                self.popen.kill()
        elif self.popen.returncode is None:
            self.signal_group(signal.SIGTERM)
            with anyio.move_on_after(grace):
                await self._exited()
            self.signal_group(signal.SIGKILL)
        return await self.wait()


def _guard_argv() -> list[str] | None:
    """How to start a guard, or None where there is none (off Linux, no interpreter path)."""
    if not sys.platform.startswith("linux") or not sys.executable:
        return None
    return [sys.executable, "-I", "-S", os.path.join(os.path.dirname(__file__), "_guard.py")]


def _start_guarded(
    guard: list[str], argv: list[str], env: dict[str, str], stdin: int
) -> tuple[subprocess.Popen[bytes], int, int]:
    """Start COMMAND under a guard; (guard, COMMAND's pid, control fd). In the spawner thread."""
    ctl_r, ctl_w = os.pipe()  # the write end stays here only (close-on-exec): EOF = we died
    report_r, report_w = os.pipe()
    try:
        popen: subprocess.Popen[bytes] = subprocess.Popen(
            [*guard, str(ctl_r), str(report_w), *argv],
            env=env,
            stdin=stdin,
            process_group=0,  # Ctrl-C reaches the supervisor only, as for COMMAND itself
            close_fds=True,
            pass_fds=(ctl_r, report_w),
        )
    except BaseException:
        os.close(ctl_w)
        os.close(report_r)
        raise
    finally:
        os.close(ctl_r)
        os.close(report_w)
    with os.fdopen(report_r, "rb") as report:
        line = report.readline().split()
    if len(line) == 2 and line[0] == b"pid":
        return popen, int(line[1]), ctl_w
    os.close(ctl_w)
    popen.wait()
    code = int(line[1]) if len(line) == 2 and line[0] == b"error" else errno.EIO
    raise OSError(code, os.strerror(code), argv[0])


async def spawn(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    stdin: int | None = None,
    guard: bool = True,
) -> Child:
    """Start ``argv`` (never through a shell) in its own process group, bound to our life.

    With ``guard`` (on Linux), every descendant of ``argv`` dies with us too, even when we are
    SIGKILLed, and ``stop`` returns only when none is left; it costs an interpreter start.
    """
    if not argv:
        raise ConfigurationError("empty command")
    full_env = dict(os.environ)
    full_env.update(env or {})
    guard_argv = _guard_argv() if guard else None
    options: dict[str, object] = {}
    preexec = _deathsig_preexec() if guard_argv is None else None
    if preexec is not None:
        options["preexec_fn"] = preexec
    stdin_fd = subprocess.DEVNULL if stdin is None else stdin

    def start() -> Child:
        if guard_argv is not None:
            return Child(*_start_guarded(guard_argv, list(argv), full_env, stdin_fd))
        popen: subprocess.Popen[bytes] = subprocess.Popen(
            list(argv),
            env=full_env,
            stdin=stdin_fd,
            process_group=0,  # signals for the group reach what COMMAND starts too
            close_fds=True,
            **options,  # type: ignore[call-overload]
        )
        return Child(popen)

    future = _spawner_pool().submit(start)
    # not cancellable on purpose: once forked, the child must be handed back to be stopped
    return await anyio.to_thread.run_sync(future.result)


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


# --- settings and timing ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Settings:
    """What ``ha run`` was asked to do."""

    path: str
    identity: str
    command: tuple[str, ...]
    grace: float = 0.5
    fence: tuple[str, ...] = ()
    fence_timeout: float = 30.0
    health: tuple[str, ...] = ()
    health_interval: float = 2.0
    health_timeout: float = 5.0
    journal: str | None = None
    extra_env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_path(self.path)
        if self.path == "/":
            raise ConfigurationError("the election path must not be the root '/'")
        if not self.identity:
            raise ConfigurationError("the supervisor needs a non-empty --id")
        if not self.command:
            raise ConfigurationError("no COMMAND to run (put it after --)")
        if not (math.isfinite(self.grace) and self.grace >= 0):
            raise ConfigurationError(f"--grace must be >= 0 seconds, got {self.grace}")
        for name in ("fence_timeout", "health_interval", "health_timeout"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigurationError(f"{name.replace('_', '-')} must be > 0, got {value}")


def timing_for(session_timeout: float, grace: float) -> Timing:
    """Elector timing that leaves room to stop COMMAND before the session can expire.

    The elector stops the active work at ``deadline_ratio * session_timeout`` after the last
    contact; stopping takes up to ``grace`` (then SIGKILL), plus a margin for the loop.
    """
    # Not counted: a guard stuck past the grace (a descendant in uninterruptible sleep) is
    # killed GUARD_MARGIN later, COMMAND with it (PDEATHSIG) but not daemons that left its
    # group; counting 2 s here would forbid the short sessions tests and demos use.
    margin = max(0.1 * session_timeout, 0.05)
    ratio = min(2 / 3, (session_timeout - grace - margin) / session_timeout)
    if ratio < 0.1:
        raise ConfigurationError(
            f"--grace {grace:g}s leaves no time to stop COMMAND before the backend's session"
            f" timeout ({session_timeout:g}s) lets another host take over: lower --grace or"
            f" raise session_timeout in the backend URL (e.g. ?session_timeout="
            f"{math.ceil((grace + margin) * 1.5 + 1)})"
        )
    return Timing(deadline_ratio=ratio)


# --- the supervisor ---------------------------------------------------------------------------


_UNKNOWN = object()  # the lock's holder was not read


@dataclass(slots=True)
class _Aside:
    """Stepping aside for a failover to another target, until the epoch passes ``epoch``."""

    request_id: str
    epoch: int
    until: float  # anyio time
    to: bytes


class Supervisor:
    """Runs ``settings.command`` while active in the election at ``settings.path``.

    ``await Supervisor(driver, settings).run()`` returns after ``stop()`` (or SIGINT/SIGTERM
    with ``handle_signals``) once COMMAND is stopped and the election quit; it raises
    ``ElectionFailed`` on a fatal election error.
    """

    def __init__(self, driver: Driver, settings: Settings, *, handle_signals: bool = False):
        self.driver = driver
        self.settings = settings
        self.identity = settings.identity.encode()
        self.timing = dataclasses.replace(
            timing_for(driver.session_timeout, settings.grace),
            fence_timeout=settings.fence_timeout,
        )
        self._handle_signals = handle_signals
        self._journal = JournalWriter(settings.journal) if settings.journal else None
        self._data = json.dumps(
            {"host": socket.gethostname(), "pid": os.getpid()}, separators=(",", ":")
        ).encode()
        self._elector: Elector | None = None
        self._failure: ElectionFailed | None = None
        self._child: Child | None = None
        self._state = "neutral"
        self._epoch: int | None = None
        self._stopping = False
        self._healthy: bool | None = None if settings.health else True
        self._out_until = 0.0  # anyio time: cooling down until then
        self._out_note = ""
        self._aside: _Aside | None = None
        self._handled: set[str] = set()  # failover requests already acted upon
        self._restart_delay = RESTART_DELAY[0]
        self._changed = anyio.Event()
        self._failover_poke = anyio.Event()
        self._member_poke = anyio.Event()

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
        self._stopping = True
        self._quit()
        self._poke()

    async def run(self) -> None:
        # refuse a duplicate --id before anything else: two electors of one identity would
        # each take the other's lock for its own, and its exit would delete our member node
        await admin.claim_member(
            self.driver,
            self.settings.path,
            self._member(),
            wait=1.5 * self.driver.session_timeout,
        )
        async with anyio.create_task_group() as tg:
            subs = [
                self.driver.subscribe(f"{self.settings.path}/{name}", self._on_failover_node)
                for name in ("failover", "epoch")
            ]
            subs.append(self.driver.subscribe(None, self._on_connection))
            try:
                tg.start_soon(self._failover_loop)
                tg.start_soon(self._member_loop)
                if self.settings.health:
                    tg.start_soon(self._health_loop)
                if self._handle_signals:
                    tg.start_soon(self._signal_loop)
                while await self._wait_eligible():
                    await self._take_part()
            finally:
                for sub in subs:
                    sub.close()
                tg.cancel_scope.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
            try:
                await admin.remove_member(self.driver, self.settings.path, self.identity)
            except (HAError, OSError):
                pass
        if self._journal is not None:
            self._journal.close()

    # --- taking part --------------------------------------------------------------------------

    def _poke(self) -> None:
        self._changed.set()

    def _quit(self) -> None:
        if self._elector is not None:
            # without fence: we stop COMMAND ourselves (awaited) before the lock goes
            self._elector.quit(need_fence=False)

    def _out_reason(self) -> str | None:
        now = anyio.current_time()
        if self._healthy is None:
            return "waiting for the first health check"
        if not self._healthy:
            return "unhealthy"
        if now < self._out_until:
            return f"{self._out_note}: rejoining in {self._out_until - now:.1f}s"
        if self._aside is not None:
            if now < self._aside.until:
                return f"stepping aside for a failover to {admin.text(self._aside.to)!r}"
            self._handled.add(self._aside.request_id)
            self._aside = None
        return None

    async def _wait_eligible(self) -> bool:
        """Wait until we may take part; False once stopping."""
        shown = None
        while not self._stopping:
            reason = self._out_reason()
            if reason is None:
                return True
            if reason.split(":")[0] != shown:
                shown = reason.split(":")[0]
                log.info("out of the election: %s", reason)
                self._set_state("out")
            self._changed = anyio.Event()
            deadline = self._out_until if self._out_until > anyio.current_time() else math.inf
            if self._aside is not None:
                deadline = min(deadline, self._aside.until)
            with anyio.CancelScope(deadline=deadline):
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
        try:
            await elector.run(self, task_status=task_status)
        except ElectionFailed as exc:
            self._failure = exc
        finally:
            scope.cancel()  # stop following the transitions

    async def _follow(self, stream: MemoryObjectReceiveStream[Transition]) -> None:
        async for t in stream:
            self._show(t)

    def _show(self, t: Transition) -> None:
        cause = f"epoch {t.epoch}, {t.cause}" if t.epoch is not None else t.cause
        log.info("%s -> %s (%s)", t.old.value, t.new.value, cause)
        self._epoch = t.epoch
        self._set_state(t.new.value)

    # --- the contender hooks ------------------------------------------------------------------

    async def become_active(self, lease: Lease) -> None:
        request = await self._read_failover()
        if (
            request is not None
            and request.id not in self._handled
            and request.epoch == lease.epoch - 1
            and request.to is not None
            and request.to != self.identity
        ):
            # we won the race for the lock before hearing of the request: give way (admin.py 4)
            log.info("won while a failover to %r is pending: ceding", admin.text(request.to))
            self._aside = _Aside(
                request.id, lease.epoch, anyio.current_time() + request.cooldown, request.to
            )
            self._quit()
            return
        env = self._env(lease)
        try:
            child = await spawn(self.settings.command, env)
        except OSError as exc:  # e.g. the program was removed since we checked it
            log.error("cannot start %s: %s", self.settings.command[0], exc.strerror or exc)
            self._leave_after_exit(f"cannot start {self.settings.command[0]}", 0.0)
            return
        self._child = child
        log.info("started %s (pid %d, epoch %d)", self.settings.command[0], child.pid, lease.epoch)
        started = anyio.current_time()
        try:
            code = await child.wait()
        finally:
            with anyio.CancelScope(shield=True):
                code = await child.stop(self.settings.grace)
                self._child = None
                log.info(
                    "%s (pid %d) stopped: %s",
                    self.settings.command[0],
                    child.pid,
                    describe_exit(code),
                )
        how = describe_exit(code)
        log.warning("%s exited while active (%s)", self.settings.command[0], how)
        # the note (in our member node) tells `ha failover` why we could not stay active
        self._leave_after_exit(
            f"{self.settings.command[0]} exited ({how})", anyio.current_time() - started
        )

    def _leave_after_exit(self, note: str, ran: float) -> None:
        """COMMAND ended by itself while we lead: leave, back off, rejoin (a crash loop must
        not keep the lock, and another host may do better meanwhile)."""
        if ran > 60:
            self._restart_delay = RESTART_DELAY[0]
        delay = self._restart_delay
        self._restart_delay = min(RESTART_DELAY[1], delay * 2)
        log.warning("leaving the election for %.0fs", delay)
        self._cool_down(delay, note)
        self._quit()

    async def fence_old_active(self, breadcrumb: bytes) -> None:
        if not self.settings.fence:
            return  # the epoch fences the old active's writes; nothing else to do
        env = self._env(None)
        env["HA_OLD_BREADCRUMB_B64"] = base64.b64encode(breadcrumb).decode()
        crumb = decode_breadcrumb(breadcrumb)
        env["HA_OLD_BREADCRUMB_VALID"] = "1" if crumb is not None else "0"
        if crumb is not None:
            env["HA_OLD_IDENTITY"] = crumb.identity.decode("utf-8", "replace")
            env["HA_OLD_EPOCH"] = str(crumb.epoch)
            env["HA_OLD_DATA_B64"] = base64.b64encode(crumb.data).decode()
            try:  # written by `ha run`: where the old supervisor ran
                info = json.loads(crumb.data)
                env["HA_OLD_HOST"] = str(info["host"])
                env["HA_OLD_PID"] = str(int(info["pid"]))
            except (ValueError, TypeError, KeyError):
                pass
        who = env.get("HA_OLD_IDENTITY", "an unreadable breadcrumb")
        log.info("fencing the old active %r with %s", who, self.settings.fence[0])
        child = await spawn(self.settings.fence, env)
        try:
            code = await child.wait()
        finally:
            with anyio.CancelScope(shield=True):  # timed out: kill it
                code = await child.stop(0.0)
        if code != 0:
            log.warning("fence command %s: takeover refused", describe_exit(code))
            self._member_poke.set()  # publish the refusal (the elector counts it first)
            raise FenceRefused(f"fence command {self.settings.fence[0]} {describe_exit(code)}")

    async def on_fatal_error(self, error: Exception) -> None:
        log.error("election failed: %s", error)

    def _env(self, lease: Lease | None) -> dict[str, str]:
        env = dict(self.settings.extra_env)
        env["HA_ELECTION"] = self.settings.path
        env["HA_IDENTITY"] = self.settings.identity
        if lease is not None:
            env["HA_EPOCH"] = str(lease.epoch)  # a fencing token for COMMAND's own writes
        return env

    # --- cooling, failover requests -----------------------------------------------------------

    def _cool_down(self, seconds: float, note: str) -> None:
        self._out_until = max(self._out_until, anyio.current_time() + seconds)
        self._out_note = note
        self._poke()

    def _on_failover_node(self, _event: object) -> None:
        self._failover_poke.set()

    def _on_connection(self, _event: object) -> None:
        self._member_poke.set()  # a new session lost our ephemeral member node: write it again
        self._failover_poke.set()

    async def _read_failover(self) -> admin.FailoverRequest | None:
        try:
            with anyio.fail_after(self.driver.session_timeout):
                return await admin.read_failover(self.driver, self.settings.path)
        except (HAError, TimeoutError) as exc:
            log.debug("reading the failover request failed: %s", exc)
            return None

    async def _read_epoch(self) -> int | None:
        try:
            with anyio.fail_after(self.driver.session_timeout):
                raw, _ = await self.driver.get(f"{self.settings.path}/epoch")
            return int(raw.decode("ascii"))
        except (NoNode, HAError, TimeoutError, ValueError):
            return None

    async def _read_holder(self) -> bytes | None:
        """Who holds the lock now (its node names the holder), or None."""
        try:
            with anyio.fail_after(self.driver.session_timeout):
                holder, _ = await self.driver.get(f"{self.settings.path}/lock")
            return holder
        except (NoNode, HAError, TimeoutError):
            return None

    async def _failover_loop(self) -> None:
        while True:
            self._failover_poke = anyio.Event()
            request = await self._read_failover()
            epoch = await self._read_epoch()
            holder = await self._read_holder() if self._aside is not None else None
            self._consider(request, epoch, holder)
            # events wake us; the timer covers events lost while disconnected
            with anyio.move_on_after(0.5 if self._aside is not None else 5.0):
                await self._failover_poke.wait()

    def _consider(
        self,
        request: admin.FailoverRequest | None,
        epoch: int | None,
        holder: bytes | None | object = _UNKNOWN,
    ) -> None:
        """Act on the failover request as the protocol of ``ha/admin.py`` says."""
        aside = self._aside
        # done when the target holds the lock past the request's epoch: a newer epoch alone
        # may be a non-target (even us) that won the race and gave way, leaving no lock; the
        # cooldown bounds the wait
        if (
            aside is not None
            and epoch is not None
            and epoch > aside.epoch
            and (holder is _UNKNOWN or holder == aside.to)
        ):
            log.info("the failover is done (epoch %d): rejoining", epoch)
            self._handled.add(aside.request_id)
            self._aside = None
            self._poke()
        if request is None or request.id in self._handled:
            return
        if self._aside is not None and self._aside.request_id == request.id:
            return
        if epoch != request.epoch:
            self._handled.add(request.id)  # history: someone became active since
            return
        elector = self._elector
        lease = elector.lease if elector is not None else None
        if lease is not None and lease.epoch == request.epoch and request.active == self.identity:
            self._handled.add(request.id)
            target = "any standby" if request.to is None else repr(admin.text(request.to))
            log.info("graceful failover to %s asked by %s: ceding", target, request.by or "?")
            self._cool_down(request.cooldown, "ceded the lead")
            self._quit()
        elif request.to is not None and request.to != self.identity:
            log.info("failover to %r pending: stepping aside", admin.text(request.to))
            self._aside = _Aside(
                request.id, request.epoch, anyio.current_time() + request.cooldown, request.to
            )
            self._quit()
            self._poke()

    # --- health -------------------------------------------------------------------------------

    async def _check_health(self) -> tuple[bool, str]:
        env = {"HA_ELECTION": self.settings.path, "HA_IDENTITY": self.settings.identity}
        env["HA_STATE"] = self._state
        try:
            child = await spawn(self.settings.health, env, guard=False)  # often: cheap
        except OSError as exc:
            return False, f"cannot run {self.settings.health[0]}: {exc.strerror}"
        code: int | None = None
        try:
            with anyio.move_on_after(self.settings.health_timeout):
                code = await child.wait()
        finally:
            with anyio.CancelScope(shield=True):
                await child.stop(0.0)
        if code is None:
            return False, f"no answer in {self.settings.health_timeout:g}s"
        return code == 0, describe_exit(code)

    async def _health_loop(self) -> None:
        while True:
            healthy, why = await self._check_health()
            if healthy != self._healthy:
                if healthy:
                    log.info("health check passes: joining")
                else:
                    log.warning("health check failed (%s): leaving the election", why)
                    self._quit()
                self._healthy = healthy
                self._poke()
            await anyio.sleep(self.settings.health_interval)

    # --- signals and the member node ----------------------------------------------------------

    async def _signal_loop(self) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                if not self._stopping:
                    log.info("%s received", signal.Signals(signum).name)
                    self.stop()
                elif self._child is not None:  # asked twice: do not wait for the grace period
                    log.warning("%s received again: killing COMMAND", signal.Signals(signum).name)
                    self._child.signal_group(signal.SIGKILL)

    def _set_state(self, state: str) -> None:
        self._state = state
        self._member_poke.set()

    def _fencing_note(self) -> str | None:
        return None if self._elector is None else self._elector.fencing_note()

    def _member(self) -> admin.Member:
        note = "" if self._state != "out" else (self._out_reason() or "")
        note = note or self._fencing_note() or ""
        return admin.Member(
            self.identity,
            self._state,
            self._epoch if self._state == State.ACTIVE.value else None,
            socket.gethostname(),
            os.getpid(),
            time.time(),
            note,
        )

    async def _member_loop(self) -> None:
        """Publish our state in our member node (latest value wins; best effort)."""
        while True:
            self._member_poke = anyio.Event()
            member = self._member()
            try:
                with anyio.fail_after(self.driver.session_timeout):
                    await admin.write_member(self.driver, self.settings.path, member)
            except (DriverError, HAError, TimeoutError) as exc:
                log.debug("member node not written: %s", exc)
            # while fences are refused, refresh the note ("next try in 8s") now and then
            with anyio.move_on_after(1.0 if self._fencing_note() else math.inf):
                await self._member_poke.wait()
