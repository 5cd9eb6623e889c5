"""``ha run``'s options for a COMMAND that exits and for a backend that blips.

The rules behind them are in ``ha/supervisor/exits.py`` (``--on-exit``, ``--max-restarts``) and
``ha/supervisor/settings.py`` (``timing_for``: ``--hold-on-disconnect``). A config file takes
them as ``on-exit``, ``max-restarts`` and ``hold-on-disconnect`` in its ``[run]`` table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ..supervisor.exits import OnExit

__all__ = ("run_policy_options",)


def run_policy_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--on-exit, --max-restarts and --hold-on-disconnect."""
    fn = click.option(
        "--hold-on-disconnect",
        type=click.FloatRange(0),
        default=0.0,
        show_default=True,
        metavar="S",
        help="Keep COMMAND running through a lost connection for up to S seconds after the"
        " last contact, and go on if contact comes back in the same session (a ZooKeeper"
        " blip). 0: stop it at once. Safety: S may not be longer than the time left to stop"
        " COMMAND (--grace) before the session can expire, nor shorter than half the session"
        " timeout; a clear error says the range.",
    )(fn)
    fn = click.option(
        "--max-restarts",
        type=click.IntRange(0),
        default=3,
        show_default=True,
        metavar="N",
        help="With --on-exit restart: restarts in a row (each run under a minute) before"
        " ceding the lead to another host; this host rejoins after a cooling period.",
    )(fn)
    fn = click.option(
        "--on-exit",
        type=click.Choice([p.value for p in OnExit]),
        default=OnExit.RESTART.value,
        show_default=True,
        help="When COMMAND exits by itself while active. restart: run it again, still active,"
        " after 0.5s, 1s, 2s... (--max-restarts, then cede the lead and rejoin later); quit:"
        " leave the election and exit 0 (a job that is done); fail: leave the election and"
        " exit with COMMAND's status (never 0).",
    )(fn)
    return fn
