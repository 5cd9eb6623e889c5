"""The command's plumbing in process: which modules `import ha.cli` loads, how any failure
becomes one line and an exit code (``ha.cli._run.call``), and the time formats."""

from __future__ import annotations

import asyncio
import errno
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import click
import pytest

from ha.cli._run import Failure, Interrupted, Options, UsageFailure, call
from ha.cli._show import ago, clock, stamp
from ha.errors import ConfigurationError

DEBUG = Options(url=None, url_given=False, debug=True)
QUIET = Options(url=None, url_given=False, debug=False)


def test_the_command_loads_neither_spark_nor_the_pipeline() -> None:
    """`ha --help` (and every election command) must not pay for PySpark: `ha report` and
    `ha jobs` import what they need when they run."""
    code = (
        "import sys\n"
        "from ha.cli import cli\n"
        "try:\n"
        "    cli.main(['--help'], prog_name='ha', standalone_mode=False)\n"
        "    cli.main(['jobs', '--help'], prog_name='ha', standalone_mode=False)\n"
        "finally:\n"
        "    heavy = ('pyspark', 'py4j', 'pandas', 'pyarrow', 'ha.pipeline', 'ha.report')\n"
        "    print(sorted(m for m in sys.modules if m.split('.')[0] in heavy"
        " or m.startswith(heavy)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def failure(fn: Callable[[], Any], *, spark: bool = False) -> click.ClickException:
    with pytest.raises(click.ClickException) as caught:
        call(QUIET, fn, spark=spark)
    return caught.value


def raises(exc: BaseException) -> Callable[[], Any]:
    def fn() -> Any:
        raise exc

    return fn


@pytest.mark.parametrize(
    ("exc", "line"),
    [
        (ConfigurationError("bad  URL\n  here"), "bad URL here"),
        (FileNotFoundError(errno.ENOENT, "No such file or directory", "/x/y"), "No such file or"),
        (TimeoutError(), "timed out"),
        (ValueError("odd"), "unexpected ValueError: odd (--debug shows where)"),
        (RuntimeError(), "unexpected RuntimeError: RuntimeError (--debug shows where)"),
    ],
)
def test_a_failure_is_one_line(exc: BaseException, line: str) -> None:
    found = failure(raises(exc))
    assert type(found) is Failure and found.exit_code == 1
    assert found.message.startswith(line) and "\n" not in found.message
    if isinstance(exc, FileNotFoundError):
        assert found.message == "No such file or directory: /x/y"


def test_the_error_inside_task_groups_is_shown_not_the_cancellations() -> None:
    group = BaseExceptionGroup(
        "outer",
        [asyncio.CancelledError(), ExceptionGroup("inner", [ConfigurationError("the cause")])],
    )
    assert failure(raises(group)).message == "the cause"


def test_ctrl_c_is_exit_code_130_and_usage_errors_keep_theirs() -> None:
    interrupted = failure(raises(KeyboardInterrupt()))
    assert type(interrupted) is Interrupted and interrupted.exit_code == 130
    usage = failure(raises(ExceptionGroup("g", [UsageFailure("--x goes with --y")])))
    assert type(usage) is UsageFailure and usage.exit_code == 2


def test_debug_raises_the_original() -> None:
    with pytest.raises(ValueError, match="odd"):
        call(DEBUG, raises(ValueError("odd")))
    with pytest.raises(ModuleNotFoundError):
        call(DEBUG, raises(ModuleNotFoundError("no pyspark", name="pyspark")), spark=True)


def test_click_exit_passes_through() -> None:
    with pytest.raises(click.exceptions.Exit):
        call(QUIET, raises(click.exceptions.Exit(3)))


def test_spark_errors_are_one_line_only_for_spark_work() -> None:
    missing = ModuleNotFoundError("No module named 'pyarrow'", name="pyarrow")
    assert failure(raises(missing), spark=True).message == (
        "No module named 'pyarrow': pip install 'ha-elector[spark]'"
    )
    assert failure(raises(missing)).message.startswith("unexpected ModuleNotFoundError")

    # an error raised by Spark (its class lives in pyspark or py4j): its first line, bounded
    spark_error = type("AnalysisException", (Exception,), {"__module__": "pyspark.errors"})
    long = spark_error("\n  [PATH_NOT_FOUND] " + "x" * 400 + "\n\tat org.apache.spark...")
    message = failure(raises(long), spark=True).message
    assert message.startswith("Spark: [PATH_NOT_FOUND] xxx") and message.endswith(
        "... (--debug shows more)"
    )
    assert len(message) < 340


def test_time_formats() -> None:
    assert [ago(s) for s in (-1, 4.25, 185, 7620)] == ["0.0s", "4.2s", "3m05s", "2h07m"]
    assert len(clock(0.5)) == len("12:00:00.500") and clock(0.5).endswith(".500")
    assert len(stamp()) == len("2024-05-01T12:00:00.123") and stamp()[10] == "T"
