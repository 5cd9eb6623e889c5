"""What a long command shows while Spark works: ``ha report``'s stages, ``ha demo
--pipeline``'s batches.

The work announces each step by calling ``on_stage(name)``: as it starts it (the report's
``analysis.STAGES``) or, with ``finished=True``, once it is done (a committed batch). On a
terminal that moves a rich progress bar, transient, so what the command prints next takes its
place; anywhere else (a pipe, a log file, CI) each step is one plain line, which a log keeps
readable where a redrawn bar would leave control characters. Both go to stderr: stdout
carries the command's own output.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TextIO

__all__ = ("OnStage", "plain_lines", "stage_progress")

OnStage = Callable[[str], None]


@contextmanager
def plain_lines(
    total: int, stream: TextIO | None = None, *, label: str = "ha report"
) -> Iterator[OnStage]:
    """One line per step: ``ha report: [2/5] leadership intervals and summary``."""
    out = stream or sys.stderr
    seen = 0

    def on_stage(name: str) -> None:
        nonlocal seen
        seen += 1
        print(f"{label}: [{seen}/{total}] {name}", file=out, flush=True)

    yield on_stage


@contextmanager
def _rich_bar(total: int, stream: TextIO | None, finished: bool) -> Iterator[OnStage]:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    console = Console(file=stream or sys.stderr)
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    # What the command prints meanwhile goes above the bar, unless stdout is not this
    # terminal (redirected to a file: it must stay there).
    redirect = sys.stdout.isatty()
    with Progress(*columns, console=console, transient=True, redirect_stdout=redirect) as bar:
        task = bar.add_task("starting", total=total)
        started = False

        def on_stage(name: str) -> None:
            nonlocal started
            if started or finished:  # the previous stage is done, or this one
                bar.advance(task)
            started = True
            bar.update(task, description=name)

        yield on_stage


def stage_progress(
    total: int,
    *,
    terminal: bool | None = None,
    stream: TextIO | None = None,
    label: str = "ha report",
    finished: bool = False,
) -> AbstractContextManager[OnStage]:
    """A context manager giving ``on_stage``: a rich bar when ``terminal`` (default: whether
    stderr is one), plain lines (``label: [n/total] name``) otherwise. ``total`` is the number
    of steps announced; each call announces one as it starts, or as it is done when
    ``finished``."""
    out = stream or sys.stderr
    if terminal is None:
        terminal = out.isatty()
    return _rich_bar(total, out, finished) if terminal else plain_lines(total, out, label=label)
