"""The ``ha`` command: run, watch and operate elections on any backend.

Every error is one line on stderr and a non-zero exit code (``--debug`` shows the traceback).
Exit codes: 0 ok; 1 error; 2 usage; 3 no active (``status``, ``failover``); 4 overlapping
leadership found (``report``); 130 interrupted.
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
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import anyio
import click

from .. import admin
from ..drivers import connect
from ..drivers.base import Driver
from ..errors import ConfigurationError, HAError

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
            from ..drivers.sqlite.driver import default_url
        except ImportError as exc:  # pragma: no cover - the embedded backend ships with ha
            raise ConfigurationError(f"no --url given and no embedded backend: {exc}") from exc
        return default_url()


def _run(opts: Options, fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``fn`` on the event loop; turn any failure into one line and an exit code."""
    backend = os.environ.get("HA_ASYNC_BACKEND", "asyncio")  # tests run the command on trio too
    return _call(opts, lambda: anyio.run(fn, backend=backend))


def _call(opts: Options, fn: Callable[[], T]) -> T:
    """Call ``fn``; turn any failure into one line and an exit code."""
    try:
        return fn()
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
      ha demo --pipeline                       # the PySpark job manager (ha[spark])
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
    help="Rounds of (crash the active, hang the next one); with --pipeline, how many times"
    " the active job manager is killed (1 or 2).",
)
@click.option("--path", default="/demo", show_default=True, help="The election's path.")
@click.option(
    "--pipeline",
    "pipeline_demo",
    is_flag=True,
    help="The PySpark job manager demo instead (needs ha[spark] and Java).",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    help="With --pipeline: keep the data, outputs, journals and logs here"
    " (default: a temporary directory, removed at the end).",
)
@click.pass_obj
def demo(
    opts: Options,
    demo_url: str | None,
    rounds: int,
    path: str,
    pipeline_demo: bool,
    workdir: str | None,
) -> None:
    """Watch three contenders fail over: crash the active, then hang the next one.

    Three contender processes share the embedded backend (a fresh temporary file). The demo
    kills the active (SIGKILL), then freezes the next one (SIGSTOP) past its lease and thaws
    it (SIGCONT) to show it lost its leadership; it prints each failover's latency.
    With --url memory://NAME the three contenders run in this process instead.

    With --pipeline: three job manager processes (each with a warm SparkSession, local[2]) on
    a fresh embedded file, a click-stream sessionization job submitted, the active killed
    (SIGKILL) in the middle of the job (--rounds 2: twice), the job finishing on the new
    active, its output compared byte for byte with an uninterrupted run of the same job, and
    the recovery time printed (from the kill to the next batch starting on the new active).
    Exit code 0 only if the output is identical. It takes under a minute.

    \b
    Examples:
      ha demo
      ha demo --rounds 3
      ha demo --url memory://demo
      ha demo --pipeline
      ha demo --pipeline --rounds 2 --workdir ./pipeline-demo
    """
    if pipeline_demo:
        ctx = click.get_current_context()
        if ctx.get_parameter_source("path") is click.core.ParameterSource.COMMANDLINE:
            raise UsageFailure("--path does not go with --pipeline (its election is the cluster's)")
        if demo_url or opts.url_given:
            raise UsageFailure("--pipeline runs on a fresh embedded file: no --url")
        _pipeline_demo(opts, rounds, workdir)
        return
    if workdir is not None:
        raise UsageFailure("--workdir goes with --pipeline")
    from ..demo import run_demo

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

    COMMAND starts when this supervisor becomes active and is stopped, with everything it
    started (SIGTERM, SIGKILL after --grace), before leadership can pass on. If the supervisor
    dies, even by SIGKILL, a guard process kills COMMAND's whole tree, daemons that left its
    process group included (Linux). An --id already running is refused. COMMAND gets
    HA_ELECTION, HA_IDENTITY and HA_EPOCH (a fencing token). SIGINT/SIGTERM stop COMMAND and leave the election
    without fencing; `ha failover` asks the active to hand over gracefully.

    \b
    Examples:
      ha run /myapp --id host-a -- python -m myapp.server --port 8080
      ha run /myapp --id host-b --fence './fence-old.sh --force' -- ./serve.sh
      ha --url 'sqlite:///var/lib/myapp/ha.db?session_timeout=10' \\
         run /myapp --id host-c --grace 5 --health './check.sh' -- ./serve.sh
    """
    from ..supervisor import Settings, Supervisor

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

    The active's `ha run` stops its COMMAND, leaves without fencing and stays out for the
    cooling period; with --to, the other standbys step aside so the chosen one takes over.
    Refused when no standby could take over (unless --force); fails when the new active
    does not stay active for --confirm seconds (e.g. its COMMAND exits at once).
    Exit code 3 when there is no active.

    \b
    Examples:
      ha failover /myapp
      ha failover /myapp --to host-b
    """

    async def go(driver: Driver) -> None:
        started = time.monotonic()
        try:
            request = await admin.request_failover(
                driver, path, target, cooldown=cooldown, force=force
            )
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

    _with_driver(opts, go)


