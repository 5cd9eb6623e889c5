"""Processes bound to their parent's life, and a graceful quit on SIGTERM or SIGINT.

A child that outlives its parent is a contender or a job manager nobody supervises any more:
on Linux, ``PR_SET_PDEATHSIG`` has the kernel SIGKILL it when the parent dies. The parent can
arm it in the child before ``exec`` (``deathsig_preexec``, what the supervisor's ``spawn`` does
when COMMAND runs without a guard), or the child arms it itself first thing
(``die_with_parent``, the job manager process). Elsewhere neither does anything.

``quit_on_signals`` is how a long-running process (a demo contender, a job manager) turns
SIGTERM or SIGINT into leaving the election cleanly.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import anyio

__all__ = ("deathsig_preexec", "die_with_parent", "quit_on_signals")

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
    long as the process (``ha/supervisor/process.py`` keeps one).
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
