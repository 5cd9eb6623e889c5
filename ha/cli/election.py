"""The commands that read or change an election: ``status``, ``history``, ``pause``,
``resume``, ``watch``, ``failover`` and ``format``.

They go through ``ha.admin``; ``ha run`` (``run.py``) is the one that takes part. Exit code 3
says there is no active (``status``, ``failover``).
"""

from __future__ import annotations

import json
import math
import re
import sys
import time

import anyio
import click

from .. import admin
from ..admin.status import check_election
from ..drivers.base import Driver, validate_path
from ..election.history import History, read_history
from ..election.nodes import ElectionNodes
from ..errors import NoNode
from ._run import (
    EXIT_NO_ACTIVE,
    Failure,
    NoActiveFailure,
    Options,
    Signals,
    call,
    open_driver,
    with_driver,
)
from ._run import run as run_async
from ._show import print_elections, print_history, print_leader, print_status
from ._watch import Watcher

__all__ = ("failover", "format_", "history", "pause", "resume", "status", "watch")

READY = ("standby", "neutral")  # the member states that can take over (ha/admin/failover.py)


@click.command()
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def status(opts: Options, path: str, as_json: bool) -> None:
    """Show the election at PATH: its queue in order (the leader first, with its epoch, then
    the standbys in the order they would take over), leftover breadcrumbs, members, the pause,
    the last term and the last refused fence. Each member's session shows how long ago the
    backend last renewed it, the active's when it expires unless renewed (n/a on ZooKeeper,
    which does not tell). Where the backend keeps the whole tree in one object of limited size
    (Kubernetes: one ConfigMap, 1 MiB), it shows how full that is. PATH that holds no election
    but elections below it (a PREFIX, or /) lists each of them on one line.

    Exit code 0 when an active exists (under a PREFIX: in every election), 3 when not.

    \b
    Examples:
      ha status /myapp
      ha status /myapp --json | jq .active
      ha status /            # every election, one line each
    """
    call(opts, lambda: validate_path(path) if path == "/" else check_election(path))
    found = with_driver(opts, lambda driver: _status_or_all(driver, path), read_only=True)
    if isinstance(found, list):
        if as_json:
            click.echo(json.dumps([f.to_json() for f in found], indent=2))
        else:
            print_elections(found, path, opts.backend_url())
        sys.exit(0 if all(f.active is not None for f in found) else EXIT_NO_ACTIVE)
    if as_json:
        click.echo(json.dumps(found.to_json(), indent=2))
    else:
        print_status(found, opts.backend_url())
    sys.exit(0 if found.active is not None else EXIT_NO_ACTIVE)


async def _status_or_all(
    driver: Driver, path: str
) -> admin.ElectionStatus | list[admin.ElectionStatus]:
    """The election at ``path``, or every election under it when it is none itself."""
    paths = await admin.find_elections(driver, path)
    if not paths or paths == [path] or path in paths:
        if path == "/":
            return []
        return await admin.election_status(driver, path, leases=True, tree_size=True)
    return [await admin.election_status(driver, p, leases=True, tree_size=True) for p in paths]


@click.command()
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--limit", type=click.IntRange(1), default=20, show_default=True, help="Terms to show."
)
@click.pass_obj
def history(opts: Options, path: str, as_json: bool, limit: int) -> None:
    """Show the last leaders of the election at PATH: epoch, identity, when each began and
    why (the elector's cause), newest last, and the last refused fence. Each leader records
    its own term once active; the last 100 are kept.

    \b
    Examples:
      ha history /myapp
      ha history /myapp --json | jq '.terms[-1]'
    """
    call(opts, lambda: check_election(path))

    async def read(driver: Driver) -> tuple[bool, History | None]:
        exists = await driver.exists(path) is not None
        found = await read_history(driver, ElectionNodes(path))
        return exists, None if found is None else found[0]

    exists, found = with_driver(opts, read, read_only=True)
    if not exists:
        raise Failure(f"no election at {path} (nothing has run there)")
    terms = () if found is None else found.terms[-limit:]
    failed = None if found is None else found.fence_failure
    if as_json:
        doc = {
            "path": path,
            "terms": [t.to_doc() | {"identity": admin.text(t.identity)} for t in terms],
            "fence_failure": None
            if failed is None
            else failed.to_doc() | {"by": admin.text(failed.by)},
        }
        click.echo(json.dumps(doc, indent=2))
    else:
        print_history(path, terms, failed)