@cli.command(name="format")
@click.argument("path")
@click.option(
    "--force",
    is_flag=True,
    help="Clear what no live process holds (a stale lock, old members, failover requests)"
    " even while an active runs; its lock, the breadcrumb and the epoch counter stay.",
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
                what.append(f"leaves the lock of {admin.text(found.holder)!r} if it is live")
            detail = "; ".join(what) or "the election holds nothing"
            if not sys.stdin.isatty():
                raise Failure(
                    f"refusing to clear {path} without confirmation ({detail}): add --yes"
                )
            click.confirm(f"Clear the election at {path}? This {detail}.", abort=True, err=True)

    result = _with_driver(opts, lambda driver: admin.format_election(driver, path, force=force))
    parts = ["created" if result.created else "exists"]
    if result.removed:
        parts.append(f"cleared {', '.join(result.removed)}")
    if result.holder is not None:
        parts.append(
            f"{admin.text(result.holder)!r} holds the lock and stays active"
            " (stop it, or `ha failover`, to end its term)"
        )
    if result.epoch_reset:
        parts.append("the epoch was unreadable: reset to 0")
    elif result.epoch is not None:
        parts.append(f"epoch {result.epoch} kept")
    click.echo(f"{path}: {'; '.join(parts)}")


# --- pipelines on Spark: ha jobs, ha report, ha demo --pipeline -----------------------------------

EXIT_OVERLAP = 4
DEFAULT_CLUSTER = "default"
# what `pip install 'ha[spark]'` brings: a missing one is an installation problem, said so
SPARK_MODULES = frozenset({"pyspark", "py4j", "pandas", "pyarrow", "numpy", "matplotlib"})
SPARK_HINT = "install ha[spark] (pip install 'ha[spark]')"


def _need_spark(what: str) -> None:
    """Refuse at once, in one line, when PySpark or Java is missing (not after a traceback)."""
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise Failure(
            f"{what} needs PySpark, which is not installed ({exc}): {SPARK_HINT}"
        ) from None
    from ..pipeline.spark import prepare_environment

    try:
        prepare_environment()  # finds Java (JAVA_HOME, or the usual place) for the JVM
    except ConfigurationError as exc:
        raise Failure(f"{what} needs Java for Spark: {exc}") from None
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        raise Failure(f"{what} needs Java 17 for Spark: set JAVA_HOME or put java on PATH")


def _check_master(master: str) -> None:
    """Spark's own rule, checked before a JVM starts (a job manager whose Spark cannot start
    would be elected again and again)."""
    if master != "yarn" and not master.startswith(("local", "spark://", "k8s://")):
        raise UsageFailure(
            f"--master {master!r}: Spark takes local[N], spark://HOST:PORT, yarn or k8s://URL"
        )


def _spark_failure(exc: BaseException) -> Failure | None:
    """One line for a missing Spark dependency or an error raised by Spark, else None."""
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] in SPARK_MODULES:
        return Failure(f"{exc}: {SPARK_HINT}")
    if type(exc).__module__.split(".")[0] in ("pyspark", "py4j"):
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        first = lines[0] if lines else type(exc).__name__
        if len(first) > 300:
            first = first[:297] + "..."
        return Failure(f"Spark: {first} (--debug shows more)")
    return None


