"""Durable file-system writes: what must reach the disk before a rename or a reply says it has.

A file's data is durable once the file is fsynced; its name (a creation, a rename, an unlink)
once its directory is. ``write_atomically`` does both in the order that makes a reader see the
old content or the new one, never a part of it, even after a power loss: write a temporary
file, fsync it, rename it over the target, fsync the directory. Synchronous: call them from a
worker thread.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ("fsync_dir", "fsync_file", "make_parents", "write_atomically")


def fsync_file(path: Path) -> None:
    """Make the data of the file at ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: Path) -> None:
    """Make the names in ``directory`` durable (the files created, renamed or removed in it)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_parents(file: Path) -> None:
    """Create ``file``'s missing directories one by one, each new entry made durable."""
    created: list[Path] = []
    parent = file.parent
    while not parent.exists():
        created.append(parent)
        parent = parent.parent
    for directory in reversed(created):
        try:
            directory.mkdir()
        except FileExistsError:
            pass
        fsync_dir(directory.parent)


def write_atomically(file: Path, data: bytes) -> None:
    """Replace ``file``'s content with ``data`` all at once and durably (see the module doc).

    The temporary file is ``.<name>.tmp`` beside it; missing directories are made first.
    """
    tmp = file.with_name(f".{file.name}.tmp")
    for attempt in range(100):
        try:
            make_parents(file)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            break
        except FileNotFoundError:
            # a delete pruned an empty directory of ours meanwhile; once tmp is in it, none can
            if attempt == 99:
                raise
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, file)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(file.parent)
