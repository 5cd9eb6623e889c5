"""The pipeline pieces that need no Spark: registry, plans, commits on the file system,
and the data generators."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ha.errors import ConfigurationError, CorruptData
from ha.pipeline import Param, get_pipeline, pipeline, pipeline_names
from ha.pipeline.api.plan import JobPlan, make_plan, output_path
from ha.pipeline.api.registry import unregister
from ha.pipeline.client import JobState, JobStatus
from ha.pipeline.commit import (
    batch_dir,
    clean_staging,
    commit_batch,
    committed_batches,
    output_digest,
    output_files,
)
from ha.pipeline.jobmanager.attempts import AttemptRecord
from ha.pipeline.layout import JobLayout, failure_record, read_failures
from ha.report.synthetic import generate_journal
from ha.stores import JobOutcome, Layout


def _compute(spark, params, batch):  # type: ignore[no-untyped-def]
    raise AssertionError("not called in these tests")


def _positive_parts(params):  # type: ignore[no-untyped-def]
    if params["parts"] <= 0:
        raise ValueError("parts must be positive")


@pytest.fixture
def toy(tmp_path: Path):  # type: ignore[no-untyped-def]
    p = pipeline(
        "test.toy",
        batches=lambda params: [f"part-{i}" for i in range(params["parts"])],
        params={"parts": Param(int, 3), "label": Param(str), "ratio": Param(float, 0.5)},
        validate=_positive_parts,
    )(_compute)
    yield p
    unregister("test.toy")


# --- registry ------------------------------------------------------------------------------


def test_builtin_example_is_registered() -> None:
    assert "clicks.sessionize" in pipeline_names()
    spec = get_pipeline("clicks.sessionize")
    assert spec.sort_by == ("user_id", "session_start")
    assert "session" in spec.description.lower()


def test_unknown_pipeline_names_the_registered_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown pipeline 'nope'.*clicks\.sessionize"):
        get_pipeline("nope")


def test_params_get_defaults_and_strings_are_converted(toy) -> None:  # type: ignore[no-untyped-def]
    assert toy.check_params({"label": "x"}) == {"parts": 3, "label": "x", "ratio": 0.5}
    assert toy.check_params({"label": "x", "parts": "7", "ratio": 2}) == {
        "parts": 7,
        "label": "x",
        "ratio": 2.0,
    }


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "needs parameter 'label'"),
        ({"label": "x", "colour": 1}, "has no parameter 'colour'"),
        ({"label": "x", "parts": "many"}, "'parts' must be int"),
        ({"label": "x", "parts": True}, "'parts' must be int"),
        ({"label": 3}, "'label' must be str"),
        ({"label": "x", "parts": 0}, "parts must be positive"),
    ],
)
def test_malformed_params_are_refused(toy, params, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigurationError, match=message):
        toy.check_params(params)


def test_a_second_pipeline_under_a_taken_name_is_refused(toy) -> None:  # type: ignore[no-untyped-def]
    def other(spark, params, batch):  # type: ignore[no-untyped-def]
        return None

    with pytest.raises(ConfigurationError, match="already registered"):
        pipeline("test.toy", batches=lambda p: [1])(other)


def test_bad_pipeline_names_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="bad pipeline name"):
        pipeline("no spaces", batches=lambda p: [1])(_compute)


# --- plans ---------------------------------------------------------------------------------


def test_plan_lists_batches_once_and_round_trips(toy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plan = make_plan("test.toy", {"label": "a"}, str(tmp_path / "out"), job_id="job-1")
    assert plan.batches == ("part-0", "part-1", "part-2")
    assert plan.output == str(tmp_path / "out")
    again = JobPlan.from_bytes(plan.to_bytes())
    assert again == plan


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pipeline": "nope"}, "unknown pipeline"),
        ({"params": {"label": "a", "parts": -1}}, "parts must be positive"),
        ({"job_id": "bad id!"}, "bad job id"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"output": "s3://bucket/x"}, "local directory"),
    ],
)
def test_malformed_submissions_are_refused(toy, tmp_path: Path, kwargs, message) -> None:  # type: ignore[no-untyped-def]
    args = {
        "pipeline": "test.toy",
        "params": {"label": "a"},
        "output": str(tmp_path / "out"),
    } | kwargs
    with pytest.raises(ConfigurationError, match=message):
        make_plan(args.pop("pipeline"), args.pop("params"), args.pop("output"), **args)


def test_a_non_empty_output_is_refused(toy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigurationError, match="not empty"):
        make_plan("test.toy", {"label": "a"}, str(tmp_path / "out"))


def test_a_pipeline_without_batches_is_refused(tmp_path: Path) -> None:
    pipeline("test.empty", batches=lambda p: [])(_compute)
    try:
        with pytest.raises(ConfigurationError, match="no batches"):
            make_plan("test.empty", {}, str(tmp_path / "out"))
    finally:
        unregister("test.empty")


def test_file_uri_output_is_a_path(tmp_path: Path) -> None:
    assert output_path(f"file://{tmp_path}/o") == tmp_path / "o"


@pytest.mark.parametrize("data", [b"{", b"[]", b'{"version": 1}', b'{"version": 9}', b"\xff"])
def test_a_corrupt_plan_names_where_it_came_from(data: bytes) -> None:
    with pytest.raises(CorruptData, match="/plans/x"):
        JobPlan.from_bytes(data, "/plans/x")


# --- commits (directories made by hand: the Spark side is in test_pipeline_spark) ----------


def _staged(root: Path, name: str, files: dict[str, bytes]) -> Path:
    d = root / "_staging" / name
    d.mkdir(parents=True)
    for fname, data in files.items():
        (d / fname).write_bytes(data)
    return d


def test_commit_creates_then_a_redo_with_the_same_bytes_changes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = _staged(out, "batch-00003.a", {"part-00000.parquet": b"rows"})
    assert commit_batch(first, out, 3) == "created"
    assert not first.exists()
    digest = output_digest(out)
    redo = _staged(out, "batch-00003.b", {"part-00000.parquet": b"rows"})
    assert commit_batch(redo, out, 3) == "identical"
    assert not redo.exists()
    assert output_digest(out) == digest
    assert committed_batches(out) == [3]
    assert [p.name for p in output_files(out)] == ["part-00000.parquet"]


def test_different_content_is_swapped_in_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    commit_batch(_staged(out, "batch-00000.a", {"part-00000.parquet": b"old"}), out, 0)
    redo = _staged(out, "batch-00000.b", {"part-00000.parquet": b"new", "part-00001.parquet": b"2"})
    assert commit_batch(redo, out, 0) == "replaced"
    target = batch_dir(out, 0)
    assert sorted(p.name for p in target.iterdir()) == ["part-00000.parquet", "part-00001.parquet"]
    assert (target / "part-00000.parquet").read_bytes() == b"new"
    assert not redo.exists()


def test_many_late_writers_leave_exactly_one_copy(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for n in range(5):
        commit_batch(_staged(out, f"batch-00001.{n}", {"part-00000.parquet": b"same"}), out, 1)
    assert committed_batches(out) == [1]
    assert len(output_files(out)) == 1


def test_staging_is_cleaned_and_never_read(tmp_path: Path) -> None:
    out = tmp_path / "out"
    commit_batch(_staged(out, "batch-00000.a", {"part-00000.parquet": b"x"}), out, 0)
    _staged(out, "batch-00001.dead", {"part-00000.parquet": b"half"})
    before = output_digest(out)
    assert committed_batches(out) == [0]
    assert clean_staging(out) == 1
    assert output_digest(out) == before
    assert not any((out / "_staging").iterdir())


def test_a_late_commit_during_clean_staging_never_hollows_a_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A deposed leader's commit_batch renames its staging directory into batch-00004 while the
    # new leader's clean_staging is deleting that same directory: the rename lands right after
    # the cleanup's first unlink (a hook on os.unlink, which shutil.rmtree calls per file).
    out = tmp_path / "out"
    manifest = {f"part-{n:05d}.parquet": f"rows {n}".encode() for n in range(4)}
    staged = _staged(out, "batch-00004.late", manifest)
    outcome: list[object] = []
    real_unlink = os.unlink

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if not outcome:
            try:
                outcome.append(commit_batch(staged, out, 4))
            except FileNotFoundError as exc:  # the cleanup moved it away first
                outcome.append(exc)
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    clean_staging(out)
    monkeypatch.undo()

    assert outcome, "the late commit never ran during the cleanup"
    for index in committed_batches(out):  # every committed batch holds all of its manifest
        d = batch_dir(out, index)
        assert {p.name: p.read_bytes() for p in d.iterdir()} == manifest, d
    if outcome[0] == "created":
        assert committed_batches(out) == [4]
    else:
        assert isinstance(outcome[0], FileNotFoundError) and committed_batches(out) == []
    assert not any((out / "_staging").iterdir())


def test_digest_depends_on_names_and_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    commit_batch(_staged(a, "batch-00000.x", {"part-00000.parquet": b"x"}), a, 0)
    commit_batch(_staged(b, "batch-00001.x", {"part-00000.parquet": b"x"}), b, 1)
    assert output_digest(a) != output_digest(b)


# --- generators ----------------------------------------------------------------------------


def test_click_generator_is_repeatable(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from ha.pipeline.examples.clicks import generate_clicks

    first = generate_clicks(tmp_path / "a", days=2, rows_per_day=5_000, users=50, seed=4)
    second = generate_clicks(tmp_path / "b", days=2, rows_per_day=5_000, users=50, seed=4)
    assert [p.name for p in first] == ["clicks-0000.parquet", "clicks-0001.parquet"]
    for x, y in zip(first, second, strict=True):
        assert x.read_bytes() == y.read_bytes()
    table = pq.read_table(first[0])
    assert table.num_rows == 5_000
    assert table.column_names == ["user_id", "ts", "page", "action"]


def test_journal_generator_truth(tmp_path: Path) -> None:
    truth = generate_journal(tmp_path, events=5_000, elections=2, overlaps=3, seed=5)
    lines = [json.loads(line) for f in truth.files for line in f.read_text().splitlines()]
    assert len(lines) == truth.events
    assert set(lines[0]) == {"ts", "election", "identity", "from", "to", "epoch", "cause"}
    assert len(truth.overlaps) == 3
    for o in truth.overlaps:
        assert o.end - o.start == pytest.approx(0.5, abs=1e-5)
    actives = [r for r in lines if r["to"] == "active"]
    assert all(isinstance(r["epoch"], int) for r in actives)
    assert all(r["epoch"] is None for r in lines if r["to"] != "active")
    for election, n in truth.intervals.items():
        assert sum(r["election"] == election for r in actives) == n
        epochs = [
            r["epoch"] for r in sorted(actives, key=lambda r: r["ts"]) if r["election"] == election
        ]
        assert epochs == sorted(set(epochs))  # strictly increasing
    assert sum(truth.failovers.values()) + 3 == sum(n - 1 for n in truth.intervals.values())


def test_file_system_supports_atomic_exchange(tmp_path: Path) -> None:
    # The commit's "replaced" path relies on renameat2(RENAME_EXCHANGE) where available.
    from ha.pipeline.commit.output import _exchange

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "f").write_text("a")
    (b / "f").write_text("b")
    _exchange(a, b)
    assert (a / "f").read_text() == "b" and (b / "f").read_text() == "a"


# --- canonical Parquet footers -------------------------------------------------------------


def _parquet(path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"k": [1, 2, 2, 3] * 50, "s": ["a", "b", "c", "d"] * 50})
    pq.write_table(table, path, compression="snappy")
    return path


def _permute_encodings(path: Path) -> None:
    """Reverse each encodings list in the footer, as another JVM's HashSet order would."""
    import struct

    from ha.pipeline.commit import parquet as pqf

    data = bytearray(path.read_bytes())
    (length,) = struct.unpack("<I", data[-8:-4])
    start = len(data) - 8 - length
    reader = pqf._Reader(bytes(data[start:-8]))
    reader.struct(())
    assert reader.lists and any(len(v) > 1 for _, _, v in reader.lists)
    for lo, hi, values in reader.lists:
        data[start + lo : start + hi] = b"".join(pqf._zigzag_bytes(v) for v in reversed(values))
    path.write_bytes(bytes(data))