def _spark_call(opts: Options, fn: Callable[[], T]) -> T:
    """``_call`` for work on Spark (after ``_need_spark``): its errors in one line."""

    def call() -> T:
        try:
            return fn()
        except BaseException as exc:
            failure = None if opts.debug else _spark_failure(_leaf(exc))
            if failure is not None:
                raise failure from None
            raise

    return _call(opts, call)


def _spark_run(opts: Options, fn: Callable[[], Awaitable[T]]) -> T:
    """``_run`` for work on Spark (see ``_spark_call``)."""
    backend = os.environ.get("HA_ASYNC_BACKEND", "asyncio")
    return _spark_call(opts, lambda: anyio.run(fn, backend=backend))


def _default_blobs(url: str) -> Path:
    """``blobs/`` next to the sqlite file of ``url``; for other backends, in the state
    directory (beside the default sqlite file)."""
    from urllib.parse import unquote, urlsplit

    from ..drivers.sqlite.driver import default_path

    parts = urlsplit(url)
    if parts.scheme == "sqlite" and parts.path:
        return Path(unquote(parts.path)).expanduser().absolute().parent / "blobs"
    return default_path().parent / "blobs"


@dataclass(slots=True)
class JobsOptions:
    opts: Options
    cluster: str
    blobs_given: str | None

    @property
    def url(self) -> str:
        return self.opts.backend_url()

    @property
    def blobs(self) -> str:
        if self.blobs_given:
            return str(Path(self.blobs_given).expanduser().absolute())
        return str(_default_blobs(self.url))

    def blob_hint(self) -> str:
        return (
            f"(plans and checkpoints are in the job managers' blob directory: is it {self.blobs}?"
            " give it with --blobs or HA_BLOBS)"
        )

    async def reading(self, fn: Callable[[], Awaitable[T]]) -> T:
        """``fn()``; a missing blob (another blob directory than the job managers') says so."""
        from ..errors import CorruptData

        try:
            return await fn()
        except CorruptData as exc:
            if "blob" not in str(exc):
                raise
            raise Failure(f"{exc} {self.blob_hint()}") from None


def _cluster_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--cluster and --blobs, for every `ha jobs` command."""
    fn = click.option(
        "--blobs",
        metavar="DIR",
        envvar="HA_BLOBS",
        help="The cluster's blob directory, shared by its job managers: plans and checkpoints"
        " (env HA_BLOBS). Default: blobs/ next to the backend's sqlite file (with the default"
        " backend: the state directory's blobs/, e.g. ~/.local/state/ha/blobs); other backends:"
        " the state directory's blobs/ (give a shared directory when job managers run on"
        " several hosts).",
    )(fn)
    fn = click.option(
        "--cluster",
        default=DEFAULT_CLUSTER,
        show_default=True,
        metavar="ID",
        envvar="HA_CLUSTER",
        help="The job manager cluster (env HA_CLUSTER): its election and stores live under /ha/ID.",
    )(fn)
    return fn


def _jobs_options(opts: Options, cluster: str, blobs: str | None) -> JobsOptions:
    from ..stores.layout import check_name

    try:
        check_name("cluster id", cluster)
    except ConfigurationError as exc:
        raise UsageFailure(str(exc)) from None
    return JobsOptions(opts, cluster, blobs)


async def _active_manager(driver: Driver, cluster: str) -> str | None:
    """The identity of the cluster's active job manager, if any."""
    from ..pipeline.layout import JobLayout

    found = await admin.election_status(driver, JobLayout(cluster).election)
    return None if found.active is None else admin.text(found.active)


