"""What the ``ha`` commands print: times, an election's status, leader changes, jobs, events.

Tables go through rich (imported when first printed, so that ``ha --help`` stays quick); one-line
records go through ``click.echo``, flushed at once when another program may be reading them as
they come (``ha watch``, a job manager's events).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

import click

from .. import admin
from ..admin.leases import NOT_TOLD
from ..drivers.base import SessionLease, TreeSize
from ..election.history import FenceFailure, Term

__all__ = (
    "ago",
    "batches",
    "clock",
    "print_event",
    "print_elections",
    "print_event_json",
    "print_history",
    "print_job",
    "print_jobs",
    "print_leader",
    "print_status",
    "stamp",
    "status_json",
    "tree_line",
    "when",
)

TREE_WARNING = 0.8  # of its limit: past this, a tree's size is shown as a warning


# --- times --------------------------------------------------------------------------------------


def when(ts: float | None) -> str:
    """``2024-05-01 12:00:00 (3m05s ago)``."""
    if ts is None:
        return "?"
    day = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
    return f"{day} ({ago(time.time() - ts)} ago)"


def ago(seconds: float) -> str:
    """``4.2s``, ``3m05s``, ``2h07m``."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def clock(t: float) -> str:
    """``12:00:00.123``: the local time of day, to the millisecond."""
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d}"


def stamp() -> str:
    """Now, as ``2024-05-01T12:00:00.123``."""
    now = time.time()
    return time.strftime("%Y-%m-%dT", time.localtime(now)) + clock(now)


# --- elections ----------------------------------------------------------------------------------


