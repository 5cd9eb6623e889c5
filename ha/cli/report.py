"""``ha report``: election journals analyzed on Spark (``ha.report``, imported when it runs).

Exit code 4 says overlapping leadership was found: two actives at once, which must never happen.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from ..errors import ConfigurationError
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
@click.option(
    "--engine",
    type=click.Choice(["auto", "local", "spark"]),
    default="auto",
    show_default=True,
    help="Where the analysis runs: in this process (local files that fit in memory: no JVM"
    " to start), on Spark (any input, a cluster), or auto: local when it can.",
)
@click.pass_obj
def report(
    opts: Options,
    journals: tuple[str, ...],
    out: str,
    master: str,
    driver_memory: str,
    session_timeout: float,
    engine: str,
) -> None:
    """Analyze election journals: leadership, failovers, overlaps, availability.

    JOURNALS are the JSON-lines files that `ha run --journal` and electors write: files,
    directories, globs, or any URI Spark reads (hdfs://, s3a://...). Per election: leadership
    intervals, each failover's gap (no active to new active), overlapping leadership between
    identities (two actives at once: must never happen), epochs, availability, transitions per
    hour. Prints the summary table and writes the HTML report with plots.

    A process killed while active records nothing more. The next active records when it
    found the lock free and how soon the backend ends a dead process's session: the report
    dates the killed active's end by them (an estimate, marked as such). Journals of older
    electors lack them: the killed active is then assumed to have stopped a session timeout
    (the one it recorded, else --session-timeout) before the next active took over.

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
    from ..report.engine import choose
    from ..report.progress import stage_progress
    from ..report.render import summary_table

    check_master(master)
    for path in journals:  # local paths checked here, not after Spark's start-up
        if "://" in path:
            continue
        local = os.path.expanduser(path)
        if any(c in path for c in "*?["):
            if not glob.glob(local):
                raise Failure(f"no journal matches {path!r}")
        elif not os.path.exists(local):
            raise Failure(f"no such journal: {path}")
    try:
        engine = choose(engine, journals, master)
    except ConfigurationError as exc:
        raise Failure(str(exc)) from None
    if engine == "spark":
        need_spark("`ha report` on Spark")
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
                engine=engine,
            ),
            spark=True,  # one line for a missing pandas or pyarrow too
        )
    Console(highlight=False).print(summary_table(found))
    click.echo(
        f"wrote {out} ({found.events:,} events analyzed in {found.seconds:.1f} s,"
        f" {found.engine} engine)"
    )
    if found.overlap_count:
        click.echo(
            f"OVERLAP: {found.overlap_count:,} overlapping leadership interval(s),"
            " two actives at once (see the report)"
        )
        sys.exit(EXIT_OVERLAP)
    click.echo("no overlapping leadership")