async def _cancel_requested(driver: Driver, cluster: str, job_id: str) -> bool:
    from ..pipeline.layout import JobLayout

    return await driver.exists(JobLayout(cluster).cancel(job_id)) is not None


def _batches(status: Any) -> str:
    total = "?" if status.batches is None else str(status.batches)
    return f"{status.batches_done}/{total}"


def _status_json(status: Any, cancel_requested: bool) -> dict[str, Any]:
    doc: dict[str, Any] = status.to_json()
    doc["cancel_requested"] = cancel_requested and not status.finished
    return doc


def _print_job(status: Any, cancel_requested: bool) -> None:
    color = {"succeeded": "green", "failed": "red", "cancelled": "yellow"}.get(status.state)
    state = click.style(status.state, fg=color) if color else status.state
    click.echo(f"job {status.job_id}  {state}  {status.pipeline or '?'}")
    click.echo(f"  batches  {_batches(status)} committed")
    if status.output:
        click.echo(f"  output   {status.output}")
    if status.error:
        click.echo(f"  error    {status.error}")
    if cancel_requested and not status.finished:
        click.echo("  cancel requested (the active job manager acts on it)")


@cli.group(context_settings=CONTEXT)
def jobs() -> None:
    """Submit, list, watch and cancel PySpark pipeline jobs; run a job manager.

    Job managers (`ha jobs manager`, one per host or process) elect an active among them,
    which runs the submitted jobs on Spark batch by batch, checkpointing after each committed
    batch; when it dies, a standby takes over and resumes from the last checkpoint, and the
    output is the same as that of an uninterrupted run. The commands here need no running job
    manager: a submission waits in the cluster's inbox for the next active.

    \b
    Examples:
      ha jobs manager --id jm-1 &              # on each host (or twice on one)
      ha jobs submit clicks.sessionize -p input=./clicks --output ./sessions --wait
      ha jobs list
      ha jobs status clicks.sessionize-4f2a9c1b3e
      ha jobs cancel clicks.sessionize-4f2a9c1b3e
    """


