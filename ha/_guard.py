"""The guard between ``ha run`` and COMMAND: COMMAND's whole process tree dies with the supervisor.

PR_SET_PDEATHSIG is not inherited, so a wrapper's children, and daemons that left the process
group (setsid, double fork), would outlive a SIGKILLed supervisor and overlap with the next
active's copy. The guard is a child subreaper: orphans below it reparent to it, not to init, so
everything COMMAND starts stays its descendant. It kills them all when the supervisor dies (EOF
on the control pipe, whose write end only the supervisor holds), when the supervisor stops
COMMAND, and when COMMAND exits; it exits only once it has no descendant left, with COMMAND's
exit status (or by COMMAND's signal).

It is also a watchdog (as Patroni arms ``/dev/watchdog``): a supervisor that is frozen
(SIGSTOP, a stuck VM, swap, a debugger) cannot stop COMMAND, and its session runs out on the
backend while COMMAND still runs. So the supervisor keeps renewing a deadline here, on
CLOCK_MONOTONIC, derived from its last contact with the backend; when it passes without a
renewal the guard stops the tree by itself (SIGTERM, SIGKILL after the grace period), before
the backend can let another host lead. COMMAND is not started at all when the deadline given
at start has passed already (the supervisor's contact is stale).

The guard can be frozen too, with its supervisor (``kill -STOP`` of both, a debugger). So it
keeps a POSIX timer armed at ``deadline + GRACE + LATE`` (``DeadMan``) that sends the guard
SIGKILL: the kernel delivers it to a stopped process, and COMMAND dies with the guard
(PR_SET_PDEATHSIG). A guard that runs is never hit: it re-arms the timer at each renewal and
has ended the tree by ``deadline + GRACE``. Descendants that left COMMAND's process group
are out of that timer's reach (only a guard that runs can find them). What nothing here
covers: the host or VM frozen and resumed (every clock stops with it): that is what fencing
is for.

Run as ``python -I -S _guard.py CTL REPORT DEADLINE GRACE COMMAND...``: standard library only,
never imports ``ha``, so it starts fast. ``DEADLINE``: a ``time.monotonic()`` reading, or ``-``
for no watchdog; ``GRACE``: seconds between the watchdog's SIGTERM and its SIGKILL. ``CTL``
lines: ``signal N`` sends N to every descendant once (the process group at once, then those
outside it); ``stop GRACE`` sends SIGTERM so, waits up to GRACE seconds for the tree to end,
then SIGKILLs what is left; ``deadline D`` renews the watchdog's deadline. ``REPORT`` gets one
line: ``pid P`` once COMMAND runs, ``error ERRNO`` when it cannot be started (``ETIME``: the
deadline had passed).
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
# the supervisor decides when the tree stops: a SIGTERM sent to every process of a service
# (systemd's KillMode=control-group) must not kill the guard and, through PDEATHSIG, COMMAND
SHIELDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int

CLOCK_MONOTONIC = 1  # time.monotonic()'s clock, which the deadlines are read on
TIMER_ABSTIME = 1
SIGEV_SIGNAL = 0
LATE = 0.025  # how late a running guard may be in ending the tree before its timer kills it


class _Sigevent(ctypes.Structure):
    _fields_ = [  # Linux's struct sigevent: 64 bytes
        ("sigev_value", ctypes.c_void_p),
        ("sigev_signo", ctypes.c_int),
        ("sigev_notify", ctypes.c_int),
        ("pad", ctypes.c_int * 12),
    ]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class DeadMan:
    """A timer that SIGKILLs this process at a time on CLOCK_MONOTONIC, even while it is
    stopped: the watchdog of a watchdog that may be frozen (module doc)."""

    def __init__(self) -> None:
        event = _Sigevent(sigev_signo=signal.SIGKILL, sigev_notify=SIGEV_SIGNAL)
        self._timer = ctypes.c_void_p()
        if _libc.timer_create(CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(self._timer)):
            raise OSError(ctypes.get_errno(), "timer_create")
        self.at: float | None = None

    def arm(self, at: float) -> None:
        """SIGKILL at ``at`` (a ``time.monotonic()`` reading), instead of any earlier time."""
        whole = int(at)
        value = _Timespec(whole, int((at - whole) * 1e9))
        spec = _Itimerspec(_Timespec(0, 0), value)
        if _libc.timer_settime(self._timer, TIMER_ABSTIME, ctypes.byref(spec), None):
            raise OSError(ctypes.get_errno(), "timer_settime")
        self.at = at


def descendants(root: int) -> list[tuple[int, int]]:
    """(pid, process group) of every live descendant of ``root``, parents before children."""
    parent: dict[int, int] = {}
    group: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if fields[0] in (b"Z", b"X"):
            continue  # dead, waiting to be reaped
        pid = int(name)
        parent[pid], group[pid] = int(fields[1]), int(fields[2])
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    found: list[tuple[int, int]] = []
    todo = [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            found.append((pid, group[pid]))
            todo.append(pid)
    return found


class Guard:
    def __init__(
        self, ctl: int, command: list[str], deadline: float | None = None, grace: float = 0.0
    ) -> None:
        self.ctl: int | None = ctl
        self.command = command
        self.deadline = deadline  # the watchdog's: stop the tree once it passes (None: off)
        self.grace = grace
        self.dead_man: DeadMan | None = None  # armed by start() when there is a deadline
        self.pid = 0  # COMMAND's: its process group's id too
        self.status: int | None = None  # COMMAND's wait status, once reaped
        self.buffer = b""
        self.me = os.getpid()

    def rearm(self, kill_at: float | None = None) -> None:
        """Set the dead man's timer just past the time this guard ends the tree by itself:
        ``kill_at`` when stopping, else the deadline and the grace."""
        if self.dead_man is not None and self.deadline is not None:
            end = self.deadline + self.grace if kill_at is None else kill_at
            self.dead_man.arm(end + LATE)

    def start(self) -> int:
        inherited = {s: signal.getsignal(s) == signal.SIG_IGN for s in SHIELDED}
        for s in SHIELDED:
            signal.signal(s, signal.SIG_IGN)
        me, getppid, kill, sigkill = self.me, os.getppid, os.kill, signal.SIGKILL
        if self.deadline is not None:  # before COMMAND exists: it never runs unwatched
            self.dead_man = DeadMan()
            self.rearm()

        def preexec() -> None:
            for s, ignored in inherited.items():  # as COMMAND would have had them unguarded
                signal.signal(s, signal.SIG_IGN if ignored else signal.SIG_DFL)
            _prctl(PR_SET_PDEATHSIG, sigkill, 0, 0, 0)  # in case the guard is SIGKILLed
            if getppid() != me:
                kill(os.getpid(), sigkill)

        popen = subprocess.Popen(self.command, process_group=0, preexec_fn=preexec)
        popen.returncode = 0  # reaped by reap(), never by Popen
        self.pid = popen.pid
        return popen.pid

    def reap(self) -> bool:
        """Reap what has died; False once the guard has no child (hence no descendant) left."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.pid:
                self.status = status

    def signal_tree(self, sig: int) -> None:
        """Send ``sig`` once to every descendant: COMMAND's group at once, then the others."""
        tree = descendants(self.me)
        if any(g == self.pid for _, g in tree):
            try:
                os.killpg(self.pid, sig)
            except OSError:
                pass
        for pid, g in tree:
            if g != self.pid:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass

    def kill_tree(self) -> None:
        """SIGKILL every descendant until none is left (and all are reaped)."""
        delay = 0.001
        while self.reap():
            self.signal_tree(signal.SIGKILL)
            time.sleep(delay)  # let them die; orphans of the killed reparent to us
            delay = min(delay * 2, 0.05)

    def read_control(self) -> list[bytes]:
        """The complete lines received; closes ``ctl`` at EOF (the supervisor is gone)."""
        assert self.ctl is not None
        try:
            data = os.read(self.ctl, 4096)
        except OSError:
            data = b""
        if not data:
            os.close(self.ctl)
            self.ctl = None
            return []
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        return lines

    def run(self, wake: int) -> None:
        kill_at: float | None = None  # stopping: SIGKILL what is left then
        while True:
            if not self.reap():
                return
            if self.ctl is None or (kill_at is None and self.status is not None):
                self.kill_tree()  # the supervisor died, or COMMAND ended by itself
                return
            now = time.monotonic()
            if kill_at is None and self.deadline is not None and now >= self.deadline:
                late = now - self.deadline
                say(f"no renewal from the supervisor ({late:.3f}s past the deadline): stopping")
                self.signal_tree(signal.SIGTERM)
                kill_at = self.deadline + self.grace  # a late guard gives no more: the timer
            timeout = None
            if kill_at is not None:
                timeout = kill_at - now
                if timeout <= 0:
                    self.kill_tree()
                    return
            elif self.deadline is not None:
                timeout = self.deadline - now
            readable, _, _ = select.select([self.ctl, wake], [], [], timeout)
            if wake in readable:
                try:
                    os.read(wake, 512)  # SIGCHLD: reaped at the top of the loop
                except BlockingIOError:
                    pass
            if self.ctl in readable:
                for line in self.read_control():
                    word, _, arg = line.decode("ascii", "replace").partition(" ")
                    if word == "signal":
                        self.signal_tree(int(arg))
                    elif word == "stop" and kill_at is None:
                        self.signal_tree(signal.SIGTERM)
                        kill_at = time.monotonic() + float(arg)
                        if self.deadline is not None:  # never past the watchdog's own end
                            kill_at = min(kill_at, self.deadline + self.grace)
                        self.rearm(kill_at)
                    elif word == "deadline" and kill_at is None:
                        self.deadline = float(arg)
                        self.rearm()


