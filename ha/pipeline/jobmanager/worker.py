"""A job manager process:
``python -m ha.pipeline.jobmanager.worker --url URL --cluster ID --id NAME ...``.

It takes part in the cluster's election (``/ha/CLUSTER/election``, as the component
``jobmanager`` of its HA services) and runs jobs while active. Each event of the job
manager is printed on stdout as one JSON line (``{"event": "batch_started", "t": ..., ...}``)
for whoever supervises it (the demo, the tests, the benchmarks). SIGTERM or SIGINT leaves the
election gracefully. ``run_job_manager`` is the same thing as a function (for ``ha jobs``).

Its exit status: 0 after SIGTERM or SIGINT; ``EXIT_SPARK_LOST`` (69, EX_UNAVAILABLE of
sysexits.h) once it left the election because its Spark was lost (its JVM killed, or never
built): it can run nothing more, and a supervisor's restart on failure (systemd's
``Restart=on-failure``, a Kubernetes pod's restart policy) brings it back with a new JVM.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

import anyio

from ..._process import die_with_parent, quit_on_signals
from ...drivers import connect
from ...election.timing import Timing
from ...http import ServedJobManager, serve_job_manager
from ..api.registry import import_pipelines
from ..spark import SparkSettings
from .manager import EventSink, JobManager

__all__ = ("EXIT_SPARK_LOST", "main", "run_job_manager")

EXIT_SPARK_LOST = 69  # EX_UNAVAILABLE: a service it needs is gone; not 0, so it is restarted


async def run_job_manager(
    url: str,
    cluster_id: str,
    *,
    identity: str,
    blobs: str,
    imports: Sequence[str] = (),
    spark: SparkSettings | None = None,
    hot_standby: bool = True,
    journal: str | None = None,
    checkpointing: bool = True,
    timing: Timing | None = None,
    prefix: str = "/ha",
    on_event: EventSink | None = None,
    http: tuple[str, int] | None = None,
    warm_streams: bool = False,
    **driver_options: Any,
) -> str | None:
    """Run one job manager until SIGTERM/SIGINT (then leave the election gracefully), or
    until its Spark is lost: then it has left the election too, and this returns why (None
    after a signal). ``http``: (host, port) to serve its endpoint and metrics on
    (``ha/http/jobs.py``)."""
    import_pipelines(imports)
    async with connect(url, **driver_options) as driver:
        manager = JobManager(
            driver,
            cluster_id,
            identity=identity,
            blobs=blobs,
            spark=spark,
            hot_standby=hot_standby,
            prefix=prefix,
            timing=timing,
            journal=journal,
            checkpointing=checkpointing,
            on_event=on_event,
            warm_streams=warm_streams,
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(quit_on_signals, manager.quit)
            if http is not None:
                served: ServedJobManager = manager  # checked here: tg.start takes any args
                bound = await tg.start(serve_job_manager, served, *http)
                logging.getLogger("ha.supervisor").info("http on %s:%d", *bound)
            await manager.run()
            tg.cancel_scope.cancel()
        await anyio.to_thread.run_sync(manager.warm.stop)  # Spark's JVM goes with us anyway
    return manager.spark_lost


def _print_event(name: str, fields: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"event": name, **fields}, default=str) + "\n")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m ha.pipeline.jobmanager.worker", description=__doc__
    )
    parser.add_argument("--url", required=True, help="backend URL, e.g. sqlite:///tmp/ha.db")
    parser.add_argument("--cluster", required=True, help="cluster id")
    parser.add_argument("--id", required=True, help="this job manager's identity")
    parser.add_argument("--blobs", required=True, help="blob directory shared by the cluster")
    parser.add_argument("--import", dest="imports", action="append", default=[],
                        help="module that registers pipelines (repeatable)")  # fmt: skip
    parser.add_argument("--master", default="local[2]", help="spark.master")
    parser.add_argument("--cold", action="store_true", help="build Spark only when elected")
    parser.add_argument("--journal", help="append election transitions to this JSON-lines file")
    parser.add_argument("--no-checkpoints", action="store_true", help="(benchmarks only)")
    parser.add_argument("--session-timeout", type=float, help="backend session timeout, s")
    parser.add_argument("--warm-streams", action="store_true",
                        help="run a tiny stream at start, and each stored stream once in"
                             " private while standby (hot standby for streaming jobs)")  # fmt: skip
    parser.add_argument("--die-with-parent", action="store_true")
    args = parser.parse_args(argv)
    if args.die_with_parent:
        die_with_parent()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    options = {} if args.session_timeout is None else {"session_timeout": args.session_timeout}
    lost = anyio.run(
        lambda: run_job_manager(
            args.url,
            args.cluster,
            identity=args.id,
            blobs=args.blobs,
            imports=args.imports,
            spark=SparkSettings(master=args.master, app_name=f"ha-jobmanager-{args.id}"),
            hot_standby=not args.cold,
            journal=args.journal,
            checkpointing=not args.no_checkpoints,
            on_event=_print_event,
            warm_streams=args.warm_streams,
            **options,
        )
    )
    if lost is not None:
        sys.exit(EXIT_SPARK_LOST)


if __name__ == "__main__":
    main()