@jobs.command()
@click.argument("pipeline")
@click.option(
    "-p",
    "--param",
    "params",
    multiple=True,
    metavar="NAME=VALUE",
    help="A parameter of the pipeline (repeatable); the value is converted to its type.",
)
@click.option(
    "--output",
    "-o",
    required=True,
    metavar="DIR",
    help="Output directory: new or empty, local or shared (file:// URIs too).",
)
@click.option("--job-id", metavar="ID", help="The job's id (default: PIPELINE-<random hex>).")
@click.option(
    "--max-attempts",
    type=int,
    default=3,
    show_default=True,
    metavar="N",
    help="Failed attempts (batch failures, over the whole job and its failovers)"
    " before the job is failed for good.",
)
@click.option(
    "--import",
    "imports",
    multiple=True,
    metavar="MODULE",
    help="Module that registers the pipeline (repeatable); the job managers need it too.",
)
@_cluster_options
@click.option("--wait", is_flag=True, help="Wait for the job to finish; exit 1 if it fails.")
@click.option(
    "--timeout", type=float, metavar="S", help="With --wait: give up waiting after S seconds."
)
@click.pass_obj
def submit(
    opts: Options,
    pipeline: str,
    params: tuple[str, ...],
    output: str,
    job_id: str | None,
    max_attempts: int,
    imports: tuple[str, ...],
    cluster: str,
    blobs: str | None,
    wait: bool,
    timeout: float | None,
) -> None:
    """Submit a job: run the registered PIPELINE with parameters, writing to --output.

    The job is checked in full here (pipeline known, parameters valid, batches listed, output
    new or empty): a malformed job is refused with the reason, and never reaches a job
    manager. The batch list is fixed now. Pipelines shipped: clicks.sessionize (input: a
    directory of Parquet click files), journal.intervals; others come with --import or the
    `ha.pipelines` entry point group. Prints the job id.

    \b
    Examples:
      ha jobs submit clicks.sessionize -p input=/data/clicks --output /data/sessions
      ha jobs submit clicks.sessionize -p input=./clicks -p gap_seconds=900 \\
         --output ./sessions --job-id daily-2024-05-01 --max-attempts 5 --wait
      ha jobs submit mine.etl --import mypkg.pipelines -p day=2024-05-01 -o /shared/out
    """
    from ..pipeline import make_plan, parse_params
    from ..pipeline.jobs import submit_job
    from ..pipeline.registry import import_pipelines

    jo = _jobs_options(opts, cluster, blobs)
    try:
        values = parse_params(params)
    except ConfigurationError as exc:
        raise UsageFailure(f"-p: {exc}") from None
    if timeout is not None and not wait:
        raise UsageFailure("--timeout goes with --wait")

    def check() -> Any:
        import_pipelines(imports)
        try:
            return make_plan(pipeline, values, output, job_id=job_id, max_attempts=max_attempts)
        except ConfigurationError as exc:
            raise Failure(f"job refused: {exc}") from None

    plan = _call(opts, check)

    async def go(driver: Driver) -> Any:
        await submit_job(driver, jo.cluster, plan)
        click.echo(
            f"submitted job {plan.job_id} to cluster {jo.cluster!r}: {plan.pipeline},"
            f" {len(plan.batches)} batches, output {plan.output}"
        )
        if await _active_manager(driver, jo.cluster) is None:
            click.echo(
                f"no job manager is active in cluster {jo.cluster!r}: the job waits for one"
                " (`ha jobs manager --id NAME`)"
            )
        sys.stdout.flush()
        if not wait:
            return None
        return await _wait_job(driver, jo, plan.job_id, timeout)

    status = _with_driver(opts, go)
    if status is not None:
        _finished(status)


async def _wait_job(driver: Driver, jo: JobsOptions, job_id: str, within: float | None) -> Any:
    from ..pipeline.jobs import job_status, wait_for_job

    try:
        with anyio.fail_after(within):
            return await jo.reading(
                lambda: wait_for_job(driver, jo.cluster, job_id, blobs=jo.blobs)
            )
    except TimeoutError:
        now = await jo.reading(lambda: job_status(driver, jo.cluster, job_id, blobs=jo.blobs))
        raise Failure(
            f"job {job_id} not finished after {within:g}s (still {now.state},"
            f" {_batches(now)} batches); it goes on: `ha jobs status {job_id}`"
        ) from None


def _finished(status: Any) -> None:
    line = f"job {status.job_id} {status.state}: {_batches(status)} batches"
    if status.output:
        line += f", output {status.output}"
    click.echo(line)
    if status.state != "succeeded":
        raise Failure(
            f"job {status.job_id} {status.state}" + (f": {status.error}" if status.error else "")
        )


