"""``ha demo``: see a failover happen (``ha.demo``), or with --pipeline a job manager's
(``ha.pipeline.local.demo``, imported only then: it needs PySpark).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from typing import Any

import click

from ._run import Failure, Interrupted, Options, UsageFailure, need_spark, run
from ._show import clock

__all__ = ("demo",)


@click.command()
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
    help="The PySpark job manager demo instead (needs ha-elector[spark] and Java).",
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
    _quiet(opts)
    code = run(opts, lambda: run_demo(url, path=path, rounds=rounds))
    sys.exit(code)


def _pipeline_demo(opts: Options, rounds: int, workdir: str | None) -> None:
    """`ha demo --pipeline`: see ``ha.pipeline.local.demo.run_pipeline_demo``."""
    import tempfile

    from ..pipeline.local.demo import run_pipeline_demo
    from ..report.progress import stage_progress

    if rounds > 2:
        raise UsageFailure("--pipeline kills the active at most twice (--rounds 1 or 2)")
    _quiet(opts)

    def say(line: str) -> None:
        click.echo(f"{clock(time.time())} {line}")
        sys.stdout.flush()

    need_spark("`ha demo --pipeline`")

    def progress(total: int) -> Any:  # each committed batch: a bar on a terminal, else a line
        return stage_progress(total, label="ha demo", finished=True)

    def run_in(directory: str) -> Any:
        say(f"pipeline demo in {directory}")
        return run(
            opts,
            lambda: run_pipeline_demo(
                directory, kills=rounds, processes=3, say=say, progress=progress
            ),
            spark=True,
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


def _quiet(opts: Options) -> None:
    if not opts.debug:  # the demo tells the story; the elector's warnings are part of it
        logging.getLogger("ha").setLevel(logging.ERROR)
