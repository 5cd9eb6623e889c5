"""How every ``ha`` command runs: its options, its event loop, its errors and its logs.

A command does its work through ``call`` (plain work), ``run`` (async work on a fresh event loop)
or ``with_driver`` (async work on a connected backend). Each turns whatever escapes into one line
on stderr and an exit code (a ``Failure``), unless ``--debug`` asks for the traceback:

- ``HAError``, ``OSError`` and ``TimeoutError`` are expected: their message is the line;
- any other ``Exception`` is a bug or a surprise: the line names its type and points to --debug;
- Ctrl-C is ``Interrupted``: exit code 130, and no line (on the event loop, ``_signals.py``
  turns it into a cancellation, the same under asyncio and trio);
- with ``spark=True``, a missing Spark dependency says what to install, and an error raised
  inside PySpark or py4j shows only its first line (Java stack traces are pages long).

Errors inside task groups arrive wrapped in exception groups; the first error that is not a
cancellation is the one shown.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

import anyio
import click

from .._install import install_hint
from ..drivers import connect
from ..drivers.base import Driver
from ..errors import ConfigurationError, HAError
from ._dns import check_hosts_resolve
from ._logs import LOG_FORMATS, LOG_LEVELS, run_as, setup_logging
from ._signals import Signals

__all__ = (
    "CONTEXT",
    "EXIT_NO_ACTIVE",
    "EXIT_OVERLAP",
    "GLOBAL_NAMES",
    "Failure",
    "Interrupted",
    "NoActiveFailure",
    "Options",
    "Signals",
    "UsageFailure",
    "add_global_options",
    "global_options",
    "http_option",
    "call",
    "check_master",
    "master_option",
    "need_spark",
    "open_driver",
    "run",
    "run_as",
    "setup_logging",
    "with_driver",
)

T = TypeVar("T")

EXIT_NO_ACTIVE = 3
EXIT_OVERLAP = 4
EXIT_INTERRUPTED = 130

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


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
    """Ctrl-C: exit code 130, quietly (the user knows; ``ha run`` has logged its stop)."""

    exit_code = EXIT_INTERRUPTED

    def show(self, file: Any = None) -> None:
        pass


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


# --- Spark: what to install, and its errors in one line -----------------------------------------

# what the spark extra brings: a missing one is an installation problem, said so
SPARK_MODULES = frozenset({"pyspark", "py4j", "pandas", "pyarrow", "numpy"})
SPARK_HINT = install_hint("spark")


def need_spark(what: str) -> None:
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


def master_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--master, for the commands that start Spark (checked by ``check_master``)."""
    return click.option(
        "--master",
        default="local[2]",
        show_default=True,
        help="spark.master: local[N], spark://HOST:PORT, yarn or k8s://URL.",
    )(fn)


