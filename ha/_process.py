"""Processes bound to their parent's life: started by ``spawn``, stopped whole; quit on signals.

``spawn`` starts a program (never through a shell) in its own process group and returns a
``Child`` whose ``stop`` sends SIGTERM, then SIGKILL after the grace period, and returns only
once it is dead: ``ha run``'s COMMAND and health checks, the demo's contender processes. On
Linux it runs under a guard (``ha/_guard.py``, a child subreaper): the stop reaches every
descendant, even daemons that left the process group, and if the parent dies, even by
SIGKILL, the guard kills the whole tree. With a ``deadline`` the guard is also a watchdog:
``Child.keep_renewed`` moves the deadline on as the supervisor's contact with the backend
does, and a supervisor too frozen to renew it has its COMMAND stopped by the guard alone. A
spawn cannot be lost: cancelled while the fork is under way, it stops what it started before
it raises.

A child that outlives its parent is a contender or a job manager nobody supervises any more:
on Linux, ``PR_SET_PDEATHSIG`` has the kernel SIGKILL it when the parent dies. The parent can
arm it in the child before ``exec`` (``deathsig_preexec``, what ``spawn`` does when it starts
a child without a guard), or the child arms it itself first thing (``die_with_parent``, the
job manager process). Elsewhere neither does anything.

``quit_on_signals`` is how a long-running process (a demo contender, a job manager) turns
SIGTERM or SIGINT into leaving the election cleanly.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread

from .errors import ConfigurationError

__all__ = (
    "GUARD_MARGIN",
    "Child",
    "deathsig_preexec",
    "describe_exit",
    "die_with_parent",
    "quit_on_signals",
    "spawn",
)

PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., Any] | None:
    """libc's prctl with its argument types, or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


def deathsig_preexec() -> Callable[[], None] | None:
    """A ``preexec_fn`` arming PR_SET_PDEATHSIG=SIGKILL in the child, or None off Linux.

    Everything is looked up before the fork: the child only makes two system calls. The signal
    fires when the *thread* that forked the child exits, so fork from a thread that lives as
    long as the process (``spawn`` keeps one).
    """
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()
    kill, getppid, getpid, sigkill = os.kill, os.getppid, os.getpid, int(signal.SIGKILL)

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, sigkill, 0, 0, 0)
        if getppid() != parent:  # the parent died before the prctl: do not run at all
            kill(getpid(), sigkill)

    return preexec


def _clean_start(arm: Callable[[], None] | None) -> Callable[[], None]:
    """A ``preexec_fn``: no signal blocked (the mask is inherited through fork and exec, and the
    thread that forks blocks SIGABRT under ``ha run``: ha/supervisor/abort.py), then ``arm``."""
    sigmask, setmask = signal.pthread_sigmask, signal.SIG_SETMASK

    def preexec() -> None:
        sigmask(setmask, ())
        if arm is not None:
            arm()

    return preexec


def die_with_parent() -> None:
    """Linux: be killed when the process that started us dies (no orphaned job managers).

    Call it first thing in the child; if the parent is already gone, exit with status 1.
    """
    prctl = _prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)


