"""What ``ha report`` shows while Spark works: which of its stages is running.

The analysis announces each stage by calling ``on_stage(name)`` as it starts it (see
``analysis.STAGES``). On a terminal that moves a rich progress bar, transient, so the summary
table takes its place; anywhere else (a pipe, a log file, CI) each stage is one plain line,
which a log keeps readable where a redrawn bar would leave control characters. Both go to
stderr: stdout carries the report alone.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TextIO

__all__ = ("OnStage", "plain_lines", "stage_progress")

OnStage = Callable[[str], None]


@contextmanager
def plain_lines(total: int, stream: TextIO | None = None) -> Iterator[OnStage]:
    """One line per stage: ``ha report: [2/5] leadership intervals and summary``."""
    out = stream or sys.stderr
    seen = 0

    def on_stage(name: str) -> None:
        nonlocal seen
        seen += 1
        print(f"ha report: [{seen}/{total}] {name}", file=out, flush=True)

    yield on_stage


@contextmanager
def _rich_bar(total: int, stream: TextIO | None) -> Iterator[OnStage]:
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
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("starting", total=total)
        started = False

        def on_stage(name: str) -> None:
            nonlocal started
            if started:  # the previous stage is done
                bar.advance(task)
            started = True
            bar.update(task, description=name)

        yield on_stage


def stage_progress(
    total: int, *, terminal: bool | None = None, stream: TextIO | None = None
) -> AbstractContextManager[OnStage]:
    """A context manager giving ``on_stage``: a rich bar when ``terminal`` (default: whether
    stderr is one), plain lines otherwise; ``total`` is the number of stages announced."""
    out = stream or sys.stderr
    if terminal is None:
        terminal = out.isatty()
    return _rich_bar(total, out) if terminal else plain_lines(total, out)
