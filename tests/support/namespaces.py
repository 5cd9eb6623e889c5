"""Commands run in namespaces of their own with unshare(1), and whether this machine lets us.

A time namespace shifts CLOCK_MONOTONIC (``man 7 time_namespaces``); making one needs
CAP_SYS_ADMIN, so a test that needs one is skipped, saying why, where it is refused.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import time
from pathlib import Path

__all__ = ("host_monotonic", "refused", "unshare")


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
