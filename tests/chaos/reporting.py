"""How rounds are run and told, for both harnesses (``python -m tests.chaos`` and
``python -m tests.netns``, and their pytest modules): the options every run takes, one line a
round, the table at the end, and the failed rounds' replay commands."""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.chaos import RoundResult, table

# (backend, seeds, loop, workdir, on_round) -> the rounds' results
Rounds = Callable[
    [str, list[int], str, Path, Callable[[RoundResult], None]], Awaitable[list[RoundResult]]
]


def add_round_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0, help="round i runs seed SEED+i")
    parser.add_argument("--rounds", type=int, default=1, help="rounds per backend")
    parser.add_argument("--loop", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--keep", type=Path, help="keep witness files and logs in this directory")


def run_and_report(
    args: argparse.Namespace,
    backends: tuple[str, ...],
    missing: Callable[[str], str | None],
    rounds: Rounds,
    prefix: str,
    verbose: bool = False,
) -> int:
    """Run ``args.rounds`` rounds of each backend that can run here; 1 if any had violations.
    ``verbose``: every round's report, not only a failed one's."""
    workdir = args.keep or Path(tempfile.mkdtemp(prefix=prefix))
    workdir.mkdir(parents=True, exist_ok=True)
    seeds = list(range(args.seed, args.seed + args.rounds))
    started = time.monotonic()
    results: list[RoundResult] = []

    def say(r: RoundResult) -> None:
        mark = "ok" if not r.violations else f"{len(r.violations)} VIOLATIONS"
        print(
            f"{r.backend} seed {r.seed} {r.loop}: {mark} ({r.seconds:.1f}s, {r.figures.acts} acts)",
            flush=True,
        )
        if r.violations or verbose:
            print(r.report(), flush=True)

    for backend in backends:
        if reason := missing(backend):
            print(f"{backend}: skipped ({reason})")
            continue
        results += anyio.run(
            functools.partial(rounds, backend, seeds, args.loop, workdir, say),
            backend=args.loop,
        )
    print(table(results, time.monotonic() - started))
    bad = [r for r in results if r.violations]
    if bad:
        print(f"logs and witness files: {workdir}")
        for r in bad:
            print(f"replay: {r.replay()}")
    return 1 if bad else 0


def summary_of(results: list[RoundResult]) -> Any:
    """A module's autouse fixture that shows the table of ``results`` after its tests, even
    when they pass: ``summary = summary_of(RESULTS)``."""

    @pytest.fixture(scope="module", autouse=True)
    def summary(request: pytest.FixtureRequest) -> Iterator[None]:
        started = time.monotonic()
        yield
        plugins = request.config.pluginmanager
        reporter = plugins.getplugin("terminalreporter")
        capture = plugins.getplugin("capturemanager")
        if results and reporter is not None and capture is not None:
            with capture.global_and_fixture_disabled():  # shown even when the tests pass
                reporter.write_line("")
                for line in table(results, time.monotonic() - started).splitlines():
                    reporter.write_line(line)

    return summary
