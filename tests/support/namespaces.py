"""Commands run in namespaces of their own with unshare(1), and whether this machine lets us.

A time namespace shifts CLOCK_MONOTONIC (``man 7 time_namespaces``); making one needs
CAP_SYS_ADMIN, so a test that needs one is skipped, saying why, where it is refused.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path

__all__ = ("host_clock", "host_monotonic", "refused", "unshare")


def unshare(*flags: str) -> list[str]:
    """The argv prefix that runs a command in new namespaces (``--time``, ``--monotonic=S``,
    ``--pid``...). ``--kill-child``: unshare ignores SIGTERM itself, so a test signals the
    command (unshare's child) and SIGKILL of unshare takes the command down too."""
    return ["unshare", *flags, "--fork", "--kill-child"]


@functools.cache
def refused(*flags: str) -> str | None:
    """Why ``unshare(flags)`` cannot run a command here, or None."""
    if shutil.which("unshare") is None:
        return "unshare(1) is not installed"
    probe = subprocess.run([*unshare(*flags), "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`unshare {' '.join(flags)}` is not permitted here: {probe.stderr.strip()}"
    return None


def host_monotonic() -> float:
    """The host's CLOCK_MONOTONIC, read by the test itself (whatever namespace it runs in)."""
    local = time.monotonic()
    offsets = Path("/proc/self/timens_offsets").read_text().splitlines()
    seconds, nanoseconds = next(
        line.split()[1:] for line in offsets if line.startswith("monotonic")
    )
    return local - (int(seconds) + int(nanoseconds) / 1e9)


# clock_gettime's number, called through syscall(2): libfaketime (LD_PRELOAD) cannot see it
_CLOCK_GETTIME = {"x86_64": 228, "aarch64": 113}.get(platform.machine())


class _Timespec(ctypes.Structure):
    _fields_ = [("seconds", ctypes.c_long), ("nanoseconds", ctypes.c_long)]


@functools.cache
def _timens_offset() -> float:
    try:
        offsets = Path("/proc/self/timens_offsets").read_text().splitlines()
    except OSError:  # no time namespaces here: no offset
        return 0.0
    seconds, nanoseconds = next(
        line.split()[1:] for line in offsets if line.startswith("monotonic")
    )
    return int(seconds) + int(nanoseconds) / 1e9


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def host_clock() -> float:
    """The host's CLOCK_MONOTONIC, whatever this process's clocks are made to say: read by a
    raw system call (libfaketime's LD_PRELOAD does not intercept it), less the offset of this
    process's time namespace (``_timens_offset`` is read once: a process never changes
    namespace after it starts). Falls back to ``host_monotonic`` where the call is unknown."""
    if _CLOCK_GETTIME is None or os.name != "posix":
        return host_monotonic()
    ts = _Timespec()
    if _libc().syscall(_CLOCK_GETTIME, 1, ctypes.byref(ts)) != 0:  # 1: CLOCK_MONOTONIC
        return host_monotonic()
    return ts.seconds + ts.nanoseconds / 1e9 - _timens_offset()
