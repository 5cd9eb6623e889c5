"""A hot standby rehearses the streaming jobs it may take over (``stream_rehearsal``): the job's
own query runs once, on a copy of a few input files, into a private directory; nothing of it
is visible. On a real SparkSession (local[2]), one for the module."""

from __future__ import annotations

import threading
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("pyspark")

import ha  # noqa: E402
from ha.drivers.memory import MemoryDriver  # noqa: E402
from ha.pipeline.api.plan import make_plan  # noqa: E402
from ha.pipeline.api.registry import Param, get_pipeline  # noqa: E402
from ha.pipeline.api.streaming import file_source, streaming_pipeline  # noqa: E402
from ha.pipeline.client import submit_job, wait_for_job  # noqa: E402
from ha.pipeline.commit import committed_batches  # noqa: E402
from ha.pipeline.examples.events import SCHEMA, generate_events  # noqa: E402
from ha.pipeline.jobmanager import JobManager  # noqa: E402
from ha.pipeline.jobmanager import rehearsal as stream_rehearsal  # noqa: E402
from ha.pipeline.jobmanager.rehearsal import rehearse, sample_files  # noqa: E402
from ha.pipeline.spark import WarmSession  # noqa: E402
from ha.stores import Stores  # noqa: E402
from tests.support.spark_session import spark  # noqa: E402
from tests.support.stores import win  # noqa: E402

__all__ = ("spark",)  # the fixture

pytestmark = [pytest.mark.spark]

FAST = ha.Timing(backoff=ha.Backoff(initial=0.005, maximum=0.05), hook_timeout=5.0)
ROWS = 50
calls: list[tuple[str, int]] = []  # (input directory, rows) per call of the pipeline below


