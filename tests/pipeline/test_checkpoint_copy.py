"""A term's copy of a streaming checkpoint that another JVM is still writing (``spark_checkpoint``).

A deposed JVM may go on writing its term's checkpoint while the new term copies it. The copy
must be one Spark can restart from, with no batch lost, on tmpfs (which lists a directory's
newest names first) and on disk (ext4 lists them by hash): ``CheckpointWriter`` writes as
Spark's JVM does, ``_tears`` says what would stop Spark on the copy. No Spark needed.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ha.pipeline.commit.spark_checkpoint import term_checkpoint
from tests.support.checkpoint_writer import STEPS_PER_BATCH, CheckpointWriter

ROUNDS = 40
SOURCE = "checkpoint-e000000000000001"  # the deposed term's copy; the new term's epoch is 2
REPO = Path(__file__).resolve().parents[2]


def _is_tmpfs(path: Path) -> bool:
    with open("/proc/mounts") as mounts:
        return any(f"{path} tmpfs " in line for line in mounts)


@pytest.fixture(params=["tmpfs", "disk"])
def base(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A directory on tmpfs (``/dev/shm``) or on the disk (``tmp_path``)."""
    if request.param == "disk":
        assert not _is_tmpfs(tmp_path), "tmp_path is meant to be on the disk"
        yield tmp_path
        return
    shm = Path("/dev/shm")
    if not _is_tmpfs(shm):
        pytest.skip("no tmpfs at /dev/shm on this machine")
    where = Path(tempfile.mkdtemp(prefix="ha-checkpoint-copy-", dir=shm))
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _ids(directory: Path) -> set[int]:
    if not directory.is_dir():
        return set()
    return {int(p.name.split(".")[0]) for p in directory.iterdir() if not p.name.startswith(".")}


def _tears(copy: Path, newest_before: int) -> list[str]:
    """What would stop Spark restarting on a copy of ``CheckpointWriter``'s checkpoint, or what
    the copy lost: the writer's newest batch was ``newest_before`` when the copy began."""
    offsets, commits = _ids(copy / "offsets"), _ids(copy / "commits")
    sources, state = _ids(copy / "sources" / "0"), _ids(copy / "state" / "0" / "0")
    newest, committed = max(offsets, default=-1), max(commits, default=-1)
    found = []
    if newest > 0 and newest - 1 not in offsets:
        found.append(f"offsets/{newest - 1} missing (Spark: batch {newest - 1} doesn't exist)")
    if missing := sorted(set(range(newest + 1)) - sources):
        found.append(f"offsets/{newest} but no sources/0/{missing} (Spark: batches don't exist)")
    if committed > newest:
        found.append(f"commits/{committed} without offsets/{committed} (Spark: concurrent update)")
    if missing := sorted(set(range(1, committed + 2)) - state):
        found.append(f"commits/{committed} but no state version {missing}")
    if newest < newest_before:
        found.append(
            f"batches {newest + 1}..{newest_before} lost (they were there before the copy)"
        )
    return found


@contextlib.contextmanager
def _interleaved(prefix: str, write: Callable[[], None]) -> Iterator[None]:
    """Call ``write`` each time the copy lists a directory or copies a file whose path begins
    with ``prefix``, before it does: a deposed JVM writing between two of the copy's steps, at
    moments the test chooses."""
    busy = False

    def visit(path: Any) -> None:
        nonlocal busy
        where = os.fspath(path) if isinstance(path, str | os.PathLike) else None
        if not busy and isinstance(where, str) and where.startswith(prefix):
            busy = True
            try:
                write()
            finally:
                busy = False

    real_scandir, real_listdir, real_copyfile = os.scandir, os.listdir, shutil.copyfile

    def scandir(path: Any = ".") -> Any:
        visit(path)
        return real_scandir(path)

    def listdir(path: Any = ".") -> Any:
        visit(path)
        return real_listdir(path)

    def copyfile(src: Any, dst: Any, **kwargs: Any) -> Any:
        visit(src)
        return real_copyfile(src, dst, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "scandir", scandir)
        patch.setattr(os, "listdir", listdir)
        patch.setattr(shutil, "copyfile", copyfile)
        yield


def _a_few_files(writer: CheckpointWriter, rng: random.Random) -> Callable[[], None]:
    def write() -> None:
        for _ in range(rng.randint(0, 3)):
            writer.step()

    return write


def _to_the_end(writer: CheckpointWriter) -> Callable[[], None]:
    def write() -> None:
        while writer.last_step is not None and writer.steps < writer.last_step:
            writer.step()

    return write


def test_a_copy_made_while_a_deposed_jvm_writes_on_is_whole(base: Path) -> None:
    torn, written = [], 0
    for round in range(ROUNDS):
        rng = random.Random(round)
        stream = base / f"round-{round}"
        writer = CheckpointWriter(stream / SOURCE)
        for _ in range(rng.randint(0, 40)):
            writer.step()
        newest, steps = writer.newest_batch, writer.steps
        with _interleaved(os.fspath(writer.root), _a_few_files(writer, rng)):
            copy, _ = term_checkpoint(stream, 2)
        written += writer.steps - steps
        if found := _tears(copy, newest):
            torn.append((round, found))
    assert written > ROUNDS  # the writer did write while the copies were made
    assert torn == [], f"{len(torn)} of {ROUNDS} copies torn, e.g. {torn[:3]}"


def test_a_copy_that_lost_entries_to_a_purge_is_made_again(base: Path) -> None:
    # minBatchesToRetain=1, legal and extreme: the JVM keeps two offset log entries. As the
    # copy takes the first, the JVM plans one or two more batches, which purges the other,
    # then stops for good (its next commit is fenced). The copy is made again, whole, with
    # every batch the checkpoint had when the copy began.
    torn = []
    for round in range(ROUNDS // 4):
        rng = random.Random(round)
        stream = base / f"round-{round}"
        writer = CheckpointWriter(stream / SOURCE, retain=1)
        for _ in range(rng.randint(8, 40)):
            writer.step()
        newest = writer.newest_batch
        writer.last_step = writer.steps + rng.randint(1, 2) * STEPS_PER_BATCH
        with _interleaved(f"{writer.root / 'offsets'}{os.sep}", _to_the_end(writer)):
            copy, _ = term_checkpoint(stream, 2)
        assert writer.steps == writer.last_step
        if found := _tears(copy, newest):
            torn.append((round, found))
    assert torn == [], f"{len(torn)} of {ROUNDS // 4} copies torn, e.g. {torn[:3]}"


def test_copies_made_while_a_writer_process_runs_are_whole(base: Path) -> None:
    # No schedule: a process writes on, as fast as it can, while each copy is made.
    torn = []
    argv = [sys.executable, "-m", "tests.support.checkpoint_writer"]
    with subprocess.Popen(argv, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as jvm:
        assert jvm.stdin is not None and jvm.stdout is not None
        try:
            for round in range(ROUNDS):
                stream, batches = base / f"round-{round}", 5 + round % 20
                jvm.stdin.write(f"{stream / SOURCE} {batches}\n".encode())
                jvm.stdin.flush()
                assert jvm.stdout.readline() == b"ready\n"
                copy, _ = term_checkpoint(stream, 2)
                if found := _tears(copy, batches - 1):
                    torn.append((round, found))
        finally:
            jvm.kill()
    assert torn == [], f"{len(torn)} of {ROUNDS} copies torn, e.g. {torn[:3]}"