def print_status(status: admin.ElectionStatus, url: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    t = admin.text
    console.print(f"[bold]election[/] {status.path}  [dim]{url}[/]")
    if not status.exists:
        console.print("  does not exist (nothing has run there; `ha format` creates it)")
        return
    if status.paused is not None:
        pause = status.paused
        console.print(
            f"  [yellow]paused[/] by {pause.by} since {when(pause.since)}: no failover"
            f" (nobody takes the lead) until `ha resume {status.path}`"
        )
    if status.active is not None:
        console.print(
            f"  [green]active[/]  {t(status.active)}  epoch {status.epoch}"
            f"  since {when(status.since)}"
        )
        console.print(f"  {_expiry(status)}")
    elif status.holder is not None and status.paused is not None:
        console.print(
            f"  [yellow]no active[/]: {t(status.holder)} is first (epoch {status.epoch})"
            " and waits for `ha resume` to take the lead"
        )
    elif status.holder is not None:
        console.print(
            f"  [yellow]no active[/]: {t(status.holder)} leads (epoch {status.epoch}),"
            " fencing the old actives first"
        )
    else:
        console.print("  [yellow]no active[/]: nobody is in the queue")
    for place, c in enumerate(status.contenders, 1):
        role = "leader " if place == 1 else "standby"
        crumb = c.breadcrumb
        if crumb is not None:
            note = f"  data {t(crumb.data)}" if crumb.data else ""
        elif c.breadcrumb_raw is not None:
            note = f"  breadcrumb unreadable: {c.breadcrumb_raw[:60]!r}"
        else:
            note = "  no breadcrumb (leaving)"
        rank = f"  priority {c.priority}" if c.priority else ""
        renewed = f"  renewed {_renewed(c.lease)}" if status.leases_told else ""
        console.print(
            f"  {place:>2}. {role}  {t(c.identity)}  epoch {c.epoch}{rank}{note}{renewed}"
        )
    for left in status.leftovers:
        who = (
            t(left.breadcrumb.identity)
            if left.breadcrumb is not None
            else f"unreadable {left.raw[:60]!r}"
        )
        if not left.awaits_fence:
            why = "a standby that crashed: a later leader fences it"
        elif status.holder is None:
            why = "crashed: the next leader fences it before it acts"
        else:
            why = "crashed: the leader fences it before it acts"
        console.print(f"  left breadcrumb  {who}  epoch {left.epoch}  ({why})")
    if status.failover is not None and status.failover_pending:
        request = status.failover
        target = "any standby" if request.to is None else t(request.to)
        ceding = f" ({t(request.active)} is ceding)" if request.ceding else ""
        console.print(f"  failover pending: {t(request.active)} -> {target}{ceding}")
    if status.last_term is not None:
        term = status.last_term
        console.print(
            f"  last term: {t(term.identity)} epoch {term.epoch} from {when(term.started)}"
            f" ({term.cause}; `ha history {status.path}`)"
        )
    if status.fence_failure is not None:
        console.print(f"  [red]last refused fence[/]: {_refused(status.fence_failure)}")
    for problem in status.problems:
        console.print(f"  [red]problem[/]: {problem}")
    if status.tree is not None:
        console.print(f"  {tree_line(status.tree)}")
    if status.members:
        table = Table(box=None, padding=(0, 1), show_edge=False)
        columns = ("member", "state", "epoch", "host", "pid", "process", "renewed", "since", "note")
        for column in columns:
            table.add_column(column)
        for m, lease in status.members_with_leases():
            table.add_row(
                t(m.identity),
                m.state,
                "" if m.epoch is None else str(m.epoch),
                m.host,
                str(m.pid or ""),
                _process(m),
                _renewed(lease) if status.leases_told else "n/a",
                ago(time.time() - m.since) + " ago" if m.since else "",
                m.note,
            )
        console.print(table)


def _renewed(lease: SessionLease | None) -> str:
    """``0.4s ago``: when the backend last renewed a session (``?``: its session is gone)."""
    return "?" if lease is None else f"{ago(lease.renewed_ago)} ago"


def _expiry(status: admin.ElectionStatus) -> str:
    """The active's session: when the backend ends it unless it is renewed."""
    lease = status.active_lease
    if not status.leases_told:
        return f"expires in n/a ({NOT_TOLD}; see its member's process below)"
    if lease is None:
        return "expires in ?: its session is gone (a new reading shows who leads)"
    if lease.expires_in <= 0:
        return (
            f"[red]lease ran out[/] {ago(-lease.expires_in)} ago (renewed {_renewed(lease)}):"
            " the backend ends its session at its next check"
        )
    return (
        f"expires in {ago(lease.expires_in)} unless renewed"
        f" (renewed {_renewed(lease)}, lease {lease.duration:g}s)"
    )


def _refused(failed: FenceFailure) -> str:
    times = f" ({failed.count} in a row)" if failed.count > 1 else ""
    return (
        f"{admin.text(failed.by)} could not fence {failed.old}{times} at {when(failed.at)}:"
        f" {failed.error}"
    )


def _process(member: admin.Member) -> str:
    """Whether a member's process runs, where this host can tell (its own processes): a
    killed active shows as dead here before its session expires. Elsewhere n/a."""
    if not member.pid or member.host != socket.gethostname():
        return "n/a"
    try:
        os.kill(member.pid, 0)
    except ProcessLookupError:
        return "dead"
    except PermissionError:
        pass  # it runs, as another user
    return "running"


def tree_line(size: TreeSize, *, markup: bool = True) -> str:
    """``tree 24 KiB of 1024 KiB (2%), 131 nodes (ConfigMap ns/name-ha)``; past
    ``TREE_WARNING`` of the limit, a warning (in red: ``markup``, rich's) that says what
    happens at the limit."""
    text = (
        f"{size.used / 1024:.0f} KiB of {size.limit / 1024:.0f} KiB ({size.fraction:.0%}),"
        f" {size.nodes} nodes ({size.where})"
    )
    if size.fraction < TREE_WARNING:
        return f"tree {text}"
    warning = "[red]tree nearly full[/]" if markup else "tree nearly full"
    return f"{warning}: {text}; a write past the limit is refused"


def print_elections(found: Sequence[admin.ElectionStatus], prefix: str, url: str) -> None:
    """``ha status PREFIX``: one line per election (and the tree's size, once)."""
    if not found:
        click.echo(f"no election under {prefix}  ({url})")
    for status in found:
        standbys = f"{len(status.standbys)} standby" + ("s" if len(status.standbys) != 1 else "")
        pause = "  paused" if status.paused is not None else ""
        if status.active is not None:
            state = f"active {admin.text(status.active)}  epoch {status.epoch}"
            lease = status.active_lease
            if lease is not None:
                state += f"  renewed {_renewed(lease)}, expires in {ago(lease.expires_in)}"
        elif status.holder is not None:
            state = f"no active ({admin.text(status.holder)} first, not acting)"
        else:
            state = "no active"
        click.echo(f"{status.path}  {state}  {standbys}{pause}")
    if found and found[0].tree is not None:
        click.echo(tree_line(found[0].tree, markup=False))


def print_history(path: str, terms: Sequence[Term], failed: FenceFailure | None) -> None:
    """``ha history``: one line per term, oldest first, with its end once the next leader
    recorded it (a term still open leads, or was the last)."""
    if not terms:
        click.echo(f"{path}: no leader recorded yet")
    for term in terms:
        day = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(term.started))
        end = ""
        if term.ended is not None:
            end = f"  ended after {ago(term.ended - term.started)}: {term.end_cause}"
        click.echo(f"{day}  epoch {term.epoch}  {admin.text(term.identity)}  {term.cause}{end}")
    if failed is not None:
        click.echo(f"last refused fence: {_refused(failed)}")


