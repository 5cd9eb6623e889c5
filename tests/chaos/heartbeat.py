"""COMMAND of the supervised chaos rounds: appends a heartbeat to FILE every ~20 ms until it ends.

    ha run /svc --id a -- python -I -S tests/chaos/heartbeat.py FILE [LINGER [detach]]

A line: ``{"id": HA_IDENTITY, "epoch": HA_EPOCH, "pid": ..., "t": time.monotonic()}``, the clock
read just before the append (O_APPEND, one write(2): a line is whole or absent). ``LINGER``:
seconds it goes on beating after SIGTERM, as a service slow to stop does (past ``--grace`` the
supervisor kills it). ``detach``: the beats come from a daemon in a session of its own, which
COMMAND waits for (the self-test's: out of the reach of a guard killed by its timer).
Standard library only, so that it starts fast; judged by ``tests/chaos/containment.py``.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time


def main(path: str, linger: float) -> None:
    identity, epoch, pid = os.environ["HA_IDENTITY"], int(os.environ["HA_EPOCH"]), os.getpid()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    until = math.inf

    def term(signum: int, frame: object) -> None:
        nonlocal until
        until = min(until, time.monotonic() + linger)

    signal.signal(signal.SIGTERM, term)
    while True:
        t = time.monotonic()
        if t >= until:
            return
        line = {"id": identity, "epoch": epoch, "pid": pid, "t": t}
        os.write(fd, json.dumps(line, separators=(",", ":")).encode() + b"\n")
        time.sleep(0.02)


def detached(path: str, linger: float) -> None:
    """Beat from a child in a new session; pass SIGTERM on and end with it."""
    child = os.fork()
    if child == 0:
        os.setsid()
        main(path, linger)
        os._exit(0)
    signal.signal(signal.SIGTERM, lambda signum, frame: os.kill(child, signal.SIGTERM))
    os.waitpid(child, 0)


if __name__ == "__main__":
    linger = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    if sys.argv[3:] == ["detach"]:
        detached(sys.argv[1], linger)
    else:
        main(sys.argv[1], linger)
