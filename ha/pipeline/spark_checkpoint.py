"""Each term's own copy of a Structured Streaming checkpoint, repaired where a killed driver tore it.

A killed driver's JVM may live on for a moment and go on writing its checkpoint, even after a
new active has started from it. So a new term never runs on its predecessor's directory: it
copies the newest earlier term's checkpoint (``<output>/_stream/checkpoint-e<epoch>``) into
its own, trims the copy (below) and runs there (``term_checkpoint``). A deposed JVM writes
only into its own term's copy, which no one reads any more. Hadoop's ``.crc`` files are not
copied: the copy is read without them, and a checksum caught between a file and its rename
would otherwise fail the read.

Spark plans a micro-batch of a file source in two writes: the source's own log first
(``sources/<i>/<n>``: the files of source offset ``n``), then the query's offset log
(``offsets/<batch>``: which source offsets the batch covers). A driver killed between the two
leaves a source log ahead of every batch. Spark restarted on it treats those files as seen and
folds them into the next batch with the files planned after them: nothing is lost or read
twice, but that batch differs from the one an uninterrupted run writes, so the output would
not be the same bytes. ``trim_source_logs`` removes the entries no batch refers to (no batch
ran on them: the offset log is written before a batch starts), and the new driver plans them
again exactly as the dead one would have.

Only entries of sources whose offsets are ``{"logOffset": n}`` (file sources) are touched; the
checkpoint's layout is Spark's (``offsets/``, ``sources/<i>/``), read as plain files, so this
runs before the query starts and without Spark.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from pathlib import Path

__all__ = ("term_checkpoint", "trim_source_logs")

_ENTRY_RE = re.compile(r"^\.?(\d+)(\.compact)?(\.crc)?$")


def _batch_files(directory: Path) -> dict[int, list[Path]]:
    """Log files by the number they are named after (with their ``.crc`` companions)."""
    found: dict[int, list[Path]] = {}
    if directory.is_dir():
        for entry in directory.iterdir():
            m = _ENTRY_RE.match(entry.name)
            if m and entry.is_file():
                found.setdefault(int(m.group(1)), []).append(entry)
    return found


def _source_offsets(offset_file: Path) -> list[int | None]:
    """The log offset of each source in an offset log entry (None where it has none)."""
    lines = offset_file.read_text().splitlines()
    offsets: list[int | None] = []
    for line in lines[2:]:  # "v1", the batch's metadata, then one line per source
        try:
            doc = json.loads(line)
        except ValueError:
            offsets.append(None)  # "-": no offset yet
            continue
        value = doc.get("logOffset") if isinstance(doc, dict) else None
        offsets.append(value if isinstance(value, int) else None)
    return offsets


def _lists_files(directory: Path) -> bool:
    """Whether ``directory`` is a file source's log (its entries list files by path)."""
    for _, files in sorted(_batch_files(directory).items()):
        for path in files:
            if not path.name.startswith("."):
                lines = path.read_text(errors="replace").splitlines()
                return len(lines) > 1 and lines[0] == "v1" and '"path"' in lines[1]
    return False


def trim_source_logs(checkpoint: Path | str) -> list[Path]:
    """Remove source log entries beyond what the latest offset log entry refers to.

    Returns the removed files. Call it only while no query runs on ``checkpoint``.
    """
    root = Path(checkpoint)
    batches = _batch_files(root / "offsets")
    planned = [n for n, files in batches.items() if any(not p.name.startswith(".") for p in files)]
    sources = root / "sources"
    limits: dict[int, int | None]
    if planned:
        latest = next(p for p in batches[max(planned)] if not p.name.startswith("."))
        limits = dict(enumerate(_source_offsets(latest)))
    elif sources.is_dir():  # killed before its first batch was planned: no entry is used
        limits = {int(d.name): -1 for d in sources.iterdir() if d.name.isdigit()}
    else:
        return []
    removed: list[Path] = []
    for index, offset in limits.items():
        if offset is None or not _lists_files(sources / str(index)):
            continue
        for n, files in _batch_files(sources / str(index)).items():
            if n > offset:
                for path in files:
                    path.unlink(missing_ok=True)
                    removed.append(path)
    return sorted(removed)


def _copy_logs(source: Path, target: Path) -> None:
    """Copy a checkpoint's files a writer may still be renaming; skip what vanishes, and every
    temporary and ``.crc`` file."""
    for directory, _, files in os.walk(source):
        into = target / Path(directory).relative_to(source)
        into.mkdir(parents=True, exist_ok=True)
        for name in files:
            if name.endswith((".crc", ".tmp")) or ".tmp" in name:
                continue
            try:
                shutil.copyfile(Path(directory, name), into / name)
            except FileNotFoundError:
                continue


def term_checkpoint(stream_dir: Path | str, epoch: int) -> tuple[Path, list[Path]]:
    """The checkpoint the term of ``epoch`` runs on, and what its trim removed.

    The term's own directory if it has one already (its query restarted); otherwise a trimmed
    copy of the newest earlier term's (or a new, empty one), made whole before it is renamed
    into place. Older terms' copies are removed. Blocking.
    """
    root = Path(stream_dir)
    own = root / f"checkpoint-e{epoch:015d}"
    if own.is_dir():
        return own, []
    root.mkdir(parents=True, exist_ok=True)
    earlier = sorted(d for d in root.glob("checkpoint-e*") if d.name < own.name and d.is_dir())
    building = root / f".{own.name}.{uuid.uuid4().hex[:8]}"
    building.mkdir()
    if earlier:
        _copy_logs(earlier[-1], building)
    removed = trim_source_logs(building)
    os.rename(building, own)
    for old in earlier[:-1]:
        shutil.rmtree(old, ignore_errors=True)
    return own, removed