def http_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--http HOST:PORT, for the commands that take part in an election (``ha/http/``)."""
    return click.option(
        "--http",
        metavar="HOST:PORT",
        help="Serve /healthz, /readyz (200 only on the active), /leader and /metrics"
        " (Prometheus) on HOST:PORT, e.g. 127.0.0.1:8008 (port 0: any free port, logged).",
    )(fn)


def check_master(master: str) -> None:
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


# --- running a command's work -------------------------------------------------------------------


@dataclass(slots=True)
class Options:
    url: str | None
    url_given: bool  # on the command line (not from HA_URL)
    debug: bool
    log_level: str | None = None  # None: the default levels (``_logs.py``)
    log_format: str = "text"

    def setup_logging(self) -> None:
        setup_logging(self.debug, self.log_level, self.log_format)

    def backend_url(self, *, read_only: bool = False) -> str:
        """The --url, else the embedded default file (``read_only``: without creating its
        directory)."""
        if self.url:
            return self.url
        try:
            from ..drivers.sqlite.settings import default_path
        except ImportError as exc:  # pragma: no cover - the embedded backend ships with ha
            raise ConfigurationError(f"no --url given and no embedded backend: {exc}") from exc
        return "sqlite://" + quote(str(default_path(create=not read_only)))


# --- ha's own options after the command's name too (as kubectl, etcdctl, patronictl) ----------


def _set_url(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    opts = ctx.find_object(Options)
    if value is not None and opts is not None:  # the later, nearer flag wins
        opts.url, opts.url_given = value, True


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    opts = ctx.find_object(Options)
    if value and opts is not None:
        opts.debug = True
        opts.setup_logging()


def _set_log(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    opts = ctx.find_object(Options)
    if value is not None and opts is not None and param.name is not None:
        setattr(opts, param.name, value)
        opts.setup_logging()


def global_options() -> list[click.Option]:
    """``--url``, ``--debug``, ``--config``, ``--log-format``, ``--log-level`` as a command
    takes them after its name (``ha`` itself takes them first, in ``__init__.py``). The config
    file is found before any parsing (``config.py``): here ``--config`` is only declared."""
    return [
        click.Option(
            ["--url"],
            metavar="URL",
            expose_value=False,
            callback=_set_url,
            help="Backend URL, as `ha --url` (wins over HA_URL).",
        ),
        click.Option(
            ["--debug"],
            is_flag=True,
            expose_value=False,
            callback=_set_debug,
            help="Show tracebacks and debug logs, as `ha --debug`.",
        ),
        click.Option(
            ["--config"],
            metavar="FILE",
            expose_value=False,
            help="Config file (TOML), as `ha --config`.",
        ),
        click.Option(
            ["--log-format"],
            type=click.Choice(LOG_FORMATS),
            expose_value=False,
            callback=_set_log,
            help="Logs as text or JSON lines, as `ha --log-format`.",
        ),
        click.Option(
            ["--log-level"],
            type=click.Choice(LOG_LEVELS, case_sensitive=False),
            expose_value=False,
            callback=_set_log,
            help="Log level, as `ha --log-level`.",
        ),
    ]


GLOBAL_NAMES = frozenset(name for option in global_options() for name in option.opts)


def add_global_options(command: click.Command) -> None:
    """Give ``command`` (and the commands of a group) the options of ``ha`` itself, so that
    ``ha status --url X /p`` means ``ha --url X status /p``. A command's own ``--url`` (the
    demo's) stays its own. ``ha run``'s COMMAND after ``--`` keeps every option it is given."""
    taken = {name for param in command.params for name in param.opts}
    for option in global_options():
        if option.opts[0] not in taken:
            command.params.append(option)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_global_options(sub)


def call(opts: Options, fn: Callable[[], T], *, spark: bool = False) -> T:
    """Call ``fn``; turn any failure into one line and an exit code.

    ``spark``: the work runs on Spark (after ``need_spark``), whose errors get one line too.
    """
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
        failure = _spark_failure(leaf) if spark else None
        if failure is not None:
            raise failure from None
        if isinstance(leaf, KeyboardInterrupt):
            raise Interrupted("interrupted") from None
        if isinstance(leaf, HAError | OSError | TimeoutError):
            raise Failure(_one_line(leaf)) from None
        if isinstance(leaf, Exception):
            raise Failure(
                f"unexpected {type(leaf).__name__}: {_one_line(leaf)} (--debug shows where)"
            ) from None
        raise


def run(
    opts: Options,
    fn: Callable[[], Awaitable[T]],
    *,
    spark: bool = False,
    signals: Signals | None = None,
) -> T:
    """Run ``fn`` on the event loop; turn any failure into one line and an exit code.

    ``signals``: what SIGINT and SIGTERM do (``_signals.py``); by default SIGINT cancels ``fn``
    and the command exits 130.
    """
    backend = os.environ.get("HA_ASYNC_BACKEND", "asyncio")  # tests run the command on trio too
    on = Signals() if signals is None else signals

    def go() -> T:
        try:
            done = anyio.run(on.run, fn, backend=backend)
        except BaseException:
            if on.interrupted:  # whatever the cancelled work raised on its way out
                raise Interrupted("interrupted") from None
            raise
        if on.interrupted:
            raise Interrupted("interrupted")
        if not done:  # SIGTERM cancelled the work: its normal end
            raise click.exceptions.Exit(0)
        return done[0]

    return call(opts, go, spark=spark)


def with_driver(
    opts: Options,
    fn: Callable[[Driver], Awaitable[T]],
    *,
    read_only: bool = False,
    signals: Signals | None = None,
) -> T:
    """Connect to the backend, run ``fn(driver)``, disconnect.

    ``read_only``: ``fn`` only reads, so connecting must create nothing either: a missing
    sqlite file is an error (not a new empty database), and so is a missing ZooKeeper chroot.
    ``signals``: as for ``run``.
    """

    async def go() -> T:
        async with open_driver(opts, read_only=read_only) as driver:
            return await fn(driver)

    return run(opts, go, signals=signals)


@asynccontextmanager
async def open_driver(opts: Options, *, read_only: bool = False) -> AsyncIterator[Driver]:
    """The backend of ``opts``, connected (``read_only``: as ``with_driver`` says)."""
    url = opts.backend_url(read_only=read_only)
    options = _read_only_options(url) if read_only else {}
    await check_hosts_resolve(url)
    async with connect(url, **options) as driver:
        yield driver


def _read_only_options(url: str) -> dict[str, Any]:
    """The driver options that keep a connection from creating anything; raises when the
    sqlite file is missing (the sqlite driver makes an empty file an ha database)."""
    scheme = urlsplit(url).scheme
    if scheme == "zk":
        return {"create_chroot": False}
    if scheme == "sqlite":
        from ..drivers.sqlite.settings import default_path, parse_url

        path = parse_url(url, {})[0] if urlsplit(url).path else str(default_path(create=False))
        directory = os.path.dirname(path)
        if not os.path.isdir(directory):
            raise ConfigurationError(
                f"no ha database at {path}: its directory {directory} does not exist"
            )
        if not os.path.exists(path):
            raise ConfigurationError(
                f"no ha database at {path} (nothing has run on this backend yet:"
                " `ha run` or `ha format` creates it)"
            )
        if os.path.isfile(path) and os.path.getsize(path) == 0:
            # the driver would make it a database: reading must leave it as it is
            raise ConfigurationError(
                f"no ha database at {path}: the file is empty (`ha run` or `ha format` makes"
                " it one)"
            )
    return {}
