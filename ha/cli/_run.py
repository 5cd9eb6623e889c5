"""How every ``ha`` command runs: its options, its event loop, its errors and its logs.

A command does its work through ``call`` (plain work), ``run`` (async work on a fresh event loop)
or ``with_driver`` (async work on a connected backend). Each turns whatever escapes into one line
on stderr and an exit code (a ``Failure``), unless ``--debug`` asks for the traceback:

- ``HAError``, ``OSError`` and ``TimeoutError`` are expected: their message is the line;
- any other ``Exception`` is a bug or a surprise: the line names its type and points to --debug;
- Ctrl-C is ``Interrupted`` (exit code 130);
- with ``spark=True``, a missing Spark dependency says what to install, and an error raised
  inside PySpark or py4j shows only its first line (Java stack traces are pages long).

Errors inside task groups arrive wrapped in exception groups; the first error that is not a
cancellation is the one shown.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

import anyio
import click

from ..drivers import connect
from ..drivers.base import Driver
from ..errors import ConfigurationError, HAError

__all__ = (
    "CONTEXT",
    "EXIT_NO_ACTIVE",
    "EXIT_OVERLAP",
    "Failure",
    "Interrupted",
    "NoActiveFailure",
    "Options",
    "UsageFailure",
    "add_global_options",
    "call",
    "check_master",
    "master_option",
    "need_spark",
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


# --- Spark: what to install, and its errors in one line -----------------------------------------

# what `pip install 'ha[spark]'` brings: a missing one is an installation problem, said so
SPARK_MODULES = frozenset({"pyspark", "py4j", "pandas", "pyarrow", "numpy", "matplotlib"})
SPARK_HINT = "install ha[spark] (pip install 'ha[spark]')"


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


# --- --url and --debug after the command's name too (as kubectl, etcdctl, patronictl) -----------


def _set_url(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    opts = ctx.find_object(Options)
    if value is not None and opts is not None:  # the later, nearer flag wins
        opts.url, opts.url_given = value, True


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    opts = ctx.find_object(Options)
    if value and opts is not None:
        opts.debug = True
        setup_logging(True)


def add_global_options(command: click.Command) -> None:
    """Give ``command`` (and the commands of a group) the options of ``ha`` itself, so that
    ``ha status --url X /p`` means ``ha --url X status /p``. A command's own ``--url`` (the
    demo's) stays its own. ``ha run``'s COMMAND after ``--`` keeps every option it is given."""
    taken = {name for param in command.params for name in param.opts}
    if "--url" not in taken:
        command.params.append(
            click.Option(
                ["--url"],
                metavar="URL",
                expose_value=False,
                callback=_set_url,
                help="Backend URL, as `ha --url` (wins over HA_URL).",
            )
        )
    if "--debug" not in taken:
        command.params.append(
            click.Option(
                ["--debug"],
                is_flag=True,
                expose_value=False,
                callback=_set_debug,
                help="Show tracebacks and debug logs, as `ha --debug`.",
            )
        )
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


def run(opts: Options, fn: Callable[[], Awaitable[T]], *, spark: bool = False) -> T:
    """Run ``fn`` on the event loop; turn any failure into one line and an exit code."""
    backend = os.environ.get("HA_ASYNC_BACKEND", "asyncio")  # tests run the command on trio too
    return call(opts, lambda: anyio.run(fn, backend=backend), spark=spark)


def with_driver(
    opts: Options, fn: Callable[[Driver], Awaitable[T]], *, read_only: bool = False
) -> T:
    """Connect to the backend, run ``fn(driver)``, disconnect.

    ``read_only``: ``fn`` only reads, so connecting must create nothing either: a missing
    sqlite file is an error (not a new empty database), and so is a missing ZooKeeper chroot.
    """

    async def go() -> T:
        url = opts.backend_url(read_only=read_only)
        options = _read_only_options(url) if read_only else {}
        async with connect(url, **options) as driver:
            return await fn(driver)

    return run(opts, go)


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
    return {}


# --- logging: warnings and the supervisor's story on stderr -------------------------------------


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


def run_as(identity: str) -> None:
    """The supervisor's log lines name ``identity`` from now on (``ha run`` and job managers)."""
    _formatter.run_as = identity


def setup_logging(debug: bool) -> None:
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