@jobs.command(name="list")
@_cluster_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON (a list of jobs).")
@click.pass_obj
def list_(opts: Options, cluster: str, blobs: str | None, as_json: bool) -> None:
    """List the cluster's jobs: submitted, pending, running and finished ones.

    \b
    Examples:
      ha jobs list
      ha jobs list --cluster nightly --json | jq '.[] | select(.state == "failed")'
    """
    from ..pipeline.jobs import list_jobs

    jo = _jobs_options(opts, cluster, blobs)

    async def go(driver: Driver) -> list[tuple[Any, bool]]:
        found = await list_jobs(driver, jo.cluster, blobs=jo.blobs)
        return [(s, await _cancel_requested(driver, jo.cluster, s.job_id)) for s in found]

    found = _with_driver(opts, go)
    if any(s.error and "blob" in s.error and s.state == "unknown" for s, _ in found):
        click.echo(f"ha: note: plans not found {jo.blob_hint()}", err=True)
    if as_json:
        click.echo(json.dumps([_status_json(s, c) for s, c in found], indent=2))
        return
    if not found:
        click.echo(f"no jobs in cluster {jo.cluster!r}")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, padding=(0, 2), show_edge=False)
    for column in ("job", "state", "pipeline", "batches", "output", "note"):
        table.add_column(column)
    for s, cancel in found:
        note = s.error or ("cancel requested" if cancel and not s.finished else "")
        table.add_row(s.job_id, s.state, s.pipeline or "", _batches(s), s.output or "", note)
    Console(highlight=False).print(table)


@jobs.command(name="status")
@click.argument("job_id")
@_cluster_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def job_status_(opts: Options, job_id: str, cluster: str, blobs: str | None, as_json: bool) -> None:
    """Show a job's state (submitted, pending, running, succeeded, failed, cancelled), its
    committed batches, output and error.

    Exit code 0 for any known job, 1 for an unknown one.

    \b
    Examples:
      ha jobs status daily-2024-05-01
      ha jobs status daily-2024-05-01 --json | jq -r .state
    """
    from ..pipeline.jobs import job_status

    jo = _jobs_options(opts, cluster, blobs)

    async def go(driver: Driver) -> tuple[Any, bool]:
        found = await jo.reading(lambda: job_status(driver, jo.cluster, job_id, blobs=jo.blobs))
        return found, await _cancel_requested(driver, jo.cluster, job_id)

    found, cancel = _with_driver(opts, go)
    if as_json:
        click.echo(json.dumps(_status_json(found, cancel), indent=2))
    else:
        _print_job(found, cancel)


@jobs.command()
@click.argument("job_id")
@_cluster_options
@click.pass_obj
def cancel(opts: Options, job_id: str, cluster: str, blobs: str | None) -> None:
    """Ask the active job manager to cancel a job (a finished job stays as it is).

    The running batch is abandoned (its Spark jobs cancelled, its output never committed);
    the batches already committed stay. The request is kept until an active acts on it.

    \b
    Examples:
      ha jobs cancel daily-2024-05-01
      ha jobs cancel daily-2024-05-01 --cluster nightly
    """
    from ..pipeline.jobs import cancel_job, job_status

    jo = _jobs_options(opts, cluster, blobs)

    async def go(driver: Driver) -> None:
        found = await jo.reading(lambda: job_status(driver, jo.cluster, job_id, blobs=jo.blobs))
        if found.finished:
            click.echo(f"job {job_id} already {found.state}: nothing to cancel")
            return
        await cancel_job(driver, jo.cluster, job_id)
        active = await _active_manager(driver, jo.cluster)
        who = (
            f"the active job manager ({active})"
            if active is not None
            else "the next active job manager (none is active now)"
        )
        click.echo(f"asked {who} to cancel job {job_id} ({found.state})")

    _with_driver(opts, go)


def _print_event(name: str, fields: dict[str, Any]) -> None:
    """A job manager's event as one line: ``12:00:00.123 jm-1 batch_committed job=x batch=3``."""
    fields = dict(fields)
    t = float(fields.pop("t", time.time()))
    who = fields.pop("identity", "?")
    stamp = time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d}"
    parts = []
    for key, value in fields.items():
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        parts.append(f"{key}={text}")
    click.echo(" ".join([stamp, str(who), name, *parts]))
    sys.stdout.flush()


def _print_event_json(name: str, fields: dict[str, Any]) -> None:
    click.echo(json.dumps({"event": name, **fields}, default=str))
    sys.stdout.flush()