def test_footers_that_differ_only_in_encoding_order_become_identical(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from ha.pipeline.commit.parquet import canonicalize_footer

    a, b = _parquet(tmp_path / "a.parquet"), _parquet(tmp_path / "b.parquet")
    _permute_encodings(b)
    assert a.read_bytes() != b.read_bytes()
    assert pq.read_table(b).equals(pq.read_table(a))  # still a valid file
    canonicalize_footer(a)
    assert canonicalize_footer(b) is True
    assert a.read_bytes() == b.read_bytes()
    assert canonicalize_footer(b) is False  # idempotent
    assert pq.read_table(b).equals(pq.read_table(tmp_path / "a.parquet"))


def test_a_file_that_is_not_parquet_is_refused(tmp_path: Path) -> None:
    from ha.pipeline.commit.parquet import FooterError, canonicalize_footer

    bad = tmp_path / "x.parquet"
    bad.write_bytes(b"PAR1" + b"\0" * 20 + b"\xff\xff\x00\x00PAR1")
    with pytest.raises(FooterError):
        canonicalize_footer(bad)


def test_command_line_params_become_typed_at_submission(toy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from ha.pipeline import parse_params

    raw = parse_params(["parts=2", "label=a=b", "ratio=0.25"])
    plan = make_plan("test.toy", raw, str(tmp_path / "out"))
    assert dict(plan.params) == {"parts": 2, "label": "a=b", "ratio": 0.25}
    for bad in (["parts"], ["=1"], ["label=a", "label=b"]):
        with pytest.raises(ConfigurationError):
            parse_params(bad)


# --- the job manager's nodes and job states -------------------------------------------------


def test_job_layout_names_the_same_nodes_as_before() -> None:
    layout = JobLayout("nightly", "/x")
    # the cluster's one election, the HA services' (#15); the job managers' own before
    assert layout.election == "/x/nightly/election"
    assert layout.old_election == "/x/nightly/jobmanager"
    assert layout.inbox == "/x/nightly/pipeline/inbox"
    assert layout.submission("j1") == "/x/nightly/pipeline/inbox/j1"
    assert layout.cancel("j1") == "/x/nightly/pipeline/cancel/j1"
    assert layout.failure("j1") == "/x/nightly/pipeline/failures/j1"
    assert layout.attempt("j1") == "/x/nightly/pipeline/attempts/j1"
    # it is the stores' layout too
    assert layout.execution_plans == Layout("nightly", "/x").execution_plans
    assert JobLayout("nightly").root == "/ha/nightly"
    with pytest.raises(ConfigurationError):
        layout.cancel("../j1")
    with pytest.raises(ConfigurationError):
        JobLayout("a/b")


def test_job_states_keep_the_strings_that_are_printed_and_stored() -> None:
    assert [s.value for s in JobState] == [
        "submitted", "pending", "running", "succeeded", "failed", "cancelled", "unknown",
    ]  # fmt: skip
    assert {s for s in JobState if s.finished} == {
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.CANCELLED,
    }
    for outcome in JobOutcome:  # a job result's outcome is a job state
        assert JobState(outcome.value) == outcome.value
    status = JobStatus("j1", JobState.RUNNING)
    assert status.to_json()["state"] == "running" and f"{status.state}" == "running"
    assert json.dumps(status.to_json())  # plain JSON, as `ha jobs status --json` prints it


def test_the_failure_record_keeps_its_bytes() -> None:
    data = failure_record(2, "batch 1: boom")
    assert json.loads(data) == {"failures": 2, "last_error": "batch 1: boom"}
    assert data == b'{"failures": 2, "last_error": "batch 1: boom"}'
    assert read_failures("/p", data) == 2


@pytest.mark.parametrize(
    "data", [b"not json", b"[1]", b"{}", b'{"failures": -1}', b'{"failures": true}']
)
def test_a_bad_failure_record_is_corrupt_data(data: bytes) -> None:
    with pytest.raises(CorruptData, match="/p"):
        read_failures("/p", data)


def test_the_attempt_record_round_trips_and_refuses_what_it_is_not() -> None:
    opened = AttemptRecord(1, {"epoch": 7, "from_batch": 3})
    assert json.loads(opened.to_bytes()) == {"deaths": 1, "open": {"epoch": 7, "from_batch": 3}}
    assert AttemptRecord.from_bytes("/p", opened.to_bytes()) == opened
    assert AttemptRecord.from_bytes("/p", AttemptRecord(2).to_bytes()) == AttemptRecord(2, None)
    for bad in (b"[]", b'{"deaths": -1, "open": null}', b'{"deaths": 0, "open": [1]}', b"{"):
        with pytest.raises(CorruptData, match="/p"):
            AttemptRecord.from_bytes("/p", bad)
