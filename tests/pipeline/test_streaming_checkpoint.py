"""``trim_source_logs`` and ``term_checkpoint`` on checkpoints laid out as Spark 4 writes them
(files copied from a real query's checkpoint, trimmed to what is read): no Spark needed. A copy
made while a JVM writes on: ``test_checkpoint_copy``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ha.pipeline.commit.spark_checkpoint import term_checkpoint, trim_source_logs


def _offsets(root: Path, batch: int, log_offset: int) -> None:
    d = root / "offsets"
    d.mkdir(parents=True, exist_ok=True)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1795534099106, "conf": {}}
    (d / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n" + json.dumps({"logOffset": log_offset}))
    (d / f".{batch}.crc").write_bytes(b"crc")


def _source(root: Path, n: int, index: int = 0) -> None:
    d = root / "sources" / str(index)
    d.mkdir(parents=True, exist_ok=True)
    entry = {"path": f"file:///in/events-{n:04d}.json", "timestamp": 1700006400000, "batchId": n}
    (d / str(n)).write_text(f"v1\n{json.dumps(entry)}")
    (d / f".{n}.crc").write_bytes(b"crc")


def _names(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def test_entries_no_batch_refers_to_are_removed(tmp_path: Path) -> None:
    for n in range(3):
        _source(tmp_path, n)
    _offsets(tmp_path, 0, 0)
    _offsets(tmp_path, 1, 1)  # the planner died after logging source offset 2
    removed = trim_source_logs(tmp_path)
    assert [p.name for p in removed] == [".2.crc", "2"]
    assert _names(tmp_path / "sources" / "0") == [".0.crc", ".1.crc", "0", "1"]
    assert trim_source_logs(tmp_path) == []  # a whole checkpoint is left as it is


def test_a_source_log_with_no_planned_batch_is_emptied_and_others_are_kept(
    tmp_path: Path,
) -> None:
    _source(tmp_path, 0)
    rate = tmp_path / "sources" / "1"
    rate.mkdir(parents=True)
    (rate / "0").write_text('v1\n{"startTimeMs":1}')  # not a file source: never touched
    trim_source_logs(tmp_path)
    assert _names(tmp_path / "sources" / "0") == []
    assert _names(rate) == ["0"]
    assert trim_source_logs(tmp_path / "missing") == []


def test_each_term_runs_on_a_trimmed_copy_of_the_newest_earlier_one(tmp_path: Path) -> None:
    first, removed = term_checkpoint(tmp_path, 7)
    assert removed == [] and _names(tmp_path) == [first.name]
    _source(first, 0)
    _source(first, 1)  # planned, then the driver was killed before its offset log entry
    _offsets(first, 0, 0)
    (first / "offsets" / ".1.3f2a.tmp").write_text("half")
    second, removed = term_checkpoint(tmp_path, 9)
    assert [p.name for p in removed] == ["1"]  # .crc files are never copied
    assert _names(second / "sources" / "0") == ["0"] and _names(second / "offsets") == ["0"]
    assert _names(first / "sources" / "0") == [".0.crc", ".1.crc", "0", "1"]  # untouched
    _source(first, 2)  # the old term's JVM writes on: into its own copy only
    assert term_checkpoint(tmp_path, 9) == (second, [])  # the term's query restarted
    third, _ = term_checkpoint(tmp_path, 12)
    assert _names(tmp_path) == [second.name, third.name]  # older copies go


def _commit(root: Path, batch: int) -> None:
    d = root / "commits"
    d.mkdir(parents=True, exist_ok=True)
    (d / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


@pytest.mark.parametrize(
    ("sources", "offsets", "commits", "newest"),
    [
        # as the walk in listing order tore it on tmpfs: sources/ copied before offsets/
        ([0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3], 2),
        # on ext4: offsets/ copied before commits/, which took one more commit
        ([0, 1, 2], [0, 1, 2], [0, 1, 2, 3], 2),
        # an offset log entry missing below the newest: Spark's "batch 2 doesn't exist"
        ([0, 1, 2, 3], [0, 1, 3], [0, 1], 1),
        # nothing Spark can restart at: the copy starts the stream again
        ([1], [1], [1], -1),
    ],
)
def test_a_copy_torn_when_it_was_made_is_rolled_back_to_its_newest_whole_batch(
    tmp_path: Path, sources: list[int], offsets: list[int], commits: list[int], newest: int
) -> None:
    first, _ = term_checkpoint(tmp_path, 1)  # an older, whole copy
    torn = tmp_path / "checkpoint-e000000000000003"  # made by an ha that walked in any order
    for n in sources:
        _source(torn, n)
    for n in offsets:
        _offsets(torn, n, n)
    for n in commits:
        _commit(torn, n)
    before = sorted(str(p.relative_to(torn)) for p in torn.rglob("*"))
    copy, removed = term_checkpoint(tmp_path, 5)
    kept = [n for n in offsets if n <= newest]
    assert _names(copy / "offsets") == [str(n) for n in kept]
    assert _names(copy / "commits") == [str(n) for n in commits if n <= newest]
    assert _names(copy / "sources" / "0") == [str(n) for n in sources if n <= newest]
    beyond = [n for log in (sources, offsets, commits) for n in log if n > newest]
    assert sorted(p.name for p in removed) == sorted(str(n) for n in beyond)
    assert sorted(str(p.relative_to(torn)) for p in torn.rglob("*")) == before  # untouched
    assert _names(tmp_path) == [torn.name, copy.name] and not first.exists()


def test_a_compacted_source_log_is_whole(tmp_path: Path) -> None:
    # Spark compacts a file source's log every 10 entries (9.compact holds 0..9) and deletes the
    # entries below, like the offset log entries below minBatchesToRetain.
    earlier = tmp_path / "checkpoint-e000000000000001"
    d = earlier / "sources" / "0"
    d.mkdir(parents=True)
    (d / "9.compact").write_text(
        "v1\n" + "\n".join(f'{{"path":"file:///in/{n}.json","batchId":{n}}}' for n in range(10))
    )
    for n in (10, 11):
        _source(earlier, n)
        _offsets(earlier, n, n)
    _commit(earlier, 10)
    copy, removed = term_checkpoint(tmp_path, 2)
    assert removed == []
    assert _names(copy / "sources" / "0") == ["10", "11", "9.compact"]
    assert _names(copy / "offsets") == ["10", "11"] and _names(copy / "commits") == ["10"]
