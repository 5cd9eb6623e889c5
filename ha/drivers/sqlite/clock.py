"""The host's CLOCK_MONOTONIC, the one clock of every lease in a file, in any time namespace.

Leases are written by one process and judged by another, so they must be on a clock that is
one for every process of the host. CLOCK_MONOTONIC is not: a time namespace (``unshare
--time``; CRIU and ``podman container restore`` give a restored container one) shifts it by a
constant offset. A process ``+100000`` s ahead would find every other lease run out long ago
and expire it at its first write; a process behind would never see a frozen one run out.

So every reading is corrected to the host's clock, the initial namespace's:
``host = time.monotonic() - offset``, the offset being the ``monotonic`` line of
``/proc/self/timens_offsets`` (seconds and nanoseconds; ``man 7 time_namespaces``). CLOCK_BOOTTIME
corrected the same way would serve as well, but it also counts a suspend, which the leases
never did.

- A namespace's offsets are fixed once a process is in it, but a process can move: ``setns``
  (single-threaded processes only) or a checkpoint restored in a new namespace. The offset is
  read at every reading, before and after the clock, and a reading between two different
  offsets is taken again (about 10 microseconds a reading).
- The file shows the offsets of the namespace the process's children are made in (``ns/
  time_for_children``), which is its own namespace unless it called ``unshare(CLONE_NEWTIME)``
  and has not exec'd since (that moves it in; its children are born in). ``check()``, at start,
  refuses that case (a process that does it later, with a driver running, is not watched for:
  it would be its own doing).
- A kernel without time namespaces (before 5.6, or without ``CONFIG_TIME_NS``) has no
  ``ns/time``: its offset is 0. Without ``/proc`` nothing tells the offset: refused in one line.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass

from ...errors import ConfigurationError

__all__ = ("OFFSETS", "Reading", "check", "now", "offset", "parse_offset")

OFFSETS = "/proc/self/timens_offsets"
NAMESPACE = "/proc/self/ns/time"
FOR_CHILDREN = "/proc/self/ns/time_for_children"


@dataclass(frozen=True, slots=True)
class Reading:
    """One instant on two clocks: ``host``, what the file holds and compares; ``local``, this
    process's ``time.monotonic()``, what its event loop's clock is mapped from."""

    host: float
    local: float


def now() -> Reading:
    """Read the clock, on the host's and on this process's scale."""
    before = offset()
    while True:
        local = time.monotonic()
        after = offset()
        if after == before:  # no move to another namespace in between
            return Reading(local - after, local)
        before = after


def offset() -> float:
    """This process's CLOCK_MONOTONIC minus the host's, in seconds."""
    try:
        fd = os.open(OFFSETS, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        if os.path.isdir("/proc/self/ns") and not os.path.exists(NAMESPACE):
            return 0.0  # a kernel without time namespaces: every clock is the host's
        raise _unreadable(errno.ENOENT) from None
    except PermissionError as exc:  # hidepid, an LSM
        raise _unreadable(exc.errno or errno.EACCES) from None
    try:
        text = os.read(fd, 256)
    finally:
        os.close(fd)
    return parse_offset(text)


def parse_offset(text: bytes) -> float:
    """The ``monotonic`` offset of a ``timens_offsets`` file's text, in seconds."""
    for line in text.decode("ascii", "replace").splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[0] == "monotonic":
            try:
                seconds, nanoseconds = int(fields[1]), int(fields[2])
            except ValueError:
                break
            # the seconds may be negative, the nanoseconds never are: -1 500000000 is -0.5 s
            return seconds + nanoseconds / 1e9
    raise ConfigurationError(f"{OFFSETS} has no monotonic offset this driver can read: {text!r}")


def check() -> None:
    """Refuse to run where ``offset()`` would not be this process's own: no ``/proc``, or a
    process that made a time namespace for its children only."""
    offset()
    try:
        own, children = os.stat(NAMESPACE), os.stat(FOR_CHILDREN)
    except FileNotFoundError:
        return  # no time namespaces (offset() returned 0)
    except OSError as exc:
        raise _unreadable(exc.errno or errno.EACCES, NAMESPACE) from None
    if own.st_ino != children.st_ino or own.st_dev != children.st_dev:
        raise ConfigurationError(
            f"this process is not in the time namespace that {OFFSETS} describes (it made one"
            " for its children with unshare(CLONE_NEWTIME)); the sqlite driver cannot put its"
            " leases on the host's clock: run it in a child process"
        )


def _unreadable(code: int, path: str = OFFSETS) -> ConfigurationError:
    return ConfigurationError(
        f"cannot read {path} ({os.strerror(code)}): the sqlite driver needs /proc mounted to put"
        " its leases on the host's clock (a time namespace shifts CLOCK_MONOTONIC)"
    )
