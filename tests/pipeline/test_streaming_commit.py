"""The fenced micro-batch commit (``stream_commit``) on the memory backend, without Spark.

A staged directory stands in for Spark's output. The verdicts come from outside the writer:
the backend's records and the output directory, after the fence refused or let a write through.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from ha.drivers.memory import MemoryDriver
from ha.errors import Fenced, TransactionFailed
from ha.pipeline.api.streaming import checkpoint_dir, is_stream_plan
from ha.pipeline.client import count_commits
from ha.pipeline.commit import STAGING, committed_batches, output_digest
from ha.pipeline.commit.stream_commit import commit_micro_batch, read_commits, staged_digest
from ha.pipeline.layout import JobLayout
from ha.stores import Writer
from tests.support.stores import win

pytestmark = pytest.mark.anyio

LAYOUT = JobLayout("c1")
_clusters = itertools.count()


def stage(output: Path, batch_id: int, rows: str, token: str) -> Path:
    staging = output / STAGING / f"batch-{batch_id:05d}.{token}"
    staging.mkdir(parents=True)
    (staging / "part-00000.parquet").write_text(rows)
    return staging


async def test_records_then_shows_and_a_deposed_writer_lands_nothing(tmp_path: Path) -> None:
    name = f"stream-{next(_clusters)}"
    out = tmp_path / "out"
    async with MemoryDriver(name) as first, MemoryDriver(name) as second:
        old = Writer(first, await win(first))
        first_commit = await commit_micro_batch(
            old, LAYOUT, "j", 0, stage(out, 0, "a", "t0"), str(out)
        )
        assert first_commit == "created"
        staged = stage(out, 1, "b", "t1")  # old stages batch 1, then is deposed
        new = Writer(second, await win(second))
        with pytest.raises(Fenced):
            await commit_micro_batch(old, LAYOUT, "j", 1, staged, str(out))
        assert committed_batches(out) == [0] and not staged.exists()  # nothing shown
        assert [r.batch_id for r in await read_commits(second, LAYOUT, "j")] == [0]

        # The new active redoes batch 1 (same bytes) and goes on; the record takes its epoch.
        redo = stage(out, 1, "b", "t2")
        digest = staged_digest(redo)
        assert await commit_micro_batch(new, LAYOUT, "j", 1, redo, str(out)) == "created"
        records = await read_commits(second, LAYOUT, "j")
        assert [(r.batch_id, r.epoch) for r in records] == [
            (0, old.lease.epoch),
            (1, new.lease.epoch),
        ]
        assert new.lease.epoch > old.lease.epoch
        assert records[1].sha256 == digest == staged_digest(out / "batch-00001")


async def test_a_batch_redone_after_its_record_is_identical_and_a_gap_is_refused(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    async with MemoryDriver(f"stream-{next(_clusters)}") as driver:
        writer = Writer(driver, await win(driver))
        await commit_micro_batch(writer, LAYOUT, "j", 0, stage(out, 0, "a", "t0"), str(out))
        before = output_digest(out)
        again = await commit_micro_batch(writer, LAYOUT, "j", 0, stage(out, 0, "a", "t1"), str(out))
        assert again == "identical" and output_digest(out) == before
        with pytest.raises(TransactionFailed):  # batch 2 without batch 1's record
            await commit_micro_batch(writer, LAYOUT, "j", 2, stage(out, 2, "c", "t2"), str(out))
        assert committed_batches(out) == [0]


def test_a_stream_plan_is_known_without_the_registry(tmp_path: Path) -> None:
    from ha.pipeline.api.plan import JobPlan, make_plan
    from ha.pipeline.examples.events import generate_events

    generate_events(tmp_path / "in", files=1, rows=3)
    plan = make_plan("events.count", {"input": str(tmp_path / "in")}, str(tmp_path / "o"))
    assert is_stream_plan(plan)
    assert not is_stream_plan(JobPlan("b", "clicks.sessionize", {}, ("/d/c.parquet",), "/o"))
    assert not is_stream_plan(JobPlan("b", "x", {}, ({"day": 1}, {"day": 2}), "/o"))
    assert checkpoint_dir(plan.output).parent == Path(plan.output)


async def test_a_submitted_stream_has_no_batch_count_yet(tmp_path: Path) -> None:
    from ha.pipeline.api.plan import make_plan
    from ha.pipeline.client import job_status, submit_job
    from ha.pipeline.examples.events import generate_events

    generate_events(tmp_path / "in", files=1, rows=3)
    plan = make_plan("events.count", {"input": str(tmp_path / "in")}, str(tmp_path / "o"))
    async with MemoryDriver(f"stream-{next(_clusters)}") as driver:
        await submit_job(driver, "c1", plan)
        status = await job_status(driver, "c1", plan.job_id, blobs=tmp_path / "blobs")
    assert (status.state, status.batches_done, status.batches) == ("submitted", 0, None)


async def test_committed_micro_batches_are_counted_without_reading_a_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"stream-{next(_clusters)}"
    out = tmp_path / "out"
    async with MemoryDriver(name) as driver:
        assert await count_commits(driver, LAYOUT, "j") == 0
        writer = Writer(driver, await win(driver))
        for n in range(3):
            await commit_micro_batch(writer, LAYOUT, "j", n, stage(out, n, "r", f"t{n}"), str(out))
        gets: list[str] = []
        real_get = driver.get

        async def get(path: str) -> object:
            gets.append(path)
            return await real_get(path)

        monkeypatch.setattr(driver, "get", get)
        # a takeover counts them: its cost must not grow with the stream's age
        assert await count_commits(driver, LAYOUT, "j") == 3
        assert gets == []
