"""A stand-in for Spark's JVM writing a streaming checkpoint, without Spark (``test_checkpoint_copy``).

It writes the files Spark writes for a query with one file source and one stateful operator,
in Spark's order, each under a temporary name and then renamed, with Hadoop's ``.crc`` beside
it. Micro-batch ``N`` reads source entry ``N`` (one new input file per batch)::

    sources/0/N                the files source 0 planned     (FileStreamSourceLog)
    offsets/N                  batch N covers source offset N (OffsetSeqLog)
    state/0/0/<N + 1>.delta    the state store's new version  (HDFSBackedStateStoreProvider)
    commits/N                  batch N is done                (CommitLog)

With ``retain``, offset and commit log entries more than ``retain`` batches behind are purged
right after each offset log entry, as Spark does with ``minBatchesToRetain``.

As a process (``python -m tests.support.checkpoint_writer``) it reads lines ``DIR BATCHES``:
for each, it writes ``BATCHES`` micro-batches into a new checkpoint ``DIR``, prints ``ready``
and writes on there as fast as it can until the next line comes (a deposed JVM that has not
noticed yet), or its input ends.
"""

from __future__ import annotations

import json
import os
import select
import sys
import uuid
from pathlib import Path

STEPS_PER_BATCH = 4


class CheckpointWriter:
    """Writes ``root``'s checkpoint one file at a time (``step``)."""

    def __init__(self, root: Path, *, retain: int | None = None) -> None:
        self.root = root
        self.retain = retain
        self.steps = 0
        self.last_step: int | None = None  # a JVM that stops there (its commit was fenced)
        self._purged_below = 0
        # A query's start: its logs' directories and ``metadata``, then its source's log.
        for name in ("offsets", "commits"):
            (root / name).mkdir(parents=True)
        self._write(root / "metadata", json.dumps({"id": str(uuid.uuid4())}))
        (root / "sources" / "0").mkdir(parents=True)

    @property
    def newest_batch(self) -> int:
        """The newest batch in the offset log (-1: none yet)."""
        return (self.steps + STEPS_PER_BATCH - 2) // STEPS_PER_BATCH - 1

    def step(self) -> None:
        """Write the next file."""
        if self.last_step is not None and self.steps >= self.last_step:
            return
        batch, part = divmod(self.steps, STEPS_PER_BATCH)
        if part == 0:
            entry = {
                "path": f"file:///in/events-{batch:05d}.json",
                "timestamp": 1,
                "batchId": batch,
            }
            self._write(self.root / "sources" / "0" / str(batch), f"v1\n{json.dumps(entry)}")
        elif part == 1:
            meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1700000000000 + batch, "conf": {}}
            offset = json.dumps({"logOffset": batch})
            self._write(self.root / "offsets" / str(batch), f"v1\n{json.dumps(meta)}\n{offset}")
            if self.retain is not None:
                self._purge(batch - self.retain)
        elif part == 2:
            store = self.root / "state" / "0" / "0"
            store.mkdir(parents=True, exist_ok=True)
            self._write(store / f"{batch + 1}.delta", f"rows of version {batch + 1}")
        else:
            self._write(self.root / "commits" / str(batch), 'v1\n{"nextBatchWatermarkMs":0}')
        self.steps += 1

    def _purge(self, below: int) -> None:
        # By number, not by listing: the copy's test hooks count listings of this directory.
        for n in range(self._purged_below, below):
            for log in ("offsets", "commits"):
                for name in (str(n), f".{n}.crc"):
                    (self.root / log / name).unlink(missing_ok=True)
        self._purged_below = max(self._purged_below, below)

    def _write(self, path: Path, text: str) -> None:
        for final, data in ((path, text.encode()), (path.with_name(f".{path.name}.crc"), b"crc")):
            temporary = final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")
            temporary.write_bytes(data)
            os.rename(temporary, final)


def main() -> None:
    for line in sys.stdin:
        root, batches = line.split()
        writer = CheckpointWriter(Path(root))
        while writer.steps < int(batches) * STEPS_PER_BATCH:
            writer.step()
        print("ready", flush=True)
        while not select.select([sys.stdin], [], [], 0)[0]:
            writer.step()


if __name__ == "__main__":
    main()