@jobs.command()
@click.option(
    "--id", "identity", required=True, help="This job manager's identity in the cluster (unique)."
)
@_cluster_options
@click.option(
    "--master",
    default="local[2]",
    show_default=True,
    help="spark.master: local[N], spark://HOST:PORT, yarn or k8s://URL.",
)
@click.option(
    "--hot-standby/--cold",
    default=True,
    show_default=True,
    help="Build the SparkSession at start, so a takeover does not wait for Spark (hot), or"
    " only when elected (cold: no JVM held while standby).",
)
@click.option(
    "--import",
    "imports",
    multiple=True,
    metavar="MODULE",
    help="Module that registers pipelines (repeatable).",
)
@click.option(
    "--journal", type=click.Path(dir_okay=False), help="Append transitions to this JSON-lines file."
)
@click.option("--json", "as_json", is_flag=True, help="Print events as JSON lines.")
@click.pass_obj
def manager(
    opts: Options,
    identity: str,
    cluster: str,
    blobs: str | None,
    master: str,
    hot_standby: bool,
    imports: tuple[str, ...],
    journal: str | None,
    as_json: bool,
) -> None:
    """Run one job manager of the cluster until SIGTERM or Ctrl-C.

    It joins the cluster's job manager election; while active it runs the submitted jobs on
    Spark, batch by batch, from their last checkpoint. Run several (on several hosts, sharing
    the backend and the --blobs directory, and the job outputs' file system) so that one takes
    over when the active dies. Prints one line per event (elected, batch committed, job
    finished...). SIGTERM or Ctrl-C leaves the election gracefully: a standby takes over at
    once.

    \b
    Examples:
      ha jobs manager --id jm-1
      ha jobs manager --id jm-2 --master 'local[4]' --journal jm-2.jsonl
      ha --url zk://zk1:2181,zk2:2181/ha jobs manager --id host-a \\
         --blobs /shared/ha-blobs --master spark://spark-master:7077 --import mypkg.pipelines
    """
    from ..pipeline import run_job_manager
    from ..pipeline.spark import SparkSettings

    jo = _jobs_options(opts, cluster, blobs)
    _check_master(master)
    _need_spark("`ha jobs manager`")
    try:
        settings = SparkSettings(master=master, app_name=f"ha-jobmanager-{identity}")
    except ConfigurationError as exc:
        raise UsageFailure(str(exc)) from None
    _formatter.run_as = identity

    def go() -> Awaitable[None]:
        return run_job_manager(
            jo.url,
            jo.cluster,
            identity=identity,
            blobs=jo.blobs,
            imports=imports,
            spark=settings,
            hot_standby=hot_standby,
            journal=journal,
            on_event=_print_event_json if as_json else _print_event,
        )

    _spark_run(opts, go)