@click.command()
@click.argument("path")
@click.pass_obj
def pause(opts: Options, path: str) -> None:
    """Pause the election at PATH (maintenance mode, as Patroni's): no failover happens.

    While paused, no standby takes the lead, not even when the active's session ends (then
    nobody leads until `ha resume`). The active keeps leading while it holds its session: a
    pause never makes two actives. (`ha run`'s health check and exit policy still act.)
    A pending `ha failover` is cleared (and said so); while the active is already handing
    over, the pause is refused: pause once the new active leads.

    \b
    Examples:
      ha pause /myapp
    """
    call(opts, lambda: check_election(path))

    async def go(driver: Driver) -> admin.Paused:
        try:
            return await admin.pause_election(driver, path)
        except NoNode:
            raise Failure(
                f"no election at {path} (nothing has run there): nothing to pause"
            ) from None

    found, already, cleared = with_driver(opts, go)
    active = (
        f"{admin.text(found.active)!r} stays active (epoch {found.epoch})"
        if found.active is not None
        else "nobody is active: nobody will be until resumed"
    )
    if already:
        click.echo(f"{path}: paused already, by {found.by}; {active}")
    else:
        click.echo(f"{path}: paused: no failover until `ha resume {path}`; {active}")
    if cleared is not None:
        to = "any standby" if cleared.to is None else repr(admin.text(cleared.to))
        click.echo(f"{path}: cleared the pending failover to {to} (asked by {cleared.by or '?'})")


@click.command()
@click.argument("path")
@click.pass_obj
def resume(opts: Options, path: str) -> None:
    """End the pause of the election at PATH: failover works again (a contender first in the
    queue with nobody active takes the lead at once).

    \b
    Examples:
      ha resume /myapp
    """
    call(opts, lambda: check_election(path))
    found = with_driver(opts, lambda driver: admin.resume_election(driver, path))
    if found is None:
        click.echo(f"{path}: not paused")
    else:
        click.echo(f"{path}: resumed (paused by {found.by}): failover works again")


@click.command()
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
@click.option("--count", type=click.IntRange(1), help="Stop after this many lines.")
@click.pass_obj
def watch(opts: Options, path: str, as_json: bool, count: int | None) -> None:
    """Print one line per leader change of the election at PATH, until interrupted.

    The first line is the current leader (or none). An election that does not exist yet is
    said once on stderr, and watched until it appears. When the backend goes away, a line on
    stderr says so and the watch goes on once it is back (it ends only when interrupted, or
    when the backend cannot be reached at the start). Ctrl-C ends it with exit code 130,
    SIGTERM with 0.

    \b
    Examples:
      ha watch /myapp
      ha watch /myapp --json --count 2
    """

    watcher = Watcher(path, count, lambda found: print_leader(found, as_json))

    async def watching() -> None:
        await watcher.run(lambda: open_driver(opts, read_only=True))

    call(opts, lambda: check_election(path))  # a bad path before a missing backend
    # SIGINT or SIGTERM ends the watch (its normal end): exit 130 after SIGINT, 0 after SIGTERM
    run_async(opts, watching, signals=Signals(term=True))


