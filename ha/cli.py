"""The ``ha`` command: run, watch and operate elections on any backend.

Every error is one line on stderr and a non-zero exit code (``--debug`` shows the traceback).
Exit codes: 0 ok; 1 error; 2 usage; 3 no active (``status``, ``failover``); 130 interrupted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import anyio
import click

from . import admin
from .drivers import connect
from .drivers.base import Driver
from .errors import ConfigurationError, HAError

__all__ = ("cli", "main")

T = TypeVar("T")

EXIT_NO_ACTIVE = 3
EXIT_INTERRUPTED = 130


# --- errors: one line, or the traceback with --debug -------------------------------------------


class Failure(click.ClickException):
    """An error shown as one line: ``ha: error: ...``."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"ha: error: {self.message}", err=True)


class UsageFailure(Failure):
    exit_code = 2


class NoActiveFailure(Failure):
    exit_code = EXIT_NO_ACTIVE


class Interrupted(Failure):
    exit_code = EXIT_INTERRUPTED


def _cancellation(exc: BaseException) -> bool:
    # asyncio's CancelledError or trio's Cancelled (the loop is gone: no anyio lookup here)
    return isinstance(exc, asyncio.CancelledError) or type(exc).__name__ == "Cancelled"


def _leaf(exc: BaseException) -> BaseException:
    """The error inside task-group exception groups (the first that is not a cancellation)."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not _cancellation(e)]
        exc = (inner or list(exc.exceptions))[0]
    return exc


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        name = exc.filename if exc.filename is not None else ""
        text = f"{exc.strerror}: {name}" if name else exc.strerror
    elif isinstance(exc, TimeoutError) and not str(exc):
        text = "timed out"
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


@dataclass(slots=True)
class Options:
    url: str | None
    url_given: bool  # on the command line (not from HA_URL)
    debug: bool

    def backend_url(self) -> str:
        if self.url:
            return self.url
        try:
            from .drivers.sqlite import default_url
        except ImportError as exc:  # pragma: no cover - the embedded backend ships with ha
            raise ConfigurationError(f"no --url given and no embedded backend: {exc}") from exc
        return default_url()


def _run(opts: Options, fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``fn`` on the event loop; turn any failure into one line and an exit code."""
    backend = os.environ.get("HA_ASYNC_BACKEND", "asyncio")  # tests run the command on trio too
    try:
        return anyio.run(fn, backend=backend)
    except click.exceptions.Exit:
        raise
    except BaseException as exc:
        leaf = _leaf(exc)
        if isinstance(leaf, click.ClickException | click.exceptions.Exit):
            raise leaf from None
        if opts.debug:
            raise
        if isinstance(leaf, KeyboardInterrupt):
            raise Interrupted("interrupted") from None
        if isinstance(leaf, HAError | OSError | TimeoutError):
            raise Failure(_one_line(leaf)) from None
        if isinstance(leaf, Exception):
            raise Failure(
                f"unexpected {type(leaf).__name__}: {_one_line(leaf)} (--debug shows where)"
            ) from None
        raise


def _with_driver(opts: Options, fn: Callable[[Driver], Awaitable[T]]) -> T:
    """Connect to the backend, run ``fn(driver)``, disconnect."""

    async def go() -> T:
        async with connect(opts.backend_url()) as driver:
            return await fn(driver)

    return _run(opts, go)


