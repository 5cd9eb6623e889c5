"""The job manager with Spark stood in for: a fake pipeline whose batches are held, failed or
hung by knobs, and a reference digest of its output."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import ha
from ha.pipeline import Param, pipeline
from ha.pipeline.api.registry import unregister
from ha.pipeline.commit import STAGING, output_digest
from ha.pipeline.jobmanager.runs import batch as jm_module

FAST = ha.Timing(backoff=ha.Backoff(initial=0.005, maximum=0.05), hook_timeout=0.5)


class FakeContext:
    def __init__(self) -> None:
        self.cancelled: list[str] = []

    def setJobGroup(self, group: str, description: str, interruptOnCancel: bool = False) -> None:  # noqa: N802, N803
        pass

    def setLocalProperty(self, key: str, value: Any) -> None:  # noqa: N802
        pass

    def cancelJobGroup(self, group: str) -> None:  # noqa: N802
        self.cancelled.append(group)


class FakeSpark:
    def __init__(self, name: str) -> None:
        self.name = name  # which manager computes: failures can be aimed at one
        self.sparkContext = FakeContext()
        self.knobs = KNOBS  # its test's: an abandoned batch thread may outlive its test


class Knobs:
    """What the fake pipeline does, shared by the test and the worker threads."""

    def __init__(self) -> None:
        self.pause = 0.0
        self.fail: Counter[Any] = Counter()  # batch or (manager, batch) -> failures to inject
        self.computed: list[int] = []
        self.release = threading.Event()
        self.release.set()
        self.block: Counter[Any] = Counter()  # batch or (manager, batch) -> hangs to inject
        self.unblock = threading.Event()
        self.hung: list[tuple[str | None, Any]] = []  # (manager, batch) hanging now


KNOBS = Knobs()


def _compute(spark: Any, params: Any, batch: Any) -> bytes:
    knobs = getattr(spark, "knobs", KNOBS)
    knobs.computed.append(batch)
    knobs.release.wait(10)
    if knobs.pause:
        threading.Event().wait(knobs.pause)
    for key in (batch, (getattr(spark, "name", None), batch)):
        if knobs.fail[key] > 0:
            knobs.fail[key] -= 1
            raise RuntimeError(f"injected failure in batch {batch}")
    for key in (batch, (getattr(spark, "name", None), batch)):
        if knobs.block[key] > 0:
            knobs.block[key] -= 1
            knobs.hung.append((getattr(spark, "name", None), batch))
            knobs.unblock.wait(10)  # hangs until the test ends: its job manager is killed
    return f"rows of batch {batch} with {params['label']}\n".encode()


def _fake_stage(
    df: bytes, output: Any, index: int, *, files: int, sort_by: Any, token: str
) -> Path:
    staging = Path(output) / STAGING / f"batch-{index:05d}.{token}"
    staging.mkdir(parents=True)
    (staging / "part-00000.parquet").write_bytes(df)
    return staging


@pytest.fixture(autouse=True)
def fake_pipeline(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    global KNOBS
    KNOBS = Knobs()
    monkeypatch.setattr(jm_module, "stage_batch", _fake_stage)
    pipeline(
        "test.fake",
        batches=lambda p: list(range(p["batches"])),
        params={"batches": Param(int, 6), "label": Param(str, "x")},
    )(_compute)
    yield
    unregister("test.fake")


async def _reference(tmp_path: Path, batches: int = 6) -> str:
    """The digest of the output of one uninterrupted run, made by the same stand-in."""
    out = tmp_path / "reference"
    for i in range(batches):
        staged = _fake_stage(
            _compute(None, {"label": "x"}, i), out, i, files=1, sort_by=None, token="r"
        )
        jm_module.commit_batch(staged, out, i)
    return output_digest(out)