def _snapshot(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*"))}


@streaming_pipeline(
    "test.rehearsal.count",
    source=file_source("json", SCHEMA),
    params={"input": Param(str), "delay_seconds": Param(float, 0.0)},
    sort_by=("user", "action"),
    replace=True,
)
def _count(spark: Any, params: Any, batch: Any) -> Any:
    calls.append((params["input"], batch.count()))
    return get_pipeline("events.count").compute(spark, params, batch)


def test_sample_files_skips_hidden_files_and_a_missing_directory(tmp_path: Path) -> None:
    for name in ("_SUCCESS", ".a.json.tmp", "b.json", "c.json"):
        (tmp_path / name).write_text("{}\n")
    (tmp_path / "sub").mkdir()
    assert [p.name for p in sample_files(tmp_path, 5)] in (
        ["b.json", "c.json"],
        ["c.json", "b.json"],
    )
    assert len(sample_files(tmp_path, 1)) == 1
    assert sample_files(tmp_path / "missing", 1) == []


def test_a_rehearsal_runs_the_jobs_query_once_on_a_copy_and_shows_nothing(
    spark: Any, tmp_path: Path
) -> None:
    inputs, out = tmp_path / "in", tmp_path / "out"
    generate_events(inputs, files=3, rows=ROWS, users=5)
    before = _snapshot(tmp_path)
    plan = make_plan("test.rehearsal.count", {"input": str(inputs)}, str(out), job_id="j")
    calls.clear()
    assert rehearse(spark, get_pipeline(plan.pipeline), plan, stop=threading.Event())
    # one micro-batch of one file (the source's files_per_batch), read from a private copy
    [(directory, rows)] = calls
    assert rows == ROWS and not Path(directory).exists() and Path(directory) != inputs
    assert _snapshot(tmp_path) == before  # the input untouched, no output, no checkpoint


def _any_source(spark: Any, params: Any) -> Any:
    return spark.readStream.schema(SCHEMA).json(params["input"])


streaming_pipeline(
    "test.rehearsal.custom",
    source=_any_source,
    params={"input": Param(str), "delay_seconds": Param(float, 0.0)},
    replace=True,
)(_count)


def test_no_rehearsal_once_stopped_without_input_or_without_a_file_source(
    spark: Any, tmp_path: Path
) -> None:
    generate_events(tmp_path / "in", files=1, rows=ROWS, users=5)
    (tmp_path / "empty").mkdir()

    def tried(pipeline: str, inputs: Path, stop: threading.Event) -> bool:
        plan = make_plan(pipeline, {"input": str(inputs)}, str(tmp_path / "out"))
        return rehearse(spark, get_pipeline(pipeline), plan, stop=stop)

    calls.clear()
    stopped = threading.Event()
    stopped.set()
    assert not tried("test.rehearsal.count", tmp_path / "in", stopped)
    assert not tried("test.rehearsal.count", tmp_path / "empty", threading.Event())
    assert not tried("test.rehearsal.custom", tmp_path / "in", threading.Event())
    assert calls == [] and not (tmp_path / "out").exists()


@pytest.mark.anyio
@pytest.mark.timeout(300)
async def test_a_warm_standby_rehearses_a_running_stream_and_the_active_does_not(
    spark: Any, tmp_path: Path
) -> None:
    generate_events(tmp_path / "in", files=3, rows=ROWS, users=5)
    seen: list[tuple[str, str, dict[str, Any]]] = []
    blobs = tmp_path / "blobs"
    cluster = f"rehearsal-{tmp_path.name}"  # memory clusters live as long as the process

    async def serve(who: str, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        async with MemoryDriver(cluster, session_timeout=2.0) as driver:
            jm = JobManager(
                driver, "c1", identity=who, blobs=blobs, spark=WarmSession.of(spark),
                timing=FAST, poll_interval=0.05, warm_streams=True,
                on_event=lambda event, fields: seen.append((who, event, fields)),
            )  # fmt: skip
            await jm.run(task_status=task_status)

    def events(name: str) -> list[tuple[str, dict[str, Any]]]:
        return [(who, f) for who, e, f in seen if e == name]

    async with anyio.create_task_group() as tg:
        await tg.start(serve, "a")
        with anyio.fail_after(60):
            while not events("active"):
                await anyio.sleep(0.01)
        tg.start_soon(serve, "b")
        with anyio.fail_after(120):
            while not [who for who, _ in events("spark_warm") if who == "b"]:
                await anyio.sleep(0.05)
        # slow micro-batches: the job is still stored when the standby looks
        params = {"input": str(tmp_path / "in"), "delay_seconds": 1.0}
        plan = make_plan("test.rehearsal.count", params, str(tmp_path / "out"), job_id="s")
        async with MemoryDriver(cluster) as client:
            await submit_job(client, "c1", plan)
            with anyio.fail_after(120):
                status = await wait_for_job(client, "c1", "s", blobs=blobs, poll=0.05)
        assert status.state == "succeeded", status
        tg.cancel_scope.cancel()
    assert [(who, f["job"]) for who, f in events("stream_rehearsed")] == [("b", "s")]
    assert {who for who, _ in events("batch_committed")} == {"a"}
    assert committed_batches(tmp_path / "out") == [0, 1, 2]


@pytest.mark.anyio
async def test_a_standby_forgets_finished_jobs_and_rehearses_a_job_id_used_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop's memory of rehearsed jobs follows the stored plans: it does not grow with
    every job ever run, and a job id submitted again (a new job) is rehearsed again. The
    rehearsal itself is stood in for here; the tests above run it on Spark."""
    rehearsed: list[str] = []
    monkeypatch.setattr(
        stream_rehearsal,
        "rehearse",
        lambda spark, spec, plan, stop: rehearsed.append(plan.job_id) or True,
    )
    (tmp_path / "in").mkdir()
    params = {"input": str(tmp_path / "in")}

    async def rehearsed_as(job_ids: list[str]) -> None:
        with anyio.fail_after(10):
            while rehearsed != job_ids:
                await anyio.sleep(0.01)

    async with MemoryDriver(f"forget-{tmp_path.name}") as driver:
        stores = Stores(driver, "c1", blobs=tmp_path / "blobs", lease=await win(driver))

        async def store(job_id: str) -> None:
            plan = make_plan("test.rehearsal.count", params, str(tmp_path / job_id), job_id=job_id)
            await stores.execution_plans.put(job_id, plan.to_bytes())

        async with anyio.create_task_group() as tg:
            tg.start_soon(
                partial(
                    stream_rehearsal.rehearse_stored_streams,
                    stores,
                    None,
                    leading=threading.Event(),
                    emit=lambda *a, **k: None,
                    poll=0.01,
                )
            )
            await store("s")
            await rehearsed_as(["s"])
            assert await stores.execution_plans.remove("s")
            await store("t")  # rehearsed after a listing without s
            await rehearsed_as(["s", "t"])
            await store("s")
            await rehearsed_as(["s", "t", "s"])
            tg.cancel_scope.cancel()
