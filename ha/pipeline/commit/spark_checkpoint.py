"""Each term's own copy of a Structured Streaming checkpoint, repaired where a killed driver tore it.

A killed driver's JVM may live on for a moment and go on writing its checkpoint, even after a
new active has started from it. So a new term never runs on its predecessor's directory: it
copies the newest earlier term's checkpoint (``<output>/_stream/checkpoint-e<epoch>``) into
its own, trims the copy (below) and runs there (``term_checkpoint``). A deposed JVM writes
only into its own term's copy, which no one reads any more. Hadoop's ``.crc`` files are not
copied: the copy is read without them, and a checksum caught between a file and its rename
would otherwise fail the read.

Why the copy cannot tear. Spark writes a micro-batch's files in one order, each whole (under a
temporary name, then renamed), and each refers only to files written before it:

1. ``sources/<i>/<n>``: what source ``i`` planned (a file source: the files of its offset ``n``);
2. ``offsets/<b>``: which source offsets batch ``b`` covers (``OffsetSeqLog``);
3. ``state/...``: the state stores' version ``b + 1`` (stateful queries only);
4. ``commits/<b>``: batch ``b`` is done (``CommitLog``).

The copy takes the directories in the reverse order (``commits``, ``state``, ``offsets``,
``sources``, then the rest: ``metadata`` is written once, before the first batch), each
listed once and copied as listed. A copied file was in its directory's listing; whatever it
refers to was written before it, so before that listing, so it existed all through the later
listing of its own directory, which returns it. A writer still going only adds files the copy
has nothing referring to: a source log entry ahead of every batch (trimmed, below), an offset
log entry with no commit (Spark redoes that batch), a state version ahead of the commits
(Spark's redo overwrites it). This holds whatever order the file system lists names in. A walk
in listing order did not: tmpfs lists newest first, so it copied ``sources`` before ``offsets``
and could keep an ``offsets/<b>`` whose source entry it had missed (Spark: "batch <b> doesn't
exist"); ext4 lists by hash, here ``offsets`` before ``commits``, and it could keep a
``commits/<b>`` without its ``offsets/<b>`` (Spark's redo of the batch before then fails:
"concurrent update to the log").

What the order cannot cover, a check after the copy does (``_excess``): files removed under the
copy (Spark purges log entries ``minBatchesToRetain`` behind, and a file source's entries below
a compaction), and two files written during one listing of the same directory, of which it may
return only the later. The check asks what Spark reads to restart: the newest offset log entry
and the one before it (else "batch N doesn't exist"), each file source's entries from its
newest compaction up to the offset that entry names, and no commit past it. A copy that fails
is made again, from scratch; a writer's next commit is fenced, so it soon stops. If every
attempt fails (or the earlier copy was torn when it was made, by an older ``ha``), the offset
and commit log entries past the newest batch that passes are removed: the copy is the
checkpoint as it stood before that batch was planned, and the batch is planned again, as after
a trim. Only the new copy is changed; an older term's copy is removed only once the new one has
passed, and never the one it was copied from.

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
import logging
import os
import re
import shutil
import time
import uuid
from pathlib import Path

__all__ = ("term_checkpoint", "trim_source_logs")

log = logging.getLogger("ha.pipeline.spark_checkpoint")

_ENTRY_RE = re.compile(r"^\.?(\d+)(\.compact)?(\.crc)?$")

# The reverse of the order Spark writes a micro-batch's files in (the module's docstring).
_COPY_ORDER = ("commits", "state", "offsets", "sources")
_COPY_ATTEMPTS = 3
_RETRY_PAUSE = 0.1  # seconds before the second attempt, doubled before each next one


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


def _logged(directory: Path) -> dict[int, Path]:
    """A log's entries by batch id (``n`` or ``n.compact``), without ``.crc`` files."""
    return {
        n: path
        for n, files in _batch_files(directory).items()
        for path in files
        if not path.name.startswith(".")
    }


def _source_log_whole(directory: Path, offset: int) -> bool:
    """Whether a file source's log holds what Spark reads to restart at ``offset``: every entry
    from the newest compaction at or below it (from 0 without one) up to it."""
    logged = _logged(directory)
    compacted = (n for n, path in logged.items() if n <= offset and path.suffix == ".compact")
    return all(n in logged for n in range(max(compacted, default=0), offset + 1))


