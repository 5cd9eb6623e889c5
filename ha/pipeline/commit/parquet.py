"""Canonical Parquet footers: the same rows give the same bytes in every JVM.

Spark's Parquet writer (parquet-mr) lists each column chunk's encodings from a ``HashSet`` of
enum constants, whose order follows identity hash codes: it differs from one JVM process to the
next. Everything else in the file is repeatable, so a batch redone by another job manager
differs from the first in those few bytes only. ``canonicalize_footer`` sorts each of those
lists in place: same elements, same total length, no other byte moves. The order of that list
carries no meaning in the Parquet format.

The footer is Thrift's compact protocol; this walks it generically (skipping every field) and
touches only ``FileMetaData.row_groups[*].columns[*].meta_data.encodings``.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

__all__ = ("canonicalize_footer",)

MAGIC = b"PAR1"

# Compact protocol type codes.
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE = 0, 1, 2, 3, 4, 5, 6, 7
_BINARY, _LIST, _SET, _MAP, _STRUCT = 8, 9, 10, 11, 12

# Field ids on the way to the encodings list, and the structs they hold.
_ROW_GROUPS, _COLUMNS, _META_DATA, _ENCODINGS = 4, 1, 3, 2


_ELSEWHERE: tuple[str, ...] = ("elsewhere",)
_STEPS: dict[tuple[tuple[str, ...], int], tuple[str, ...]] = {
    ((), _ROW_GROUPS): ("row_groups",),
    (("row_group",), _COLUMNS): ("columns",),
    (("column",), _META_DATA): ("meta_data",),
    (("meta_data",), _ENCODINGS): ("encodings",),
}


_LIST_ITEMS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("row_groups",): ("row_group",),
    ("columns",): ("column",),
}


class FooterError(ValueError):
    """The bytes are not a Parquet footer this module understands."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.lists: list[tuple[int, int, list[int]]] = []  # (start, end, values) to sort

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise FooterError("footer ends early")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise FooterError("varint too long")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def skip(self, kind: int, path: tuple[str, ...]) -> None:
        if kind in (_TRUE, _FALSE):
            return
        if kind == _BYTE:
            self.pos += 1
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.pos += 8
        elif kind == _BINARY:
            length = self.varint()  # not "pos += varint()": pos would be read before the call
            self.pos += length
        elif kind in (_LIST, _SET):
            self.list(path)
        elif kind == _MAP:
            size = self.varint()
            if size:
                types = self.byte()
                for _ in range(size):
                    self.skip(types >> 4, _ELSEWHERE)
                    self.skip(types & 0x0F, _ELSEWHERE)
        elif kind == _STRUCT:
            self.struct(path)
        else:
            raise FooterError(f"unknown compact type {kind}")
        if self.pos > len(self.data):
            raise FooterError("footer ends early")

    def list(self, path: tuple[str, ...]) -> None:
        header = self.byte()
        size, kind = header >> 4, header & 0x0F
        if size == 15:
            size = self.varint()
        if path == ("encodings",) and kind == _I32:
            start = self.pos
            values = [self.zigzag() for _ in range(size)]
            self.lists.append((start, self.pos, values))
            return
        inner = _LIST_ITEMS.get(path, _ELSEWHERE)
        for _ in range(size):
            if kind in (_TRUE, _FALSE):
                self.pos += 1  # booleans in lists take one byte each
            else:
                self.skip(kind, inner)

    def struct(self, path: tuple[str, ...]) -> None:
        field_id = 0
        while True:
            header = self.byte()
            kind = header & 0x0F
            if kind == _STOP:
                return
            delta = header >> 4
            field_id = field_id + delta if delta else self.zigzag()
            self.skip(kind, _child(path, field_id))


def _child(path: tuple[str, ...], field_id: int) -> tuple[str, ...]:
    """Where a field leads: one step on the way down to the encodings lists, or elsewhere."""
    return _STEPS.get((path, field_id), _ELSEWHERE)


def _zigzag_bytes(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def canonical_footer_bytes(footer: bytes) -> bytes:
    reader = _Reader(footer)
    reader.struct(())
    out = bytearray(footer)
    for start, end, values in reader.lists:
        encoded = b"".join(_zigzag_bytes(v) for v in sorted(values))
        assert len(encoded) == end - start  # the same elements take the same bytes
        out[start:end] = encoded
    return bytes(out)


def canonicalize_footer(path: Path | str) -> bool:
    """Sort the encodings lists of a Parquet file's footer in place; True if bytes changed."""
    with open(path, "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        if size < 12:
            raise FooterError(f"{path}: too short for Parquet")
        f.seek(size - 8)
        tail = f.read(8)
        if tail[4:] != MAGIC:
            raise FooterError(f"{path}: no Parquet magic at the end")
        (length,) = struct.unpack("<I", tail[:4])
        if length > size - 12:
            raise FooterError(f"{path}: footer length {length} does not fit the file")
        f.seek(size - 8 - length)
        footer = f.read(length)
        fixed = canonical_footer_bytes(footer)
        if fixed == footer:
            return False
        f.seek(size - 8 - length)
        f.write(fixed)
        return True
