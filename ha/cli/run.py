"""``ha run``: the command that takes part in an election, running COMMAND while active.

The supervisor (``ha.supervisor``) does the work; this module turns the command line (or the
config file's ``[run]`` table) into its ``Settings`` and refuses bad ones in one line before
anything connects. The options for a COMMAND that exits and for a backend that blips follow
the rules of ``ha/supervisor/exits.py`` (``--on-exit``, ``--max-restarts``) and
``ha/supervisor/settings.py`` (``timing_for``: ``--hold-on-disconnect``).
"""

from __future__ import annotations

import shlex
import shutil
import sys
from collections.abc import Callable
from typing import Any

import click

from ..election.names import MAX_PRIORITY, check_priority
from ..errors import ConfigurationError
from ..http import parse_address
from ..supervisor.abort import trace_aborts
from ..supervisor.exits import OnExit
from ._reach import reach_driver
from ._run import Failure, Options, Signals, UsageFailure, http_option, run_as
from ._run import run as run_async

__all__ = ("run",)


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


@click.command(context_settings={"ignore_unknown_options": True})
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
    "--fence-retry-max",
    type=float,
    default=30.0,
    show_default=True,
    metavar="S",
    help="A refused fence never ends `ha run`: it is tried again after 0.5s, 1s, 2s... at most"
    " S seconds apart (a fencing device that is down is not hammered), and said in the log,"
    " `ha status` and the metrics.",
)
@click.option(
    "--require-fence",
    is_flag=True,
    help="Refuse to start without --fence (as Hadoop's ZKFC does): for a COMMAND whose side"
    " effects no epoch can fence.",
)
@click.option(
    "--health",
    metavar="CMD",
    help="Health check: when it fails --health-failures times in a row, leave the election"
    " until it passes (HA_STATE tells it whether COMMAND runs here).",
)
@click.option("--health-interval", type=float, default=2.0, show_default=True, metavar="S")
@click.option("--health-timeout", type=float, default=5.0, show_default=True, metavar="S")
@click.option(
    "--health-failures",
    type=int,
    default=3,
    show_default=True,
    metavar="N",
    help="Failed health checks in a row before leaving the election (as a Kubernetes"
    " probe's failureThreshold); one pass brings this host back.",
)
@click.option(
    "--priority",
    type=int,
    default=0,
    show_default=True,
    metavar="N",
    help="Preferred leader: after a failover, the active hands the lead back (gracefully, as"
    " `ha failover --to`) to a standby of a higher priority once it has been in the queue"
    " for --settle seconds. 0: no preference.",
)
@click.option(
    "--settle",
    type=float,
    default=10.0,
    show_default=True,
    metavar="S",
    help="While this host is active: seconds a standby of a higher --priority must stay in the"
    " queue before it gets the lead (a flapping host rejoins with a new node and starts again).",
)
@click.option(
    "--journal", type=click.Path(dir_okay=False), help="Append transitions to this JSON-lines file."
)
@http_option
@run_policy_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_obj
def run(
    opts: Options,
    path: str,
    identity: str,
    grace: float,
    fence: str | None,
    fence_timeout: float,
    fence_retry_max: float,
    require_fence: bool,
    health: str | None,
    health_interval: float,
    health_timeout: float,
    health_failures: int,
    priority: int,
    settle: float,
    journal: str | None,
    http: str | None,
    on_exit: str,
    max_restarts: int,
    hold_on_disconnect: float,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND only while this host is the active of the election at PATH.

    COMMAND starts when this supervisor becomes active and is stopped, with everything it
    started (SIGTERM, SIGKILL after --grace), before leadership can pass on. If the supervisor
    dies, even by SIGKILL, a guard process kills COMMAND's whole tree, daemons that left its
    process group included (Linux). An --id already running is refused. COMMAND gets
    HA_ELECTION, HA_IDENTITY and HA_EPOCH (a fencing token). SIGINT/SIGTERM stop COMMAND and leave the election
    without fencing (then exit 130 after SIGINT, 0 after SIGTERM; a second signal kills COMMAND
    at once); `ha failover` asks the active to hand over gracefully. A backend that
    cannot be reached at start is tried again, with one log line per try, until it can.

    \b
    Examples:
      ha run /myapp --id host-a -- python -m myapp.server --port 8080
      ha run /myapp --id host-b --fence './fence-old.sh --force' -- ./serve.sh
      ha run /myapp --id host-a --priority 10 -- ./serve.sh    # host-a preferred
      ha --url 'sqlite:///var/lib/myapp/ha.db?session_timeout=10' \\
         run /myapp --id host-c --grace 5 --health './check.sh' -- ./serve.sh
    """
    import anyio

    from ..supervisor import Settings, Supervisor
    from ..supervisor.exits import OnExit
    from ..supervisor.systemd import Notifier

    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageFailure("no COMMAND to run (put it after --)")
    if require_fence and not fence:
        # before anything connects: nothing is joined, no member node is written
        raise UsageFailure("--require-fence: no --fence CMD given, refusing to start")
    try:
        check_priority(priority)
    except ConfigurationError:
        raise UsageFailure(f"--priority must be from 0 (no preference) to {MAX_PRIORITY}") from None
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
            fence_retry_max=fence_retry_max,
            health=health_argv,
            health_interval=health_interval,
            health_timeout=health_timeout,
            health_failures=health_failures,
            journal=journal,
            priority=priority,
            settle=settle,
            http=parse_address(http) if http else None,
            on_exit=OnExit(on_exit),
            max_restarts=max_restarts,
            hold_on_disconnect=hold_on_disconnect,
        )
    except ConfigurationError as exc:
        raise Failure(str(exc)) from None

    run_as(identity)
    # SIGINT and SIGTERM stop COMMAND and leave the election; after SIGINT ha run exits 130
    signals = Signals(term=True)

    # under systemd (Type=notify): readiness, status and the watchdog's keep-alive
    with Notifier.from_environ() as systemd:
        if systemd.watchdog is not None:
            trace_aborts()  # killed by the watchdog (SIGABRT): the journal shows where

        async def go() -> int | None:
            async with anyio.create_task_group() as tg:
                waiting = anyio.CancelScope()  # the keep-alive while the backend is down

                async def keep_alive() -> None:
                    with waiting:
                        await systemd.keep_alive()

                tg.start_soon(keep_alive)
                async with reach_driver(opts, signals) as driver:  # waits for a backend down
                    waiting.cancel()  # the supervisor sends it from now on
                    if driver is None:
                        return None  # stopped (SIGINT, SIGTERM) before it could be reached
                    supervisor = Supervisor(driver, settings, systemd=systemd)
                    signals.react(supervisor.signalled)
                    try:
                        await supervisor.run()
                    finally:  # closing the backend: a signal cancels that, a second ends us
                        signals.react(None)
                    return supervisor.exit_status
            return None  # not reached: the block returns

        failed = run_async(opts, go, signals=signals)
    if failed is not None:  # --on-exit fail: COMMAND's status (logged with the reason)
        sys.exit(failed)
