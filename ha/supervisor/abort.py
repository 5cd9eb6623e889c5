"""The watchdog's SIGABRT is taken by the main thread, which prints every thread's traceback.

systemd kills a supervisor whose keep-alives stopped with SIGABRT (``WatchdogSignal=``), and
faulthandler prints where each thread stood. The kernel gives a signal sent to a process to any
of its threads that does not block it; after a SIGSTOP, whichever thread runs first after
SIGCONT. faulthandler's handler then reads the other threads' frames without the GIL, and a
main thread that runs on meanwhile changes them under it: the dump crashed with SIGSEGV (1 run
in 2 of ``tests/cli/test_run_systemd.py``'s watchdog test, the signal taken by a worker thread).
Handled by the main thread, the others wait for the GIL it holds and their frames stay put.

So every other thread blocks SIGABRT. A thread inherits the mask of the one that starts it, and
the main thread must not block it, so each ``threading.Thread`` blocks it itself before it runs
any code of its own (``threading.setprofile``: a hook that runs once per thread, at its first
call, and removes itself). A thread started some other way still takes its chance.
"""

from __future__ import annotations

import faulthandler
import signal
import sys
import threading
from types import FrameType
from typing import Any

__all__ = ("trace_aborts",)


def _block_abort(frame: FrameType, event: str, arg: Any) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGABRT})
    sys.setprofile(None)


def trace_aborts() -> None:
    """Print every thread's traceback on SIGABRT, from the main thread; call it from there."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("trace_aborts() is for the main thread")
    threading.setprofile(_block_abort)
    faulthandler.enable(all_threads=True)
