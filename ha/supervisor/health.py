"""``--health CMD``: one run of the health check, its verdict and its output.

The check's output (stdout and stderr) goes to an unnamed temporary file, not to our own
stdout: once it has exited, its lines are logged by the supervisor's logger, prefixed
``health:`` (so ``ha run ID: health: ...`` in text, a ``message`` field in JSON logs) at
warning when the check failed, at debug when it passed (a passing check every two seconds
would drown the log). At most ``MAX_OUTPUT`` bytes are read; a check that writes more is cut.
A file rather than a pipe: a check that writes much, or leaves a child holding the pipe,
cannot block anything.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping, Sequence

import anyio

from .._process import describe_exit, spawn

__all__ = ("MAX_OUTPUT", "check_health")

log = logging.getLogger("ha.supervisor")

MAX_OUTPUT = 4096


async def check_health(
    argv: Sequence[str], env: Mapping[str, str], seconds: float
) -> tuple[bool, str]:
    """Run the check once: (healthy, why) with why its exit ("exit status 1") or failure."""
    with tempfile.TemporaryFile() as output:
        try:
            child = await spawn(argv, env, guard=False, output=output.fileno())  # often: cheap
        except OSError as exc:
            return False, f"cannot run {argv[0]}: {exc.strerror}"
        code: int | None = None
        try:
            with anyio.move_on_after(seconds):
                code = await child.wait()
        finally:
            with anyio.CancelScope(shield=True):
                await child.stop(0.0)
        healthy = code == 0
        output.seek(0)
        _show(output.read(MAX_OUTPUT + 1), logging.DEBUG if healthy else logging.WARNING)
    if code is None:
        return False, f"no answer in {seconds:g}s"
    return healthy, describe_exit(code)


def _show(raw: bytes, level: int) -> None:
    text = raw[:MAX_OUTPUT].decode(errors="replace")
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if len(raw) > MAX_OUTPUT:
        lines.append(f"(output cut at {MAX_OUTPUT} bytes)")
    for line in lines:
        log.log(level, "health: %s", line)