async def quit_on_signals(quit: Callable[[], object]) -> None:
    """Call ``quit()`` at the first SIGTERM or SIGINT, then return (run it as a task)."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            quit()
            return


log = logging.getLogger("ha.supervisor")  # its lines are the supervisor's, as before the move

GUARD_MARGIN = 2.0  # seconds a guard may take beyond the grace period to end the tree

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


class Child:
    """A child process in its own process group; waited for without blocking the loop.

    With a guard (``ha/_guard.py``, the default on Linux), ``popen`` is the guard and ``pid``
    is COMMAND's: signals and the stop reach every descendant of COMMAND, even those that left
    its process group, and the guard exits (so ``wait`` returns) only once none is left.
    """

    def __init__(
        self, popen: subprocess.Popen[bytes], pid: int | None = None, control: int | None = None
    ) -> None:
        self.popen = popen
        self.pid = popen.pid if pid is None else pid
        self._control = control  # write end of the guard's control pipe (non-blocking)
        self._renewed: float | None = None  # the watchdog's deadline as last sent
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
        except BlockingIOError:  # the guard is frozen and its pipe full
            raise
        except OSError:  # it exited: nothing left to signal
            return False
        return True

    def _wake_guard(self) -> None:
        """SIGCONT the guard: a guard stopped on its own (SIGSTOP) must still act on a stop."""
        if self._control is not None and self.popen.returncode is None:
            try:
                os.kill(self.popen.pid, signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass

    def renew(self, deadline: float) -> bool:
        """Move the guard's watchdog deadline (``time.monotonic()``) to ``deadline``; False
        when it could not be told (no guard, gone, or its pipe full: it is frozen)."""
        if self._control is None:
            return False
        if deadline == self._renewed:
            return True
        if not math.isfinite(deadline):  # no deadline at all (the lease's session is gone):
            deadline = time.monotonic()  # it has passed, and the guard reads only numbers
        try:
            told = self._tell(f"deadline {deadline!r}")
        except BlockingIOError:
            return False
        if told:
            self._renewed = deadline
        return told

    async def keep_renewed(self, deadline: Callable[[], float], every: float) -> None:
        """Renew the guard's deadline from ``deadline()`` every ``every`` seconds, forever.

        Run it beside ``wait_or_stop``: when this task (hence the supervisor's loop) stalls,
        the guard stops COMMAND once the last deadline sent passes."""
        while True:
            self.renew(deadline())
            await anyio.sleep(every)

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to COMMAND's process group (with a guard: to each descendant, once)."""
        if self._control is not None:
            self._wake_guard()
            try:
                self._tell(f"signal {int(sig)}")
            except BlockingIOError:
                log.error("the guard of pid %d does not read its orders", self.pid)
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
            self._wake_guard()
            try:
                self._tell(f"stop {grace!r}")
            except BlockingIOError:  # the guard never read its pipe: killed below
                log.error("the guard of pid %d does not read its orders", self.pid)
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

    async def wait_or_stop(self, grace: float) -> int:
        """``wait``; when cancelled meanwhile, ``stop(grace)`` first (shielded). Either way the
        child (with a guard: its whole tree) is dead on return."""
        try:
            await self.wait()
        finally:
            with anyio.CancelScope(shield=True):
                code = await self.stop(grace)
        return code


def _guard_argv() -> list[str] | None:
    """How to start a guard, or None where there is none (off Linux, no interpreter path)."""
    if not sys.platform.startswith("linux") or not sys.executable:
        return None
    return [sys.executable, "-I", "-S", os.path.join(os.path.dirname(__file__), "_guard.py")]


def _start_guarded(
    guard: list[str],
    argv: list[str],
    env: dict[str, str],
    stdin: int,
    deadline: float | None,
    grace: float,
) -> tuple[subprocess.Popen[bytes], int, int]:
    """Start COMMAND under a guard; (guard, COMMAND's pid, control fd). In the spawner thread."""
    ctl_r, ctl_w = os.pipe()  # the write end stays here only (close-on-exec): EOF = we died
    os.set_blocking(ctl_w, False)  # a frozen guard must never block the supervisor's loop
    report_r, report_w = os.pipe()
    watchdog = "-" if deadline is None else repr(deadline)
    try:
        popen: subprocess.Popen[bytes] = subprocess.Popen(
            [*guard, str(ctl_r), str(report_w), watchdog, repr(grace), *argv],
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
    output: int | None = None,
    deadline: float | None = None,
    grace: float = 0.0,
) -> Child:
    """Start ``argv`` (never through a shell) in its own process group, bound to our life.

    With ``guard`` (on Linux), every descendant of ``argv`` dies with us too, even when we are
    SIGKILLed, and ``stop`` returns only when none is left; it costs an interpreter start.
    ``output`` (without a guard): a file descriptor for its stdout and stderr (else ours).

    ``deadline`` (a ``time.monotonic()`` reading): nothing is started once it has passed
    (``OSError`` with ``errno.ETIME``), checked as late as the fork; with a guard it is the
    watchdog's first deadline (``Child.keep_renewed``), ``grace`` its time from SIGTERM to
    SIGKILL. Cancelled meanwhile, ``spawn`` stops what it started (``grace``) and re-raises:
    a started process is either returned or dead.
    """
    if not argv:
        raise ConfigurationError("empty command")
    full_env = dict(os.environ)
    full_env.update(env or {})
    guard_argv = _guard_argv() if guard else None
    options: dict[str, object] = {}
    if guard_argv is None:  # the guard clears its own mask, and COMMAND inherits it
        options["preexec_fn"] = _clean_start(deathsig_preexec())
    stdin_fd = subprocess.DEVNULL if stdin is None else stdin

    def start() -> Child:
        if guard_argv is not None:
            started = _start_guarded(guard_argv, list(argv), full_env, stdin_fd, deadline, grace)
            return Child(*started)
        if deadline is not None and time.monotonic() >= deadline:
            raise OSError(errno.ETIME, "the deadline passed before the start", argv[0])
        popen: subprocess.Popen[bytes] = subprocess.Popen(
            list(argv),
            env=full_env,
            stdin=stdin_fd,
            stdout=output,
            stderr=output,
            process_group=0,  # signals for the group reach what COMMAND starts too
            close_fds=True,
            **options,  # type: ignore[call-overload]
        )
        return Child(popen)

    future = _spawner_pool().submit(start)
    # the wait is shielded: to_thread.run_sync begins with a checkpoint, and a cancellation
    # raised there would drop a child that was forked (or is about to be) with nobody to stop it
    with anyio.CancelScope(shield=True):
        child = await anyio.to_thread.run_sync(future.result)
    try:
        await anyio.lowlevel.checkpoint_if_cancelled()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await child.stop(grace)
        raise
    return child


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"
