"""The election's names and encodings, pure: what a queue node's name says, and a breadcrumb.

The paths they live at, and the backend calls on them, are ``nodes.py``'s (``ElectionNodes``);
the machine needs only what is here, so it reads names without any I/O.

A queue node is named ``TICKET_SEQ``, and ``TICKET`` is ``IDENTITY_NONCE``:

    IDENTITY  the contender's identity, percent-encoded into one path segment
    NONCE     8 hex digits, random for each join, then ``p<N>`` when the join publishes a
              priority N (1..MAX_PRIORITY; none: no preference, ``membership/handback.py``)
    SEQ       the backend's sequence number, given at the node's creation

The ticket is chosen before the node is created, so a contender whose create lost its reply
finds its node again by listing the queue (Curator's protected create), and it makes every
node's path new: a node is never created again under a path someone used before (no ABA for
the fenced writes that check it). ``parse_entry`` reads a name once, priority included;
a name of another grammar is foreign (None), never an error.

A breadcrumb (``PATH/b/TICKET``) is ``ha.breadcrumb/2`` JSON: the identity and data of whoever
joined with that ticket (and may have led), for the next leader's fence hook.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote, unquote_to_bytes

from ..errors import ConfigurationError

__all__ = (
    "BREADCRUMB_FORMAT",
    "MAX_PRIORITY",
    "Breadcrumb",
    "QueueEntry",
    "check_priority",
    "decode_breadcrumb",
    "encode_breadcrumb",
    "identity_bytes",
    "in_order",
    "lower_lives",
    "nonce",
    "parse_entry",
    "priority_of",
    "ticket_for",
    "with_epoch",
)

BREADCRUMB_FORMAT = "ha.breadcrumb/2"
MAX_PRIORITY = 1_000_000
_NONCE = re.compile(r"[0-9a-f]{8}p(\d{1,7})")  # a nonce that publishes a priority


# --- breadcrumbs -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Breadcrumb:
    """Who joined (and may have led), with their data; ``epoch`` is that contender's token.

    A stored breadcrumb has no epoch (its node's token is fixed only by the create that makes
    both); the one handed to a fence hook carries it (``None`` if it could not be known).
    """

    identity: bytes
    epoch: int | None = None
    data: bytes = b""


def identity_bytes(identity: bytes | str) -> bytes:
    """A contender's identity as stored in its node and breadcrumb: non-empty bytes."""
    if isinstance(identity, str):
        identity = identity.encode()
    if not isinstance(identity, bytes | bytearray) or not identity:
        raise ConfigurationError("identity must be non-empty bytes or str (e.g. b'host-a:7077')")
    return bytes(identity)


def encode_breadcrumb(crumb: Breadcrumb) -> bytes:
    doc: dict[str, object] = {
        "format": BREADCRUMB_FORMAT,
        "identity": base64.b64encode(crumb.identity).decode(),
        "data": base64.b64encode(crumb.data).decode(),
    }
    if crumb.epoch is not None:
        doc["epoch"] = crumb.epoch
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_breadcrumb(raw: bytes) -> Breadcrumb | None:
    """The breadcrumb in ``raw``, or None when it is not one of ours (corrupt or foreign).

    None is an answer, not an error: the machine hands such bytes to the fence hook as they are
    (whoever wrote them may still be active), and ``ha status`` lists them as a problem.
    """
    try:
        doc = json.loads(raw)
        if doc.get("format") != BREADCRUMB_FORMAT:
            return None
        epoch = doc.get("epoch")
        if epoch is not None and (not isinstance(epoch, int) or isinstance(epoch, bool)):
            return None
        return Breadcrumb(
            base64.b64decode(doc["identity"], validate=True),
            epoch,
            base64.b64decode(doc.get("data", ""), validate=True),
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def with_epoch(raw: bytes, epoch: int) -> bytes:
    """A stored breadcrumb as a fence hook gets it: with its owner's token (foreign: as is)."""
    crumb = decode_breadcrumb(raw)
    if crumb is None:
        return raw
    return encode_breadcrumb(Breadcrumb(crumb.identity, epoch, crumb.data))


# --- tickets and their priority ----------------------------------------------------------------


def check_priority(priority: object) -> int:
    """``priority`` if it is an integer in [0, MAX_PRIORITY], else raise ConfigurationError."""
    if type(priority) is not int or not 0 <= priority <= MAX_PRIORITY:
        raise ConfigurationError(
            f"priority must be an integer from 0 (no preference) to {MAX_PRIORITY}, got"
            f" {priority!r}"
        )
    return priority


def nonce(bits: int, priority: int) -> str:
    """A join's nonce: 8 hex digits of ``bits``, then ``p<priority>`` unless it is 0."""
    base = f"{bits:08x}"
    return base if priority == 0 else f"{base}p{priority}"


def ticket_for(identity: bytes, nonce: str) -> str:
    """A join's ticket: the identity, percent-encoded into one path segment, and a nonce."""
    return f"{quote(identity, safe='')}_{nonce}"


def priority_of(ticket: str) -> int:
    """The priority a join's ticket publishes; 0 when it names none (or is foreign)."""
    found = _NONCE.fullmatch(ticket.rpartition("_")[2])
    return 0 if found is None else min(int(found.group(1)), MAX_PRIORITY)


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """One node of the queue, read from its name alone."""

    name: str  # TICKET_SEQ
    ticket: str
    seq: int
    identity: bytes
    priority: int = 0  # what its ticket publishes (0: no preference)


def parse_entry(name: str) -> QueueEntry | None:
    """The entry named ``name``, or None when the name is not ``TICKET_SEQ`` (foreign)."""
    ticket, _, seq = name.rpartition("_")
    quoted, _, nonce = ticket.rpartition("_")
    if not seq.isdigit() or not quoted or not nonce:
        return None
    return QueueEntry(name, ticket, int(seq), unquote_to_bytes(quoted), priority_of(ticket))


def in_order(names: Sequence[str]) -> list[QueueEntry]:
    """The queue's entries, lowest sequence (the leader) first; foreign names are left out."""
    entries = [e for e in map(parse_entry, names) if e is not None]
    entries.sort(key=lambda e: e.seq)
    return entries


def lower_lives(departed: str, below: tuple[str, ...]) -> bool:
    """Whether a node below ``departed`` still lives: then ``departed`` never led (machine.py, P5)."""
    gone = parse_entry(departed)
    return gone is not None and any(
        e is not None and e.seq < gone.seq for e in map(parse_entry, below)
    )