def print_leader(found: admin.ElectionStatus, as_json: bool) -> None:
    """One line of ``ha watch``."""
    active = None if found.active is None else admin.text(found.active)
    if as_json:
        record = {"ts": time.time(), "path": found.path, "active": active, "epoch": found.epoch}
        click.echo(json.dumps(record))
    elif active is not None:
        click.echo(f"{stamp()} {found.path} active {active} epoch {found.epoch}")
    else:
        click.echo(f"{stamp()} {found.path} no active")
    sys.stdout.flush()


# --- jobs (a ha.pipeline.client.JobStatus each, typed Any: the pipeline is imported lazily) --------


def batches(status: Any) -> str:
    """``3/10``: committed batches out of the job's (``?`` before its plan is read)."""
    total = "?" if status.batches is None else str(status.batches)
    return f"{status.batches_done}/{total}"


def status_json(status: Any, cancel_requested: bool) -> dict[str, Any]:
    doc: dict[str, Any] = status.to_json()
    doc["cancel_requested"] = cancel_requested and not status.finished
    return doc


def print_job(status: Any, cancel_requested: bool) -> None:
    color = {"succeeded": "green", "failed": "red", "cancelled": "yellow"}.get(status.state)
    state = click.style(status.state, fg=color) if color else status.state
    click.echo(f"job {status.job_id}  {state}  {status.pipeline or '?'}")
    click.echo(f"  batches  {batches(status)} committed")
    if status.output:
        click.echo(f"  output   {status.output}")
    if status.error:
        click.echo(f"  error    {status.error}")
    if cancel_requested and not status.finished:
        click.echo("  cancel requested (the active job manager acts on it)")


def print_jobs(found: list[tuple[Any, bool]]) -> None:
    """The table of ``ha jobs list``: each job with whether its cancellation is requested."""
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, padding=(0, 2), show_edge=False)
    for column in ("job", "state", "pipeline", "batches", "output", "note"):
        table.add_column(column)
    for s, cancel in found:
        note = s.error or ("cancel requested" if cancel and not s.finished else "")
        table.add_row(s.job_id, s.state, s.pipeline or "", batches(s), s.output or "", note)
    Console(highlight=False).print(table)


def print_event(name: str, fields: dict[str, Any]) -> None:
    """A job manager's event as one line: ``12:00:00.123 jm-1 batch_committed job=x batch=3``."""
    fields = dict(fields)
    t = float(fields.pop("t", time.time()))
    who = fields.pop("identity", "?")
    parts = []
    for key, value in fields.items():
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        parts.append(f"{key}={text}")
    click.echo(" ".join([clock(t), str(who), name, *parts]))
    sys.stdout.flush()


def print_event_json(name: str, fields: dict[str, Any]) -> None:
    click.echo(json.dumps({"event": name, **fields}, default=str))
    sys.stdout.flush()
