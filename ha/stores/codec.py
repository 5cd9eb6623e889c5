"""The stores' encodings: small versioned JSON documents, and a framed format for blobs.

A node's data is one JSON object ``{"format": KIND, "v": 1, ...fields}``. A blob is
``b"ha-blob 1\\n" + JSON header + b"\\n" + body`` so that binary payloads need no base64.
Anything that does not decode (bad UTF-8, bad JSON, a wrong kind, an unknown version, a missing
or mistyped field, an unknown enum value) raises ``CorruptData`` naming the path; the data is
left where it is.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any, TypeVar

from ..errors import CorruptData

__all__ = ("VERSION", "decode", "encode", "field", "field_enum", "pack", "unpack")

VERSION = 1
_BLOB_MAGIC = b"ha-blob 1\n"

E = TypeVar("E", bound=enum.Enum)
T = TypeVar("T")


def encode(kind: str, fields: Mapping[str, Any]) -> bytes:
    doc = {"format": kind, "v": VERSION, **fields}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def decode(path: str, data: bytes, kind: str) -> dict[str, Any]:
    """The fields of a document of ``kind`` stored at ``path``."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptData(path, f"not a JSON document ({exc})") from None
    return _check_header(path, doc, kind)


def _check_header(path: str, doc: object, kind: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise CorruptData(path, f"expected a JSON object, found {type(doc).__name__}")
    if doc.get("format") != kind:
        raise CorruptData(path, f"expected format {kind!r}, found {doc.get('format')!r}")
    version = doc.get("v")
    if version != VERSION:
        raise CorruptData(path, f"unsupported {kind} version {version!r} (known: {VERSION})")
    return doc


def field(path: str, doc: Mapping[str, Any], name: str, kind: type[T]) -> T:
    """``doc[name]`` if present with type ``kind``, else CorruptData."""
    value = doc.get(name)
    # bool is an int in Python; a stored true must not pass for a number
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CorruptData(path, f"field {name!r} must be {kind.__name__}, found {value!r}")
    return value


def field_enum(path: str, doc: Mapping[str, Any], name: str, kind: type[E]) -> E:
    value = doc.get(name)
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(str(m.value) for m in kind)
        raise CorruptData(path, f"unknown {name} {value!r} (known: {known})") from None


def pack(kind: str, header: Mapping[str, Any], body: bytes) -> bytes:
    return _BLOB_MAGIC + encode(kind, header) + b"\n" + body


def unpack(path: str, data: bytes, kind: str) -> tuple[dict[str, Any], bytes]:
    """The header fields and the body of a blob of ``kind``."""
    if not data.startswith(_BLOB_MAGIC):
        raise CorruptData(path, "not an ha blob (bad magic)")
    head, sep, body = data[len(_BLOB_MAGIC) :].partition(b"\n")
    if not sep:
        raise CorruptData(path, "truncated blob header")
    return decode(path, head, kind), body
