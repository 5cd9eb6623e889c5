"""The two records ``ha run`` keeps beside the elector's nodes, and their one JSON codec.

    PATH/members/ID    ``Member``: one running supervisor, its state, host and pid
    PATH/failover      ``FailoverRequest``: the last graceful failover asked for
    PATH/pause         ``Pause``: who paused the election (``ha pause``), while it is paused

Their paths are ``ElectionNodes``' (``ha/election/nodes.py``). Each record is one JSON object
``{"format": KIND, ...fields}`` with identities in base64 (they are bytes). A record that does
not decode (bad JSON, another format, a missing or mistyped field) reads as None: the readers
only report, so foreign or corrupt bytes are shown, never raised.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = (
    "DEFAULT_COOLDOWN",
    "FAILOVER_FORMAT",
    "MEMBER_FORMAT",
    "PAUSE_FORMAT",
    "FailoverRequest",
    "Member",
    "Pause",
    "text",
)

FAILOVER_FORMAT = "ha.failover/1"
MEMBER_FORMAT = "ha.member/1"
PAUSE_FORMAT = "ha.pause/1"
DEFAULT_COOLDOWN = 5.0

R = TypeVar("R")
Show = Callable[[bytes], str]  # how a record's identities are written: base64, or display text


def text(identity: bytes) -> str:
    """An identity for display: UTF-8, with undecodable bytes escaped."""
    return identity.decode("utf-8", "backslashreplace")


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _unb64(value: object) -> bytes:
    if not isinstance(value, str):
        raise ValueError("not base64 text")
    return base64.b64decode(value, validate=True)


def _encode(kind: str, fields: dict[str, Any]) -> bytes:
    return json.dumps({"format": kind, **fields}, separators=(",", ":")).encode()


def _decode(raw: bytes, kind: str, build: Callable[[dict[str, Any]], R | None]) -> R | None:
    """``build(fields)`` of a ``kind`` record, or None for anything unreadable."""
    try:
        doc = json.loads(raw)
        if doc.get("format") != kind:
            return None
        return build(doc)
    except (ValueError, TypeError, KeyError, AttributeError, binascii.Error):
        return None


@dataclass(frozen=True, slots=True)
class Member:
    """One ``ha run`` supervisor taking part (its ephemeral node under ``PATH/members``)."""

    identity: bytes
    state: str  # neutral | standby | active | fenced | out (stepped aside, unhealthy, cooling)
    epoch: int | None = None
    host: str = ""
    pid: int = 0
    since: float = 0.0  # wall clock of the last state change
    note: str = ""  # why it is out, for example

    def _fields(self, show: Show) -> dict[str, Any]:
        return {
            "identity": show(self.identity),
            "state": self.state,
            "epoch": self.epoch,
            "host": self.host,
            "pid": self.pid,
            "since": self.since,
            "note": self.note,
        }

    def encode(self) -> bytes:
        return _encode(MEMBER_FORMAT, self._fields(b64))

    @classmethod
    def decode(cls, raw: bytes) -> Member | None:
        def build(doc: dict[str, Any]) -> Member:
            return cls(
                _unb64(doc["identity"]),
                str(doc["state"]),
                doc.get("epoch"),  # shown as found: members only report
                str(doc.get("host", "")),
                int(doc.get("pid", 0)),
                float(doc.get("since", 0.0)),
                str(doc.get("note", "")),
            )

        return _decode(raw, MEMBER_FORMAT, build)

    def to_json(self) -> dict[str, Any]:
        return self._fields(text)


@dataclass(frozen=True, slots=True)
class FailoverRequest:
    """A graceful failover asked of the active of epoch ``epoch`` (see ``failover.py``)."""

    id: str
    active: bytes  # who was active when it was asked
    epoch: int
    to: bytes | None = None  # the chosen standby, or None: any
    cooldown: float = DEFAULT_COOLDOWN
    requested: float = 0.0  # wall clock, for display only
    by: str = ""
    # the active took it and cedes now: ``ha pause`` no longer clears it (``pause.py``)
    ceding: bool = False

    def _fields(self, show: Show) -> dict[str, Any]:
        return {
            "id": self.id,
            "active": show(self.active),
            "epoch": self.epoch,
            "to": None if self.to is None else show(self.to),
            "cooldown": self.cooldown,
            "requested": self.requested,
            "by": self.by,
            "ceding": self.ceding,
        }

    def encode(self) -> bytes:
        return _encode(FAILOVER_FORMAT, self._fields(b64))

    @classmethod
    def decode(cls, raw: bytes) -> FailoverRequest | None:
        def build(doc: dict[str, Any]) -> FailoverRequest | None:
            # the epoch decides which active cedes: a request without a true integer is void
            epoch = doc["epoch"]
            if type(epoch) is not int:
                return None
            to = doc.get("to")
            return cls(
                str(doc["id"]),
                _unb64(doc["active"]),
                epoch,
                None if to is None else _unb64(to),
                float(doc.get("cooldown", DEFAULT_COOLDOWN)),
                float(doc.get("requested", 0.0)),
                str(doc.get("by", "")),
                doc.get("ceding") is True,
            )

        return _decode(raw, FAILOVER_FORMAT, build)

    def to_json(self) -> dict[str, Any]:
        return self._fields(text)


@dataclass(frozen=True, slots=True)
class Pause:
    """Who paused the election, when, and who was active then (None: nobody)."""

    by: str
    since: float  # wall clock
    active: bytes | None = None
    epoch: int | None = None

    def _fields(self, show: Show) -> dict[str, Any]:
        return {
            "by": self.by,
            "since": self.since,
            "active": None if self.active is None else show(self.active),
            "epoch": self.epoch,
        }

    def encode(self) -> bytes:
        return _encode(PAUSE_FORMAT, self._fields(b64))

    @classmethod
    def decode(cls, raw: bytes) -> Pause:
        """The pause in ``raw``; anything else at the node still pauses (shown as unknown)."""

        def build(doc: dict[str, Any]) -> Pause:
            active, epoch = doc.get("active"), doc.get("epoch")
            return cls(
                str(doc.get("by", "")),
                float(doc.get("since", 0.0)),
                None if active is None else _unb64(active),
                epoch if type(epoch) is int else None,
            )

        found = _decode(raw, PAUSE_FORMAT, build)
        return found or cls("unknown (not an ha pause record)", 0.0)

    def to_json(self) -> dict[str, Any]:
        return self._fields(text)