def say(line: str) -> None:
    try:
        os.write(2, f"ha guard {os.getpid()}: {line}\n".encode())
    except OSError:
        pass


def exit_like(status: int | None) -> None:
    """Exit as COMMAND did: same code, or killed by the same signal (without a core dump)."""
    if status is None:
        os._exit(1)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        _prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


def main(argv: list[str]) -> None:
    # a clean mask, which COMMAND inherits: the supervisor's thread that started us blocks
    # SIGABRT (ha/supervisor/abort.py)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    ctl, report = int(argv[1]), int(argv[2])
    deadline = None if argv[3] == "-" else float(argv[3])
    if _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        os.write(report, f"error {ctypes.get_errno()}\n".encode())
        os._exit(127)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select through wake_w
    guard = Guard(ctl, argv[5:], deadline, float(argv[4]))
    hangup = select.poll()
    hangup.register(ctl, select.POLLIN)
    if any(events & select.POLLHUP for _, events in hangup.poll(0)):
        os._exit(1)  # the supervisor died before COMMAND could start: do not start it
    if deadline is not None and time.monotonic() >= deadline:
        os.write(report, f"error {errno.ETIME}\n".encode())  # stale contact: never start
        os._exit(127)
    try:
        pid = guard.start()
    except OSError as exc:
        os.write(report, f"error {exc.errno or errno.EIO}\n".encode())
        os._exit(127)
    try:
        os.write(report, f"pid {pid}\n".encode())
        os.close(report)
    except OSError:
        pass  # the supervisor is gone: the control pipe tells
    guard.run(wake_r)
    exit_like(guard.status)


if __name__ == "__main__":
    main(sys.argv)
