"""``trim_source_logs`` on checkpoints laid out as Spark 4 writes them (files copied from a real
query's checkpoint, trimmed to what is read): no Spark needed."""

from __future__ import annotations

import json
from pathlib import Path

from ha.pipeline.spark_checkpoint import term_checkpoint, trim_source_logs


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