def _restartable(root: Path, offsets: dict[int, Path], batch: int) -> bool:
    """Whether Spark can restart ``root`` at ``batch`` if it is the newest offset log entry."""
    if batch > 0 and batch - 1 not in offsets:  # Spark: "batch <batch - 1> doesn't exist"
        return False
    return all(
        _source_log_whole(root / "sources" / str(index), offset)
        for index, offset in enumerate(_source_offsets(offsets[batch]))
        if offset is not None
    )


def _excess(root: Path) -> list[Path]:
    """The offset and commit log entries past the newest batch Spark can restart ``root`` at
    (all of them if there is none): nothing for a whole checkpoint."""
    offsets = _logged(root / "offsets")
    newest = next((b for b in sorted(offsets, reverse=True) if _restartable(root, offsets, b)), -1)
    return sorted(
        path
        for name in ("offsets", "commits")
        for n, files in _batch_files(root / name).items()
        if n > newest
        for path in files
    )


def _copy_file(source: Path, target: Path) -> None:
    """Copy one file a writer may be renaming; skip it if it vanished, and every temporary and
    ``.crc`` file."""
    if source.name.endswith((".crc", ".tmp")) or ".tmp" in source.name:
        return
    try:
        shutil.copyfile(source, target)
    except FileNotFoundError:
        pass


def _copy_tree(source: Path, target: Path) -> None:
    """Copy a file, or a directory with each directory listed once, before those below it."""
    if source.is_file():
        _copy_file(source, target)
        return
    for directory, _, files in os.walk(source):  # a directory that vanished yields nothing
        into = target / Path(directory).relative_to(source)
        into.mkdir(parents=True, exist_ok=True)
        for name in files:
            _copy_file(Path(directory, name), into / name)


def _copy_logs(source: Path, target: Path) -> None:
    """Copy a checkpoint a writer may still be adding to: Spark's logs in ``_COPY_ORDER``,
    then everything else (the module's docstring says why it cannot tear)."""
    rest = sorted(set(os.listdir(source)) - set(_COPY_ORDER))
    for name in (*_COPY_ORDER, *rest):
        _copy_tree(source / name, target / name)


def _whole_copy(source: Path, target: Path) -> list[Path]:
    """Copy ``source`` into the empty directory ``target`` until the copy passes ``_excess``;
    if no attempt does, remove its excess. Returns the removed files."""
    for attempt in range(_COPY_ATTEMPTS):
        if attempt:  # a writer removed what the copy needed: begin again once it has moved on
            shutil.rmtree(target)
            target.mkdir()
            time.sleep(_RETRY_PAUSE * 2 ** (attempt - 1))
        _copy_logs(source, target)
        excess = _excess(target)
        if not excess:
            return []
    log.warning(
        "every copy of %s lacks what its newest batches need; removing %s",
        source,
        ", ".join(str(p.relative_to(target)) for p in excess),
    )
    for path in excess:
        path.unlink()
    return excess


def term_checkpoint(stream_dir: Path | str, epoch: int) -> tuple[Path, list[Path]]:
    """The checkpoint the term of ``epoch`` runs on, and what was removed from the copy (its
    trim, and any batch that could not be copied whole).

    The term's own directory if it has one already (its query restarted); otherwise a trimmed
    copy of the newest earlier term's (or a new, empty one), made whole before it is renamed
    into place. Copies older than the one copied are removed then. Blocking (seconds at most
    when the copy has to be made again).
    """
    root = Path(stream_dir)
    own = root / f"checkpoint-e{epoch:015d}"
    if own.is_dir():
        return own, []
    root.mkdir(parents=True, exist_ok=True)
    earlier = sorted(d for d in root.glob("checkpoint-e*") if d.name < own.name and d.is_dir())
    building = root / f".{own.name}.{uuid.uuid4().hex[:8]}"
    building.mkdir()
    removed = _whole_copy(earlier[-1], building) if earlier else []
    removed += trim_source_logs(building)
    os.rename(building, own)
    for old in earlier[:-1]:  # only once the new copy is whole; never the one it came from
        shutil.rmtree(old, ignore_errors=True)
    return own, removed