@click.command()
@click.argument("path")
@click.option("--to", "target", metavar="ID", help="The standby to hand over to (default: any).")
@click.option(
    "--cooldown",
    type=float,
    default=admin.DEFAULT_COOLDOWN,
    show_default=True,
    metavar="S",
    help="Seconds the active waits for the target to be next in the queue (and, forced"
    " with no standby, stays out of the election).",
)
@click.option(
    "--timeout",
    type=float,
    default=30.0,
    show_default=True,
    metavar="S",
    help="Seconds to wait for the new active.",
)
@click.option(
    "--confirm",
    type=click.FloatRange(0),
    default=2.0,
    show_default=True,
    metavar="S",
    help="Seconds the new active must stay active (its COMMAND running) to count as done.",
)
@click.option(
    "--force", is_flag=True, help="Ask the active to cede even when no standby can take over."
)
@click.option("--no-wait", is_flag=True, help="Ask and return at once.")
@click.pass_obj
def failover(
    opts: Options,
    path: str,
    target: str | None,
    cooldown: float,
    timeout: float,
    confirm: float,
    force: bool,
    no_wait: bool,
) -> None:
    """Hand the lead over gracefully: the active cedes and a standby takes over.

    The active's `ha run` stops its COMMAND, leaves without fencing and joins the queue
    again at once, at its back: a standby behind the new active (as Patroni's switchover);
    with --to, it cedes once the chosen one is next in the queue, and the standbys ahead of
    it join again behind it. Forced with no standby, it stays out for the cooling period.
    Refused when no standby could take over (unless --force); fails when the new active
    does not stay active for --confirm seconds (e.g. its COMMAND exits at once).
    Exit code 3 when there is no active.

    \b
    Examples:
      ha failover /myapp
      ha failover /myapp --to host-b
    """

    def why_not(now: admin.ElectionStatus) -> str | None:
        """Why ``target`` cannot take over, and when to retry; None: ask admin's message."""
        assert target is not None
        wanted = target.encode()
        if now.active is None or wanted == now.active:
            return None
        members = {m.identity: m for m in now.members}
        others = [
            admin.text(i)
            for i, m in sorted(members.items())
            if i not in (wanted, now.active) and m.state in READY
        ]
        standbys = f"standbys now: {', '.join(others)}" if others else "no other standby now"
        member = members.get(wanted)
        if member is None:
            return (
                f"{target!r} cannot take over {path}: it is not a member (no `ha run --id"
                f" {target}` is connected to {path}); {standbys}"
            )
        if member.state in READY:
            return None
        what = member.state + (f" ({member.note})" if member.note else "")
        return f"{target!r} cannot take over {path} now: it is {what}; {retry(member)}; {standbys}"

    def retry(member: admin.Member) -> str:
        # the supervisor's note says "...: rejoining in 29.5s" as of its last write (``since``)
        found = re.search(r"rejoining in ([0-9.]+)s", member.note)
        if found is None:
            return f"retry when `ha status {path}` shows it standby"
        left = member.since + float(found.group(1)) - time.time()
        return f"retry in {math.ceil(left)}s" if left > 0 else "retry now: it is rejoining"

    async def go(driver: Driver) -> None:
        started = time.monotonic()
        try:
            request = await admin.request_failover(
                driver, path, target, cooldown=cooldown, force=force
            )
        except admin.NoActive as exc:
            raise NoActiveFailure(str(exc)) from None
        except admin.FailoverError:
            why = None if target is None else why_not(await admin.election_status(driver, path))
            if why is None:
                raise
            raise Failure(why) from None
        who = admin.text(request.active)
        to = "any standby" if request.to is None else repr(admin.text(request.to))
        click.echo(f"asked {who!r} (epoch {request.epoch}) to hand {path} over to {to}")
        if no_wait:
            return
        try:
            with anyio.fail_after(timeout):
                found = await admin.wait_for_failover(driver, path, request)
                elapsed = (time.monotonic() - started) * 1000
        except TimeoutError:
            now = await admin.election_status(driver, path)
            held = f"; {admin.text(now.active)!r} is active" if now.active is not None else ""
            raise Failure(f"{to} did not take over {path} within {timeout:g}s{held}") from None
        assert found.active is not None
        if confirm > 0:  # a bound of its own: the confirmation must not eat into --timeout
            new = admin.text(found.active)
            try:
                with anyio.fail_after(confirm + max(confirm, 5.0)):
                    await admin.confirm_failover(driver, path, found, confirm)
            except TimeoutError:
                raise Failure(f"couldn't confirm that {new!r} stays active on {path}") from None
        click.echo(
            f"{path}: {who!r} -> {admin.text(found.active)!r}"
            f" (epoch {request.epoch} -> {found.epoch}) in {elapsed:.0f} ms"
        )

    with_driver(opts, go)


@click.command(name="format")
@click.argument("path")
@click.option(
    "--force",
    is_flag=True,
    help="Clear what no live process holds (queue nodes of no session, old members, failover"
    " requests) even while an active runs; live contenders' nodes and every breadcrumb stay.",
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def format_(opts: Options, path: str, force: bool, yes: bool) -> None:
    """Create the election at PATH, or with --force clear it (like `zkfc -formatZK`).

    Without --force it only creates missing nodes and refuses while a contender is queued.

    \b
    Examples:
      ha format /myapp
      ha format /myapp --force --yes
    """
    if force and not yes:
        found = with_driver(opts, lambda driver: admin.election_status(driver, path))
        if found.exists:
            what = []
            if found.holder is not None:
                what.append(f"leaves the node of {admin.text(found.holder)!r} if it is live")
            detail = "; ".join(what) or "the election holds nothing"
            if not sys.stdin.isatty():
                raise Failure(
                    f"refusing to clear {path} without confirmation ({detail}): add --yes"
                )
            click.confirm(f"Clear the election at {path}? This {detail}.", abort=True, err=True)

    result = with_driver(opts, lambda driver: admin.format_election(driver, path, force=force))
    parts = ["created" if result.created else "exists"]
    if result.removed:
        parts.append(f"cleared {', '.join(result.removed)}")
    if result.holder is not None:
        parts.append(
            f"{admin.text(result.holder)!r} leads and stays active"
            " (stop it, or `ha failover`, to end its term)"
        )
    if result.epoch is not None:
        parts.append(f"epoch {result.epoch} kept")
    click.echo(f"{path}: {'; '.join(parts)}")
