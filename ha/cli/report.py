"""``ha report``: election journals analyzed on Spark (``ha.report``, imported when it runs).

Exit code 4 says overlapping leadership was found: two actives at once, which must never happen.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from ._run import EXIT_OVERLAP, Failure, Options, call, check_master, master_option, need_spark

__all__ = ("report",)

# ha.report.analysis.DEFAULT_SESSION_TIMEOUT, not imported: ha.report loads when the command runs
DEFAULT_SESSION_TIMEOUT = 10.0


@click.command()
@click.argument("journals", nargs=-1, required=True, metavar="JOURNALS...")
@click.option(
    "--out",
    default="report.html",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="The HTML report to write (plots embedded).",
)
@master_option
@click.option(
    "--driver-memory",
    default="2g",
    show_default=True,
    metavar="SIZE",
    help="spark.driver.memory (the JVM's heap with local[N]).",
)
@click.option(
    "--session-timeout",
    default=DEFAULT_SESSION_TIMEOUT,
    show_default=True,
    type=click.FloatRange(min=0),
    metavar="S",
    help="The backend's session timeout: a killed active is taken to have stopped this long"
    " before the next active took over (0 for a backend that sees a dead process at once).",
)
@click.pass_obj
def report(
    opts: Options,
    journals: tuple[str, ...],
    out: str,
    master: str,
    driver_memory: str,
    session_timeout: float,
) -> None:
    """Analyze election journals on Spark: leadership, failovers, overlaps, availability.

    JOURNALS are the JSON-lines files that `ha run --journal` and electors write: files,
    directories, globs, or any URI Spark reads (hdfs://, s3a://...). Per election: leadership
    intervals, each failover's gap (no active to new active), overlapping leadership between
    identities (two actives at once: must never happen), epochs, availability, transitions per
    hour. Prints the summary table and writes the HTML report with plots.

    A process killed while active records nothing more. The next active got the lock once
    the backend gave up the old session, a session timeout after its last contact: the
    report takes the killed active to have stopped then, so the crash's gap is about
    --session-timeout and that time counts as unavailable.

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
    from ..report.analysis import STAGES
    from ..report.progress import stage_progress
    from ..report.render import summary_table

    check_master(master)
    need_spark("`ha report`")
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

    # Stages on stderr (a bar on a terminal, lines elsewhere), closed before the table prints.
    with stage_progress(len(STAGES) + 1) as on_stage:  # + writing the HTML
        found = call(
            opts,
            lambda: run_report(
                list(journals),
                target,
                master=master,
                driver_memory=driver_memory,
                console=False,
                session_timeout=session_timeout,
                quiet=not opts.debug,
                on_stage=on_stage,
            ),
            spark=True,
        )
    Console(highlight=False).print(summary_table(found))
    click.echo(f"wrote {out} ({found.events:,} events in {found.seconds:.1f} s)")
    if found.overlap_count:
        click.echo(
            f"OVERLAP: {found.overlap_count:,} overlapping leadership interval(s),"
            " two actives at once (see the report)"
        )
        sys.exit(EXIT_OVERLAP)
    click.echo("no overlapping leadership")