class _Formatter(logging.Formatter):
    """``12:00:00.123 ha.elector message``; the supervisor's lines say ``ha run ID``."""

    run_as = ""

    def __init__(self) -> None:
        super().__init__("%(asctime)s.%(msecs)03d %(name)s %(message)s", datefmt="%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        if record.name == "ha.supervisor" and self.run_as:
            record.name = f"ha run {self.run_as}:"
        return super().format(record)


_formatter = _Formatter()


def _setup_logging(debug: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_formatter)
    ours = logging.getLogger("ha")
    ours.handlers[:] = [handler]
    ours.propagate = False
    ours.setLevel(logging.DEBUG if debug else logging.WARNING)
    logging.getLogger("ha.supervisor").setLevel(logging.DEBUG if debug else logging.INFO)
    # client libraries (kazoo) log each failed attempt; our error says it once
    other = logging.getLogger()
    other.handlers[:] = [handler if debug else logging.NullHandler()]
    other.setLevel(logging.DEBUG if debug else logging.WARNING)


# --- formatting ---------------------------------------------------------------------------------


def _when(ts: float | None) -> str:
    if ts is None:
        return "?"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
    return f"{stamp} ({_ago(time.time() - ts)} ago)"


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _stamp() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"


def _print_status(status: admin.ElectionStatus, url: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    t = admin.text
    console.print(f"[bold]election[/] {status.path}  [dim]{url}[/]")
    if not status.exists:
        console.print("  does not exist (nothing has run there; `ha format` creates it)")
        return
    if status.active is not None:
        console.print(
            f"  [green]active[/]  {t(status.active)}  epoch {status.epoch}"
            f"  since {_when(status.since)}"
        )
    elif status.holder is not None:
        console.print(f"  [yellow]no active[/]: {t(status.holder)} holds the lock, taking over")
    else:
        console.print("  [yellow]no active[/]")
    if status.epoch is not None and status.active is None:
        console.print(f"  epoch {status.epoch}")
    if status.breadcrumb is not None:
        crumb = status.breadcrumb
        data = f"  data {t(crumb.data)}" if crumb.data else ""
        console.print(f"  breadcrumb  {t(crumb.identity)}  epoch {crumb.epoch}{data}")
    elif status.breadcrumb_raw is not None:
        console.print(f"  breadcrumb  unreadable: {status.breadcrumb_raw[:60]!r}")
    else:
        console.print("  breadcrumb  none (the last active left cleanly, or none ever was)")
    if status.failover is not None and status.failover_pending:
        request = status.failover
        target = "any standby" if request.to is None else t(request.to)
        console.print(f"  failover pending: {t(request.active)} -> {target}")
    for problem in status.problems:
        console.print(f"  [red]problem[/]: {problem}")
    if status.members:
        table = Table(box=None, padding=(0, 2), show_edge=False)
        for column in ("member", "state", "epoch", "host", "pid", "since", "note"):
            table.add_column(column)
        for m in status.members:
            table.add_row(
                t(m.identity),
                m.state,
                "" if m.epoch is None else str(m.epoch),
                m.host,
                str(m.pid or ""),
                _ago(time.time() - m.since) + " ago" if m.since else "",
                m.note,
            )
        console.print(table)


# --- commands -------------------------------------------------------------------------------------

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(context_settings=CONTEXT)
@click.option(
    "--url",
    envvar="HA_URL",
    metavar="URL",
    help="Backend URL (env HA_URL): sqlite:///path/ha.db, zk://host:2181/chroot, memory://NAME."
    " Default: the embedded file under your state directory.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.version_option(package_name="ha", prog_name="ha")
@click.pass_context
def cli(ctx: click.Context, url: str | None, debug: bool) -> None:
    """High availability for services: active/standby leader election with fencing.

    \b
    Examples:
      ha demo                                  # see failover happen, no server needed
      ha run /myapp --id host-a -- ./serve.sh  # run serve.sh only while active
      ha status /myapp
    """
    source = ctx.get_parameter_source("url")
    ctx.obj = Options(url, source is click.core.ParameterSource.COMMANDLINE, debug)
    _setup_logging(debug)


@cli.command()
@click.option(
    "--url", "demo_url", metavar="URL", help="Backend URL (default: a fresh temporary file)."
)
@click.option(
    "--rounds",
    type=click.IntRange(1, 1000),
    default=1,
    show_default=True,
    help="Rounds of (crash the active, hang the next one).",
)
@click.option("--path", default="/demo", show_default=True, help="The election's path.")
@click.pass_obj
def demo(opts: Options, demo_url: str | None, rounds: int, path: str) -> None:
    """Watch three contenders fail over: crash the active, then hang the next one.

    Three contender processes share the embedded backend (a fresh temporary file). The demo
    kills the active (SIGKILL), then freezes the next one (SIGSTOP) past its lease and thaws
    it (SIGCONT) to show it lost its leadership; it prints each failover's latency.
    With --url memory://NAME the three contenders run in this process instead.

    \b
    Examples:
      ha demo
      ha demo --rounds 3
      ha demo --url memory://demo
    """
    from .demo import run_demo

    url = demo_url or (opts.url if opts.url_given else None)
    if not opts.debug:  # the demo tells the story; the elector's warnings are part of it
        logging.getLogger("ha").setLevel(logging.ERROR)
    code = _run(opts, lambda: run_demo(url, path=path, rounds=rounds))
    sys.exit(code)


def _argv(what: str, value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    try:
        argv = tuple(shlex.split(value))
    except ValueError as exc:
        raise Failure(f"cannot parse {what} {value!r}: {exc}") from None
    if not argv:
        raise Failure(f"{what} is empty")
    return argv


def _check_executable(what: str, argv: tuple[str, ...]) -> None:
    if argv and shutil.which(argv[0]) is None:
        raise Failure(f"{what}: command not found or not executable: {argv[0]}")


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("path")
@click.option(
    "--id", "identity", required=True, help="This host's identity in the election (unique)."
)
@click.option(
    "--grace",
    type=float,
    default=0.5,
    show_default=True,
    help="Seconds between SIGTERM and SIGKILL when stopping COMMAND.",
)
@click.option(
    "--fence",
    metavar="CMD",
    help="Command run before taking over from another active (split like a shell"
    " would, but never run by one); the old active is in HA_OLD_IDENTITY,"
    " HA_OLD_EPOCH, HA_OLD_HOST, HA_OLD_PID, HA_OLD_BREADCRUMB_B64;"
    " a non-zero exit refuses the takeover.",
)
@click.option("--fence-timeout", type=float, default=30.0, show_default=True, metavar="S")
@click.option(
    "--health",
    metavar="CMD",
    help="Health check: while it fails, leave the election (HA_STATE tells it"
    " whether COMMAND runs here).",
)
@click.option("--health-interval", type=float, default=2.0, show_default=True, metavar="S")
@click.option("--health-timeout", type=float, default=5.0, show_default=True, metavar="S")
@click.option(
    "--journal", type=click.Path(dir_okay=False), help="Append transitions to this JSON-lines file."
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_obj
def run(
    opts: Options,
    path: str,
    identity: str,
    grace: float,
    fence: str | None,
    fence_timeout: float,
    health: str | None,
    health_interval: float,
    health_timeout: float,
    journal: str | None,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND only while this host is the active of the election at PATH.

    COMMAND starts when this supervisor becomes active and is stopped (SIGTERM to its process
    group, SIGKILL after --grace) before leadership can pass on. If the supervisor dies, even
    by SIGKILL, the kernel kills COMMAND too (Linux). COMMAND gets HA_ELECTION, HA_IDENTITY
    and HA_EPOCH (a fencing token). SIGINT/SIGTERM stop COMMAND and leave the election
    without fencing; `ha failover` asks the active to hand over gracefully.

    \b
    Examples:
      ha run /myapp --id host-a -- python -m myapp.server --port 8080
      ha run /myapp --id host-b --fence './fence-old.sh --force' -- ./serve.sh
      ha --url 'sqlite:///var/lib/myapp/ha.db?session_timeout=10' \\
         run /myapp --id host-c --grace 5 --health './check.sh' -- ./serve.sh
    """
    from .supervisor import Settings, Supervisor

    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageFailure("no COMMAND to run (put it after --)")
    fence_argv = _argv("--fence", fence)
    health_argv = _argv("--health", health)
    _check_executable("COMMAND", command)
    _check_executable("--fence", fence_argv)
    _check_executable("--health", health_argv)
    try:
        settings = Settings(
            path,
            identity,
            command,
            grace=grace,
            fence=fence_argv,
            fence_timeout=fence_timeout,
            health=health_argv,
            health_interval=health_interval,
            health_timeout=health_timeout,
            journal=journal,
        )
    except ConfigurationError as exc:
        raise Failure(str(exc)) from None

    _formatter.run_as = identity

    async def go(driver: Driver) -> None:
        supervisor = Supervisor(driver, settings, handle_signals=True)
        await supervisor.run()

    _with_driver(opts, go)


@cli.command()
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def status(opts: Options, path: str, as_json: bool) -> None:
    """Show the active of the election at PATH, its epoch, breadcrumb and members.

    Exit code 0 when an active exists, 3 when none.

    \b
    Examples:
      ha status /myapp
      ha status /myapp --json | jq .active
    """
    found = _with_driver(opts, lambda driver: admin.election_status(driver, path))
    if as_json:
        click.echo(json.dumps(found.to_json(), indent=2))
    else:
        _print_status(found, opts.backend_url())
    sys.exit(0 if found.active is not None else EXIT_NO_ACTIVE)


@cli.command()
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
@click.option("--count", type=click.IntRange(1), help="Stop after this many lines.")
@click.pass_obj
def watch(opts: Options, path: str, as_json: bool, count: int | None) -> None:
    """Print one line per leader change of the election at PATH, until interrupted.

    The first line is the current leader (or none).

    \b
    Examples:
      ha watch /myapp
      ha watch /myapp --json --count 2
    """

    async def go(driver: Driver) -> None:
        shown = 0
        last: object = ()
        async with aclosing(admin.watch_status(driver, path)) as statuses:
            async for found in statuses:
                if found.leader == last:
                    continue
                last = found.leader
                _print_leader(found, as_json)
                shown += 1
                if count is not None and shown >= count:
                    return

    async def until_signal(driver: Driver) -> None:
        import signal

        async with anyio.create_task_group() as tg:

            async def watching() -> None:
                await go(driver)
                tg.cancel_scope.cancel()

            tg.start_soon(watching)
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    tg.cancel_scope.cancel()  # interrupted: the normal end of a watch
                    break

    _with_driver(opts, until_signal)


def _print_leader(found: admin.ElectionStatus, as_json: bool) -> None:
    active = None if found.active is None else admin.text(found.active)
    if as_json:
        record = {"ts": time.time(), "path": found.path, "active": active, "epoch": found.epoch}
        click.echo(json.dumps(record))
    elif active is not None:
        click.echo(f"{_stamp()} {found.path} active {active} epoch {found.epoch}")
    else:
        click.echo(f"{_stamp()} {found.path} no active")
    sys.stdout.flush()


@cli.command()
@click.argument("path")
@click.option("--to", "target", metavar="ID", help="The standby to hand over to (default: any).")
@click.option(
    "--cooldown",
    type=float,
    default=admin.DEFAULT_COOLDOWN,
    show_default=True,
    metavar="S",
    help="Seconds the old active stays out of the election.",
)
@click.option(
    "--timeout",
    type=float,
    default=30.0,
    show_default=True,
    metavar="S",
    help="Seconds to wait for the new active.",
)
@click.option("--no-wait", is_flag=True, help="Ask and return at once.")
@click.pass_obj
def failover(
    opts: Options, path: str, target: str | None, cooldown: float, timeout: float, no_wait: bool
) -> None:
    """Hand the lead over gracefully: the active cedes and a standby takes over.

    The active's `ha run` stops its COMMAND, leaves without fencing and stays out for the
    cooling period; with --to, the other standbys step aside so the chosen one takes over.
    Exit code 3 when there is no active.

    \b
    Examples:
      ha failover /myapp
      ha failover /myapp --to host-b
    """

    async def go(driver: Driver) -> None:
        started = time.monotonic()
        try:
            request = await admin.request_failover(driver, path, target, cooldown=cooldown)
        except admin.NoActive as exc:
            raise NoActiveFailure(str(exc)) from None
        who = admin.text(request.active)
        to = "any standby" if request.to is None else repr(admin.text(request.to))
        click.echo(f"asked {who!r} (epoch {request.epoch}) to hand {path} over to {to}")
        if no_wait:
            return
        try:
            with anyio.fail_after(timeout):
                found = await admin.wait_for_failover(driver, path, request)
        except TimeoutError:
            raise Failure(f"no new active in {path} after {timeout:g}s") from None
        assert found.active is not None
        elapsed = (time.monotonic() - started) * 1000
        click.echo(
            f"{path}: {who!r} -> {admin.text(found.active)!r}"
            f" (epoch {request.epoch} -> {found.epoch}) in {elapsed:.0f} ms"
        )

    _with_driver(opts, go)


@cli.command(name="format")
@click.argument("path")
@click.option(
    "--force",
    is_flag=True,
    help="Clear the election's nodes (lock, breadcrumb, members, failover), even"
    " while an active holds the lock. The epoch counter is kept.",
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def format_(opts: Options, path: str, force: bool, yes: bool) -> None:
    """Create the election at PATH, or with --force clear it (like `zkfc -formatZK`).

    Without --force it only creates missing nodes and refuses while the lock is held.

    \b
    Examples:
      ha format /myapp
      ha format /myapp --force --yes
    """
    if force and not yes:
        found = _with_driver(opts, lambda driver: admin.election_status(driver, path))
        if found.exists:
            what = []
            if found.holder is not None:
                what.append(f"deposes {admin.text(found.holder)!r}, which holds the lock")
            if found.breadcrumb_raw is not None:
                what.append("removes the breadcrumb (the next active will not fence)")
            detail = "; ".join(what) or "the election holds nothing"
            if not sys.stdin.isatty():
                raise Failure(
                    f"refusing to clear {path} without confirmation ({detail}): add --yes"
                )
            click.confirm(f"Clear the election at {path}? This {detail}.", abort=True, err=True)

    result = _with_driver(opts, lambda driver: admin.format_election(driver, path, force=force))
    parts = ["created" if result.created else "exists"]
    if result.removed:
        cleared = ", ".join(result.removed)
        if result.holder is not None:
            cleared += f" (deposed {admin.text(result.holder)!r})"
        parts.append(f"cleared {cleared}")
    if result.epoch_reset:
        parts.append("the epoch was unreadable: reset to 0")
    elif result.epoch is not None:
        parts.append(f"epoch {result.epoch} kept")
    click.echo(f"{path}: {'; '.join(parts)}")


def main(argv: list[str] | None = None) -> NoReturn:
    """The console script: ``ha``."""
    try:
        cli.main(args=argv, prog_name="ha", standalone_mode=True)
    except Failure as exc:  # raised outside click's handling (e.g. by main's callers)
        exc.show()
        sys.exit(exc.exit_code)
    sys.exit(0)
