"""The pipeline on a real SparkSession (local[2]): the example's results, repeatable output
bytes, commits of redone batches, job-group cancellation. One session for the module."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from ha.pipeline import get_pipeline  # noqa: E402
from ha.pipeline.commit import (  # noqa: E402
    committed_batches,
    output_digest,
    read_output,
    stage_batch,
    write_batch,
)
from ha.pipeline.examples.clicks import generate_clicks  # noqa: E402
from ha.pipeline.spark import (  # noqa: E402
    SparkSettings,
    WarmSession,
    cancel_job_group,
    job_group,
)
from tests.support.spark_session import spark  # noqa: E402

__all__ = ("spark",)  # the fixture

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def clicks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("clicks")
    generate_clicks(root, days=3, rows_per_day=4_000, users=40, seed=11)
    return root


def test_session_has_the_field_notes_settings(spark) -> None:  # type: ignore[no-untyped-def]
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "4"
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    assert os.environ["SPARK_LOCAL_IP"]
    assert spark.sparkContext.master == "local[2]"


def _reference_sessions(path: Path, gap_s: int) -> list[tuple[object, ...]]:
    """Sessionize in plain pandas: the answer the Spark pipeline must give."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    df = table.drop(["ts"]).to_pandas()
    df["ms"] = table.column("ts").cast(pa.int64()).to_numpy()  # milliseconds since 1970
    df = df.sort_values(["user_id", "ms", "page", "action"], kind="stable")
    rows = []
    for user, clicks in df.groupby("user_id", sort=True):
        current: list[tuple[int, str, str]] = []
        for ms, page, action in zip(clicks["ms"], clicks["page"], clicks["action"], strict=True):
            if current and ms - current[-1][0] > gap_s * 1000:
                rows.append(_summarize(int(user), current))
                current = []
            current.append((int(ms), page, action))
        rows.append(_summarize(int(user), current))
    return sorted(rows)


def _summarize(user: int, clicks: list[tuple[int, str, str]]) -> tuple[object, ...]:
    start, end = clicks[0][0], clicks[-1][0]
    return (
        user,
        f"{user}-{start}",
        end - start,
        len(clicks),
        len({p for _, p, _ in clicks}),
        sum(a == "purchase" for _, _, a in clicks),
        clicks[0][1],
        clicks[-1][1],
    )


def test_sessionize_matches_a_plain_python_reference(spark, clicks: Path) -> None:  # type: ignore[no-untyped-def]
    spec = get_pipeline("clicks.sessionize")
    params = spec.check_params({"input": str(clicks), "gap_seconds": 900})
    batch = spec.plan_batches(params)[1]
    rows = spec(spark, params, batch).collect()
    got = sorted(
        (
            r.user_id,
            r.session_id,
            r.duration_ms,
            r.clicks,
            r.distinct_pages,
            r.purchases,
            r.first_page,
            r.last_page,
        )
        for r in rows
    )
    assert got == _reference_sessions(Path(batch), 900)
    assert sum(r[3] for r in got) == 4_000  # every click is in exactly one session


def _run_job(spark, clicks: Path, out: Path, files: int = 1) -> None:  # type: ignore[no-untyped-def]
    spec = get_pipeline("clicks.sessionize")
    params = spec.check_params({"input": str(clicks)})
    for index, batch in enumerate(spec.plan_batches(params)):
        df = spec(spark, params, batch)
        write_batch(df, out, index, files=files, sort_by=spec.sort_by)


def test_two_runs_give_the_same_bytes_and_a_redo_changes_nothing(
    spark,
    clicks: Path,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    _run_job(spark, clicks, tmp_path / "a", files=2)
    _run_job(spark, clicks, tmp_path / "b", files=2)
    assert committed_batches(tmp_path / "a") == [0, 1, 2]
    assert output_digest(tmp_path / "a") == output_digest(tmp_path / "b")
    assert len(list((tmp_path / "a" / "batch-00000").iterdir())) == 2

    # A redone batch (a crash after the commit, before the checkpoint) and a deposed
    # leader's late commit of the same batch: still one copy, same bytes.
    spec = get_pipeline("clicks.sessionize")
    params = spec.check_params({"input": str(clicks)})
    batch = spec.plan_batches(params)[1]
    late = stage_batch(spec(spark, params, batch), tmp_path / "a", 1, files=2, sort_by=spec.sort_by)
    outcome = write_batch(
        spec(spark, params, batch), tmp_path / "a", 1, files=2, sort_by=spec.sort_by
    )
    assert outcome == "identical"
    from ha.pipeline.commit import commit_batch

    assert commit_batch(late, tmp_path / "a", 1) == "identical"
    assert output_digest(tmp_path / "a") == output_digest(tmp_path / "b")

    rows = read_output(spark, tmp_path / "a", order_by=["user_id", "session_start"]).collect()
    assert len(rows) == len({r.session_id for r in rows})  # no session twice
    keys = [(r.user_id, r.session_start) for r in rows]
    assert keys == sorted(keys)


def test_a_cancelled_job_group_stops_its_job(spark) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    outcome: dict[str, object] = {}

    def work() -> None:
        try:
            with job_group(spark, "ha-test-cancel"):
                # Minutes of work: a sum over ten billion generated rows.
                spark.range(0, 10_000_000_000, 1, 2).agg(F.sum("id")).collect()
            outcome["result"] = "finished"
        except Exception as exc:  # what a cancelled action raises in its thread
            outcome["result"] = exc

    thread = threading.Thread(target=work)
    thread.start()
    deadline = time.monotonic() + 30
    while not spark.sparkContext.statusTracker().getActiveJobsIds() and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    cancel_job_group(spark, "ha-test-cancel")
    thread.join(30)
    assert not thread.is_alive()
    assert time.monotonic() - started < 10
    assert isinstance(outcome["result"], Exception)
    assert "cancel" in str(outcome["result"]).lower()
    # The worker thread is reusable: its next job is not in the cancelled group.
    assert spark.range(10).count() == 10


def test_warm_session_hands_over_the_built_session(spark) -> None:  # type: ignore[no-untyped-def]
    warm = WarmSession(SparkSettings(app_name="ha-test-pipeline"))
    assert not warm.ready
    warm.start()
    assert warm.get(timeout=60) is not None
    assert warm.ready
