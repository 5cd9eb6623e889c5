"""Blob stores: where large payloads live; the coordination backend holds only pointers to them.

``BlobStore`` is a protocol so that an object store (S3, GCS, HDFS) can be plugged in: ``put``
returns a ``BlobRef`` (key, size, SHA-256) that the state-handle store writes into its node;
``get`` verifies size and digest. ``FileBlobStore`` keeps blobs in a local directory (or a
shared mount) and writes each one atomically: a temporary file, fsync, rename, fsync of the
directory, so that a pointer never names a half-written file. Keys are fresh for every ``put``
(a random suffix), so two leaders never write the same file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio.to_thread

from .._fs import fsync_dir, write_atomically
from ..errors import ConfigurationError, CorruptData
from .layout import check_name

__all__ = ("BlobRef", "BlobStore", "FileBlobStore", "MemoryBlobStore")


@dataclass(frozen=True, slots=True)
class BlobRef:
    """A pointer to one stored payload."""

    key: str  # "segment/segment/..." relative to the store
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "size": self.size, "sha256": self.sha256}

    @classmethod
    def from_json(cls, path: str, doc: object) -> BlobRef:
        """Parse a pointer read from node ``path``; CorruptData if malformed."""
        if not isinstance(doc, dict):
            raise CorruptData(path, f"blob pointer must be an object, found {doc!r}")
        key, size, digest = doc.get("key"), doc.get("size"), doc.get("sha256")
        if not isinstance(key, str) or not _valid_key(key):
            raise CorruptData(path, f"bad blob key {key!r}")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise CorruptData(path, f"bad blob size {size!r}")
        if not isinstance(digest, str) or len(digest) != 64:
            raise CorruptData(path, f"bad blob digest {digest!r}")
        return cls(key, size, digest)


def _valid_key(key: str) -> bool:
    parts = key.split("/")
    try:
        for part in parts:
            check_name("blob key segment", part)
    except ConfigurationError:
        return False
    return True


def _new_key(prefix: str) -> str:
    for part in prefix.split("/"):
        check_name("blob key prefix segment", part)
    return f"{prefix}/{uuid.uuid4().hex}"


def _verify(where: str, ref: BlobRef, data: bytes) -> bytes:
    if len(data) != ref.size:
        raise CorruptData(where, f"blob has {len(data)} bytes, its pointer says {ref.size}")
    if hashlib.sha256(data).hexdigest() != ref.sha256:
        raise CorruptData(where, "blob digest does not match its pointer")
    return data


class BlobStore(Protocol):
    """Large payloads by key. Implementations must make ``put`` atomic and durable."""

    async def put(self, prefix: str, data: bytes) -> BlobRef:
        """Store ``data`` under a fresh key starting with ``prefix``."""
        ...

    async def get(self, ref: BlobRef) -> bytes:
        """The payload; CorruptData (naming the blob) if missing or not matching ``ref``."""
        ...

    async def delete(self, ref: BlobRef) -> None:
        """Discard the payload; a missing one is not an error."""
        ...

    async def delete_all(self) -> None:
        """Discard every payload of this store. Unfenced: only when no leader can write any more
        (``Stores.close_and_cleanup_all_data`` deletes blob by blob, never calls this)."""
        ...


class FileBlobStore:
    """Blobs as files under ``directory`` (created on first write; a delete removes the
    directories it leaves empty, ``directory`` included)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _file(self, key: str) -> Path:
        if not _valid_key(key):
            raise CorruptData(str(self.directory / key), "bad blob key")
        return self.directory.joinpath(*key.split("/"))

    async def put(self, prefix: str, data: bytes) -> BlobRef:
        data = bytes(data)
        key = _new_key(prefix)
        await anyio.to_thread.run_sync(write_atomically, self._file(key), data)
        return BlobRef(key, len(data), hashlib.sha256(data).hexdigest())

    async def get(self, ref: BlobRef) -> bytes:
        file = self._file(ref.key)
        try:
            data = await anyio.to_thread.run_sync(file.read_bytes)
        except FileNotFoundError:
            raise CorruptData(str(file), "blob is missing") from None
        return _verify(str(file), ref, data)

    async def delete(self, ref: BlobRef) -> None:
        file = self._file(ref.key)
        await anyio.to_thread.run_sync(_unlink, file, self.directory)

    async def delete_all(self) -> None:
        await anyio.to_thread.run_sync(_remove_tree, self.directory)


def _unlink(file: Path, top: Path) -> None:
    try:
        file.unlink()
    except FileNotFoundError:
        return
    # empty directories go too, up to the store's own (a racing put re-creates them)
    directory = file.parent
    while directory.is_relative_to(top):
        try:
            directory.rmdir()
        except OSError:  # not empty, or gone
            break
        directory = directory.parent
    try:
        fsync_dir(directory)
    except FileNotFoundError:
        pass


def _remove_tree(directory: Path) -> None:
    try:
        shutil.rmtree(directory)
    except FileNotFoundError:
        return
    if directory.parent.exists():
        fsync_dir(directory.parent)


class MemoryBlobStore:
    """Blobs in a dict: for tests and for measuring the coordination backend alone."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    async def put(self, prefix: str, data: bytes) -> BlobRef:
        data = bytes(data)
        key = _new_key(prefix)
        self.blobs[key] = data
        return BlobRef(key, len(data), hashlib.sha256(data).hexdigest())

    async def get(self, ref: BlobRef) -> bytes:
        where = f"memory-blob:{ref.key}"
        try:
            data = self.blobs[ref.key]
        except KeyError:
            raise CorruptData(where, "blob is missing") from None
        return _verify(where, ref, data)

    async def delete(self, ref: BlobRef) -> None:
        self.blobs.pop(ref.key, None)

    async def delete_all(self) -> None:
        self.blobs.clear()
