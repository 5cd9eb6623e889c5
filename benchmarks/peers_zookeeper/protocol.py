"""The line protocol between the failover harness and one contender process.

Any library can take part (Python, Java, ...) by following it:

- command line: ``--hosts HOST:PORT --path /election/path --id NAME --session-timeout SECONDS``
- stdout, one line per fact, each with ``CLOCK_MONOTONIC`` in nanoseconds (Python's
  ``time.monotonic_ns()``, Java's ``System.nanoTime()`` on Linux: one clock for every process
  of the machine, so the harness can subtract times taken in different processes):
    ``JOINED <ns>``     the contender has entered the election
    ``LEADER <ns>``     it has become the leader (printed first thing in its leader callback)
    ``RELEASING <ns>``  it was asked to step down and is about to release leadership
- stdin: the line ``release`` asks the leader to step down; it releases, then exits. End of
  input (the harness died) makes the contender exit too.

The harness kills the leader with SIGKILL for crash rounds; nothing is printed then.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time


def say(word: str) -> None:
    print(f"{word} {time.monotonic_ns()}", flush=True)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--id", required=True)
    parser.add_argument("--session-timeout", type=float, default=2.0)
    return parser.parse_args()


def release_requested() -> threading.Event:
    """An event set when the harness asks for ``release``; the process exits if stdin closes."""
    event = threading.Event()

    def read() -> None:
        for line in sys.stdin:
            if line.strip() == "release":
                event.set()
        os._exit(0)  # the harness is gone: do not linger as an orphan contender

    threading.Thread(target=read, daemon=True).start()
    return event
