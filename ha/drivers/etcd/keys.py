"""The driver's nodes as etcd keys and values, under the driver's prefix ``P``.

Three kinds of keys, all under ``P/`` (one watch range covers them)::

    P/002/a/b       node /a/b: depth (3 digits) then path, so that a node's children are one
                    key range (P/003/a/b/...) whatever lies deeper (etcd-io/zetcd's layout)
    P/i/a/b         the node's incarnation, only for a node that a transaction re-created in
                    place or wrote more than once (see ``Incarnation``)
    P/s/a           the counter of sequential creates under /a

A node's value is an envelope: one magic byte, the write's wall-clock time (``Stat.mtime``,
which etcd does not keep), then the caller's bytes. Anything else under ``P/`` is foreign data
and reads as ``CorruptData``. The root ``/`` has no key and always exists.
"""

from __future__ import annotations

import binascii
import struct
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigurationError, CorruptData

__all__ = (
    "Incarnation",
    "KeySpace",
    "b64",
    "pack_value",
    "prefix_end",
    "unb64",
    "unpack_value",
)

MAX_DEPTH = 999
_MAGIC = b"\xa1"
_HEADER = struct.Struct(">d")


def b64(raw: bytes) -> str:
    return binascii.b2a_base64(raw, newline=False).decode("ascii")


def unb64(text: str | None) -> bytes:
    return binascii.a2b_base64(text or "")


def prefix_end(start: bytes) -> bytes:
    """The end of the key range of every key starting with ``start`` (its last byte + 1)."""
    for index in range(len(start) - 1, -1, -1):
        if start[index] < 0xFF:
            return start[:index] + bytes([start[index] + 1])
    return b"\x00"  # all keys


class KeySpace:
    """The keys of one driver's prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix.encode()
        self.start = self.prefix + b"/"  # every key of the driver
        self.end = prefix_end(self.start)

    def node(self, path: str) -> bytes:
        depth = path.count("/")
        if depth > MAX_DEPTH:
            raise ConfigurationError(f"node path deeper than {MAX_DEPTH} levels: {path[:80]}...")
        return b"%s%03d%s" % (self.start, depth, path.encode())

    def incarnation(self, path: str) -> bytes:
        return self.start + b"i" + path.encode()

    def counter(self, parent: str) -> bytes:
        return self.start + b"s" + parent.encode()

    def children(self, path: str) -> tuple[bytes, bytes]:
        """The key range of the nodes directly under ``path``."""
        return self.level(path, 1 if path == "/" else path.count("/") + 1)

    def level(self, path: str, depth: int) -> tuple[bytes, bytes]:
        """The key range of the nodes under ``path`` (at any distance) whose depth is ``depth``."""
        start = b"%s%03d%s/" % (self.start, depth, path.rstrip("/").encode())
        return start, prefix_end(start)

    def incarnations_below(self, path: str) -> tuple[bytes, bytes]:
        """The key range of the incarnation records of every node under ``path``."""
        start = self.incarnation(path.rstrip("/") + "/")
        return start, prefix_end(start)

    def path_of(self, key: bytes) -> tuple[str, str] | None:
        """``("node" | "incarnation" | "counter", path)`` of one of the driver's keys."""
        if not key.startswith(self.start):
            return None
        rest = key[len(self.start) :]
        try:
            if rest[:3].isdigit():
                return "node", rest[3:].decode()
            if rest[:1] == b"i":
                return "incarnation", rest[1:].decode()
            if rest[:1] == b"s":
                return "counter", rest[1:].decode()
        except UnicodeDecodeError:
            return None
        return None

    def name_of(self, key: bytes, start: bytes) -> str:
        """A child's name from its key in the range beginning at ``start``."""
        return key[len(start) :].decode()


def pack_value(data: bytes, mtime: float) -> bytes:
    return _MAGIC + _HEADER.pack(mtime) + data


def unpack_value(path: str, raw: bytes) -> tuple[bytes, float]:
    """The caller's bytes and the mtime of a node's value; CorruptData if not ours."""
    if raw[:1] != _MAGIC or len(raw) < 1 + _HEADER.size:
        raise CorruptData(path, "the etcd key does not hold a node written by ha (foreign data)")
    (mtime,) = _HEADER.unpack_from(raw, 1)
    return raw[1 + _HEADER.size :], mtime


@dataclass(frozen=True, slots=True)
class Incarnation:
    """What etcd's own counters cannot tell of a node, kept beside it.

    etcd lets a transaction write a key once, so a node deleted and created again in one
    transaction is one put (etcd keeps the key's create_revision and counts on its version),
    and a node set twice is one put too (its version grows by one). For such nodes the key
    ``P/i/<path>`` holds ``base`` (``Stat.version`` is the key's version minus ``base``) and
    ``created`` (0: the incarnation key's own mod_revision, the transaction that re-created
    the node). It is attached to the node's lease, and deleted with the node.
    """

    base: int
    created: int = 0

    def encode(self) -> bytes:
        return b"%d %d" % (self.base, self.created)

    @classmethod
    def decode(cls, path: str, raw: bytes) -> Incarnation:
        try:
            base, created = (int(part) for part in raw.split(b" "))
        except ValueError:
            raise CorruptData(path, f"unreadable incarnation record {raw[:40]!r}") from None
        return cls(base, created)


def kv_int(kv: dict[str, Any], field: str) -> int:
    """An int64 field of an etcd key-value (JSON strings; zero values are omitted)."""
    return int(kv.get(field) or 0)
