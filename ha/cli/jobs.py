"""``ha jobs``: submit, list, watch and cancel PySpark pipeline jobs; run a job manager.

The commands other than ``manager`` need no running job manager and no Spark: they read and
write the cluster's nodes (under ``/ha/CLUSTER``) and its blob directory, through
``ha.pipeline.client``. ``ha.pipeline`` is imported inside each command, so that ``import ha.cli``
never imports PySpark.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import click

from .. import admin
from ..drivers.base import Driver
from ..errors import ConfigurationError
from ..http import parse_address
from ._run import (
    CONTEXT,
    Failure,
    Options,
    UsageFailure,
    call,
    check_master,
    http_option,
    master_option,
    need_spark,
    run,
    run_as,
    with_driver,
)
from ._show import batches, print_event, print_event_json, print_job, print_jobs, status_json

__all__ = ("jobs",)

T = TypeVar("T")

DEFAULT_CLUSTER = "default"


def _default_blobs(url: str) -> Path:
    """``blobs/`` next to the sqlite file of ``url``; for other backends, in the state
    directory (beside the default sqlite file)."""
    from urllib.parse import unquote, urlsplit

    from ..drivers.sqlite import default_path

    parts = urlsplit(url)
    if parts.scheme == "sqlite" and parts.path:
        return Path(unquote(parts.path)).expanduser().absolute().parent / "blobs"
    return default_path().parent / "blobs"


@dataclass(slots=True)
class JobsOptions:
    opts: Options
    cluster: str
    blobs_given: str | None

    @property
    def url(self) -> str:
        return self.opts.backend_url()

    @property
    def blobs(self) -> str:
        if self.blobs_given:
            return str(Path(self.blobs_given).expanduser().absolute())
        return str(_default_blobs(self.url))

    def blob_hint(self) -> str:
        return (
            f"(plans and checkpoints are in the job managers' blob directory: is it {self.blobs}?"
            " give it with --blobs or HA_BLOBS)"
        )

    async def reading(self, fn: Callable[[], Awaitable[T]]) -> T:
        """``fn()``; a missing blob (another blob directory than the job managers') says so."""
        from ..errors import CorruptData

        try:
            return await fn()
        except CorruptData as exc:
            if "blob" not in str(exc):
                raise
            raise Failure(f"{exc} {self.blob_hint()}") from None


def _cluster_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--cluster and --blobs, for every `ha jobs` command."""
    fn = click.option(
        "--blobs",
        metavar="DIR",
        envvar="HA_BLOBS",
        help="The cluster's blob directory, shared by its job managers: plans and checkpoints"
        " (env HA_BLOBS). Default: blobs/ next to the backend's sqlite file (with the default"
        " backend: the state directory's blobs/, e.g. ~/.local/state/ha/blobs); other backends:"
        " the state directory's blobs/ (give a shared directory when job managers run on"
        " several hosts).",
    )(fn)
    fn = click.option(
        "--cluster",
        default=DEFAULT_CLUSTER,
        show_default=True,
        metavar="ID",
        envvar="HA_CLUSTER",
        help="The job manager cluster (env HA_CLUSTER): its election and stores live under /ha/ID.",
    )(fn)
    return fn


def _jobs_options(opts: Options, cluster: str, blobs: str | None) -> JobsOptions:
    from ..stores.layout import check_name

    try:
        check_name("cluster id", cluster)
    except ConfigurationError as exc:
        raise UsageFailure(str(exc)) from None
    return JobsOptions(opts, cluster, blobs)


async def _active_manager(driver: Driver, cluster: str) -> str | None:
    """The identity of the cluster's active job manager, if any: the one its process's HA
    services published (``leader/jobmanager``), or an earlier version's active (own election)."""
    from ..pipeline.layout import JobLayout
    from ..services import LeaderRetrieval

    layout = JobLayout(cluster)
    async with LeaderRetrieval(driver, layout.leader) as leaders:
        info = await anext(leaders)
    if info is not None:
        return info.address
    found = await admin.election_status(driver, layout.old_election)
    return None if found.active is None else admin.text(found.active)


async def _cancel_requested(driver: Driver, cluster: str, job_id: str) -> bool:
    from ..pipeline.layout import JobLayout

    return await driver.exists(JobLayout(cluster).cancel(job_id)) is not None


@click.group(context_settings=CONTEXT)
def jobs() -> None:
    """Submit, list, watch and cancel PySpark pipeline jobs; run a job manager.

    Job managers (`ha jobs manager`, one per host or process) elect an active among them, in
    the cluster's election /ha/CLUSTER/election (`ha status` and `ha failover` take that path),
    which runs the submitted jobs on Spark batch by batch, checkpointing after each committed
    batch; when it dies, a standby takes over and resumes from the last checkpoint, and the
    output is the same as that of an uninterrupted run. The commands here need no running job
    manager: a submission waits in the cluster's inbox for the next active.

    \b
    Examples:
      ha jobs manager --id jm-1 &              # on each host (or twice on one)
      ha jobs submit clicks.sessionize -p input=./clicks --output ./sessions --wait
      ha jobs list
      ha jobs status clicks.sessionize-4f2a9c1b3e
      ha jobs cancel clicks.sessionize-4f2a9c1b3e
    """


@jobs.command()
@click.argument("pipeline")
@click.option(
    "-p",
    "--param",
    "params",
    multiple=True,
    metavar="NAME=VALUE",
    help="A parameter of the pipeline (repeatable); the value is converted to its type.",
)
@click.option(
    "--output",
    "-o",
    required=True,
    metavar="DIR",
    help="Output directory: new or empty, local or shared (file:// URIs too).",
)
@click.option("--job-id", metavar="ID", help="The job's id (default: PIPELINE-<random hex>).")
@click.option(
    "--max-attempts",
    type=int,
    default=3,
    show_default=True,
    metavar="N",
    help="Failed attempts before the job is failed for good: batches that raised (over the"
    " whole job and its failovers), or job managers that died running it in a row at one batch.",
)
@click.option(
    "--import",
    "imports",
    multiple=True,
    metavar="MODULE",
    help="Module that registers the pipeline (repeatable); the job managers need it too.",
)
@_cluster_options
@click.option("--wait", is_flag=True, help="Wait for the job to finish; exit 1 if it fails.")
@click.option(
    "--timeout", type=float, metavar="S", help="With --wait: give up waiting after S seconds."
)
@click.pass_obj
def submit(
    opts: Options,
    pipeline: str,
    params: tuple[str, ...],
    output: str,
    job_id: str | None,
    max_attempts: int,
    imports: tuple[str, ...],
    cluster: str,
    blobs: str | None,
    wait: bool,
    timeout: float | None,
) -> None:
    """Submit a job: run the registered PIPELINE with parameters, writing to --output.

    The job is checked in full here (pipeline known, parameters valid, batches listed, output
    new or empty): a malformed job is refused with the reason, and never reaches a job
    manager. The batch list is fixed now. Pipelines shipped: clicks.sessionize (input: a
    directory of Parquet click files), journal.intervals, events.count (a stream of JSON-lines
    files); others come with --import or the `ha.pipelines` entry point group. Prints the job
    id; with --wait, a line per committed (micro-)batch.

    \b
    Examples:
      ha jobs submit clicks.sessionize -p input=/data/clicks --output /data/sessions
      ha jobs submit clicks.sessionize -p input=./clicks -p gap_seconds=900 \\
         --output ./sessions --job-id daily-2024-05-01 --max-attempts 5 --wait
      ha jobs submit mine.etl --import mypkg.pipelines -p day=2024-05-01 -o /shared/out
    """
    from ..pipeline import make_plan, parse_params
    from ..pipeline.api.registry import import_pipelines
    from ..pipeline.api.streaming import is_stream_plan
    from ..pipeline.client import submit_job

    jo = _jobs_options(opts, cluster, blobs)
    try:
        values = parse_params(params)
    except ConfigurationError as exc:
        raise UsageFailure(f"-p: {exc}") from None
    if timeout is not None and not wait:
        raise UsageFailure("--timeout goes with --wait")

    def check() -> Any:
        import_pipelines(imports)
        try:
            return make_plan(pipeline, values, output, job_id=job_id, max_attempts=max_attempts)
        except ConfigurationError as exc:
            raise Failure(f"job refused: {exc}") from None

    plan = call(opts, check)

    async def go(driver: Driver) -> Any:
        await submit_job(driver, jo.cluster, plan)
        size = "a stream" if is_stream_plan(plan) else f"{len(plan.batches)} batches"
        click.echo(
            f"submitted job {plan.job_id} to cluster {jo.cluster!r}: {plan.pipeline},"
            f" {size}, output {plan.output}"
        )
        if await _active_manager(driver, jo.cluster) is None:
            click.echo(
                f"no job manager is active in cluster {jo.cluster!r}: the job waits for one"
                " (`ha jobs manager --id NAME`)"
            )
        sys.stdout.flush()
        if not wait:
            return None
        return await _wait_job(driver, jo, plan.job_id, timeout)

    status = with_driver(opts, go)
    if status is not None:
        _finished(status)


async def _wait_job(driver: Driver, jo: JobsOptions, job_id: str, within: float | None) -> Any:
    from ..pipeline.client import job_status, progress_lines, wait_for_job

    show = progress_lines(job_id, click.echo)
    try:
        with anyio.fail_after(within):
            return await jo.reading(
                lambda: wait_for_job(driver, jo.cluster, job_id, blobs=jo.blobs, on_progress=show)
            )
    except TimeoutError:
        now = await jo.reading(lambda: job_status(driver, jo.cluster, job_id, blobs=jo.blobs))
        raise Failure(
            f"job {job_id} not finished after {within:g}s (still {now.state},"
            f" {batches(now)} batches); it goes on: `ha jobs status {job_id}`"
        ) from None


def _finished(status: Any) -> None:
    line = f"job {status.job_id} {status.state}: {batches(status)} batches"
    if status.output:
        line += f", output {status.output}"
    click.echo(line)
    if status.state != "succeeded":
        raise Failure(
            f"job {status.job_id} {status.state}" + (f": {status.error}" if status.error else "")
        )


@jobs.command(name="list")
@_cluster_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON (a list of jobs).")
@click.pass_obj
def list_(opts: Options, cluster: str, blobs: str | None, as_json: bool) -> None:
    """List the cluster's jobs: submitted, pending, running and finished ones.

    \b
    Examples:
      ha jobs list
      ha jobs list --cluster nightly --json | jq '.[] | select(.state == "failed")'
    """
    from ..pipeline.client import list_jobs

    jo = _jobs_options(opts, cluster, blobs)

    async def go(driver: Driver) -> list[tuple[Any, bool]]:
        found = await list_jobs(driver, jo.cluster, blobs=jo.blobs)
        return [(s, await _cancel_requested(driver, jo.cluster, s.job_id)) for s in found]

    found = with_driver(opts, go, read_only=True)
    if any(s.error and "blob" in s.error and s.state == "unknown" for s, _ in found):
        click.echo(f"ha: note: plans not found {jo.blob_hint()}", err=True)
    if as_json:
        click.echo(json.dumps([status_json(s, c) for s, c in found], indent=2))
        return
    if not found:
        click.echo(f"no jobs in cluster {jo.cluster!r}")
        return
    print_jobs(found)


@jobs.command(name="status")
@click.argument("job_id")
@_cluster_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def job_status_(opts: Options, job_id: str, cluster: str, blobs: str | None, as_json: bool) -> None:
    """Show a job's state (submitted, pending, running, succeeded, failed, cancelled), its
    committed batches, output and error.

    Exit code 0 for any known job, 1 for an unknown one.

    \b
    Examples:
      ha jobs status daily-2024-05-01
      ha jobs status daily-2024-05-01 --json | jq -r .state
    """
    from ..pipeline.client import job_status

    jo = _jobs_options(opts, cluster, blobs)

    async def go(driver: Driver) -> tuple[Any, bool]:
        found = await jo.reading(lambda: job_status(driver, jo.cluster, job_id, blobs=jo.blobs))
        return found, await _cancel_requested(driver, jo.cluster, job_id)

    found, cancel = with_driver(opts, go, read_only=True)
    if as_json:
        click.echo(json.dumps(status_json(found, cancel), indent=2))
    else:
        print_job(found, cancel)


@jobs.command()
@click.argument("job_id")
@_cluster_options
@click.pass_obj
def cancel(opts: Options, job_id: str, cluster: str, blobs: str | None) -> None:
    """Ask the active job manager to cancel a job (a finished job stays as it is).

    The running batch is abandoned (its Spark jobs cancelled, its output never committed);
    the batches already committed stay. The request is kept until an active acts on it.

    \b
    Examples:
      ha jobs cancel daily-2024-05-01
      ha jobs cancel daily-2024-05-01 --cluster nightly
    """
    from ..pipeline.client import cancel_job, job_status

    jo = _jobs_options(opts, cluster, blobs)

    async def go(driver: Driver) -> None:
        found = await jo.reading(lambda: job_status(driver, jo.cluster, job_id, blobs=jo.blobs))
        if found.finished:
            click.echo(f"job {job_id} already {found.state}: nothing to cancel")
            return
        await cancel_job(driver, jo.cluster, job_id)
        active = await _active_manager(driver, jo.cluster)
        who = (
            f"the active job manager ({active})"
            if active is not None
            else "the next active job manager (none is active now)"
        )
        click.echo(f"asked {who} to cancel job {job_id} ({found.state})")

    with_driver(opts, go)


@jobs.command()
@click.option(
    "--id", "identity", required=True, help="This job manager's identity in the cluster (unique)."
)
@_cluster_options
@master_option
@click.option(
    "--hot-standby/--cold",
    default=True,
    show_default=True,
    help="Build the SparkSession at start, so a takeover does not wait for Spark (hot), or"
    " only when elected (cold: no JVM held while standby).",
)
@click.option(
    "--warm-streams/--no-warm-streams",
    default=True,
    show_default=True,
    help="With a hot standby: run a tiny stream at start, then each streaming job once in"
    " private while standby, so a takeover's first micro-batch finds its code compiled.",
)
@click.option(
    "--import",
    "imports",
    multiple=True,
    metavar="MODULE",
    help="Module that registers pipelines (repeatable).",
)
@click.option(
    "--journal", type=click.Path(dir_okay=False), help="Append transitions to this JSON-lines file."
)
@click.option("--json", "as_json", is_flag=True, help="Print events as JSON lines.")
@http_option
@click.pass_obj
def manager(
    opts: Options,
    identity: str,
    cluster: str,
    blobs: str | None,
    master: str,
    hot_standby: bool,
    warm_streams: bool,
    imports: tuple[str, ...],
    journal: str | None,
    as_json: bool,
    http: str | None,
) -> None:
    """Run one job manager of the cluster until SIGTERM or Ctrl-C.

    It joins the cluster's election (/ha/CLUSTER/election: `ha status` shows the job managers,
    `ha failover` hands over to a standby); while active it runs the submitted jobs on
    Spark, batch by batch, from their last checkpoint. Run several (on several hosts, sharing
    the backend and the --blobs directory, and the job outputs' file system) so that one takes
    over when the active dies. Prints one line per event (elected, batch committed, job
    finished...). SIGTERM or Ctrl-C leaves the election gracefully: a standby takes over at
    once, and the exit status is 0. A job manager whose Spark is lost (its JVM killed, or it
    never started) leaves the election too, and exits with status 69 (EX_UNAVAILABLE), so
    that systemd's Restart=on-failure or a pod's restart policy starts it again.

    \b
    Examples:
      ha jobs manager --id jm-1
      ha jobs manager --id jm-2 --master 'local[4]' --journal jm-2.jsonl
      ha --url zk://zk1:2181,zk2:2181/ha jobs manager --id host-a \\
         --blobs /shared/ha-blobs --master spark://spark-master:7077 --import mypkg.pipelines
    """
    from ..pipeline import run_job_manager
    from ..pipeline.spark import SparkSettings

    jo = _jobs_options(opts, cluster, blobs)
    check_master(master)
    need_spark("`ha jobs manager`")
    try:
        settings = SparkSettings(master=master, app_name=f"ha-jobmanager-{identity}")
    except ConfigurationError as exc:
        raise UsageFailure(str(exc)) from None
    try:
        address = parse_address(http) if http else None
    except ConfigurationError as exc:
        raise UsageFailure(str(exc)) from None
    run_as(identity)

    def go() -> Awaitable[str | None]:
        return run_job_manager(
            jo.url,
            jo.cluster,
            identity=identity,
            blobs=jo.blobs,
            imports=imports,
            spark=settings,
            hot_standby=hot_standby,
            warm_streams=hot_standby and warm_streams,
            journal=journal,
            on_event=print_event_json if as_json else print_event,
            http=address,
        )

    lost = run(opts, go, spark=True)
    if lost is not None:  # it has left the election; a supervisor restarts it (not 0)
        raise SparkLost(f"{lost}: job manager {identity} left the election")


class SparkLost(Failure):
    """``ha jobs manager`` left the election, its Spark lost: ``worker.EXIT_SPARK_LOST``."""

    exit_code = 69  # EX_UNAVAILABLE (worker.py: not imported here, it loads the job manager)