@cli.command()
@click.argument("journals", nargs=-1, required=True, metavar="JOURNALS...")
@click.option(
    "--out",
    default="report.html",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="The HTML report to write (plots embedded).",
)
@click.option(
    "--master",
    default="local[2]",
    show_default=True,
    help="spark.master: local[N], spark://HOST:PORT, yarn or k8s://URL.",
)
@click.option(
    "--driver-memory",
    default="2g",
    show_default=True,
    metavar="SIZE",
    help="spark.driver.memory (the JVM's heap with local[N]).",
)
@click.pass_obj
def report(
    opts: Options, journals: tuple[str, ...], out: str, master: str, driver_memory: str
) -> None:
    """Analyze election journals on Spark: leadership, failovers, overlaps, availability.

    JOURNALS are the JSON-lines files that `ha run --journal` and electors write: files,
    directories, globs, or any URI Spark reads (hdfs://, s3a://...). Per election: leadership
    intervals, each failover's gap (no active to new active), overlapping leadership between
    identities (two actives at once: must never happen), epochs, availability, transitions per
    hour. Prints the summary table and writes the HTML report with plots.

    Exit code 0 when no overlapping leadership was found, 4 when some was (the report shows
    where), 1 on error.

    \b
    Examples:
      ha report journal-*.jsonl --out report.html
      ha report /var/log/ha/ --out /tmp/ha-report.html --master 'local[4]'
      ha report 's3a://logs/ha/*.jsonl' --master spark://spark-master:7077 || echo "overlap!"
    """
    import glob

    from ..report import run_report

    _check_master(master)
    _need_spark("`ha report`")
    for path in journals:  # local paths checked here, not after Spark's start-up
        if "://" in path:
            continue
        local = os.path.expanduser(path)
        if any(c in path for c in "*?["):
            if not glob.glob(local):
                raise Failure(f"no journal matches {path!r}")
        elif not os.path.exists(local):
            raise Failure(f"no such journal: {path}")
    target = Path(out).expanduser()
    if not target.absolute().parent.is_dir():
        raise Failure(f"cannot write {out}: no directory {target.absolute().parent}")

    from rich.console import Console

    found = _spark_call(
        opts,
        lambda: run_report(
            list(journals),
            target,
            master=master,
            driver_memory=driver_memory,
            console=Console(highlight=False),
        ),
    )
    click.echo(f"wrote {out} ({found.events:,} events in {found.seconds:.1f} s)")
    if found.overlap_count:
        click.echo(
            f"OVERLAP: {found.overlap_count:,} overlapping leadership interval(s),"
            " two actives at once (see the report)"
        )
        sys.exit(EXIT_OVERLAP)
    click.echo("no overlapping leadership")


def _pipeline_demo(opts: Options, rounds: int, workdir: str | None) -> None:
    """`ha demo --pipeline`: see ``ha.pipeline.demo.run_pipeline_demo``."""
    import tempfile

    from ..pipeline.demo import run_pipeline_demo

    if rounds > 2:
        raise UsageFailure("--pipeline kills the active at most twice (--rounds 1 or 2)")
    if not opts.debug:  # the demo tells the story; the elector's warnings are part of it
        logging.getLogger("ha").setLevel(logging.ERROR)

    def say(line: str) -> None:
        click.echo(f"{_stamp()[11:]} {line}")
        sys.stdout.flush()

    _need_spark("`ha demo --pipeline`")

    def run_in(directory: str) -> Any:
        say(f"pipeline demo in {directory}")
        return _spark_run(
            opts,
            lambda: run_pipeline_demo(directory, kills=rounds, processes=3, say=say),
        )

    if workdir is not None:
        os.makedirs(workdir, exist_ok=True)
        result = run_in(os.path.abspath(workdir))
    else:  # removed when the demo succeeds; kept, with the processes' logs, when it fails
        tmp = tempfile.mkdtemp(prefix="ha-pipeline-demo-")
        try:
            result = run_in(tmp)
        except Interrupted:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        except Failure as exc:
            raise type(exc)(f"{exc.message} (the processes' logs are in {tmp})") from None
        if result.identical:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            workdir = tmp
    if not result.identical:
        raise Failure(
            f"the job's output differs from the uninterrupted run (job {result.status.state},"
            f" reference {result.reference.state}; everything is in {workdir})"
        )
    kills = len(result.kills)
    recoveries = ", ".join(f"{who} {seconds:.2f} s" for who, seconds in result.kills)
    click.echo(
        f"ok: the job {result.status.state} despite {kills} SIGKILL{'s' if kills > 1 else ''}"
        f" of the active; recovery (kill to the next batch on the new active): {recoveries};"
        f" output identical, byte for byte, to the uninterrupted run (sha256"
        f" {result.digest[:16]}...)"
    )


def main(argv: list[str] | None = None) -> NoReturn:
    """The console script: ``ha``."""
    try:
        cli.main(args=argv, prog_name="ha", standalone_mode=True)
    except Failure as exc:  # raised outside click's handling (e.g. by main's callers)
        exc.show()
        sys.exit(exc.exit_code)
    sys.exit(0)
