"""The election's history: its last leaders, and the last fence that was refused.

    PATH/history   persistent, ``ha.history/1`` JSON: {"terms": [...], "fence_failure": ...}

Each new leader appends its term (epoch, identity, wall-clock start, cause) itself, in the
background once its work has started, and in the same write ends the terms before it that are
still open: ``ended`` is its own start (for a crashed leader, when the takeover came: an upper
bound of when it stopped), ``end_cause`` says how (it resigned, or its session ended and it was
fenced). The last term stays open while it lasts, and after it when nobody leads again. A term
resumed in the same session (the same epoch: contact lost and back, or a pause ended) is the
same term: its first record stands, its start is not rewritten.
The takeover itself is unchanged: the takeover stays as it is (a graceful handover is one
write, a takeover after a crash none), the record follows it by a round trip. The append is one
transaction guarded by the leader's own queue node (``Check``, as every fenced write: P3), so a
deposed leader's late append never lands; it is a compare-and-set on the history's version,
retried when another append won. Only the last ``LIMIT`` terms are kept (patronictl history).
A leader that ends (crash, quit) within that round trip of its takeover leaves no record.

A contender whose fence hook refused a takeover writes the refusal (who, whose breadcrumb, the
error, when, how many in a row) in the same document, unguarded: it holds no lead, and the last
refusal is what ``ha status`` shows. Losing the record (no contact) loses nothing else.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..drivers.base import Check, Create, Driver, Op, SetData
from ..errors import BadVersion, NodeExists, NoNode, TransactionFailed
from .nodes import ElectionNodes

__all__ = (
    "HISTORY_FORMAT",
    "LIMIT",
    "FenceFailure",
    "History",
    "Term",
    "append_term",
    "decode_history",
    "read_history",
    "record_fence_failure",
)

HISTORY_FORMAT = "ha.history/1"
LIMIT = 100  # terms kept
_TRIES = 5  # compare-and-set attempts against concurrent writers


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _unb64(value: object) -> bytes:
    if not isinstance(value, str):
        raise ValueError("not base64 text")
    return base64.b64decode(value, validate=True)


@dataclass(frozen=True, slots=True)
class Term:
    """One leader's term: from when it acted, why (the machine's cause), at which epoch."""

    epoch: int
    identity: bytes
    started: float  # wall clock
    cause: str
    ended: float | None = None  # wall clock: when the next leader took over; None while open
    end_cause: str | None = None

    def to_doc(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "identity": _b64(self.identity),
            "started": self.started,
            "cause": self.cause,
            "ended": self.ended,
            "end_cause": self.end_cause,
        }


@dataclass(frozen=True, slots=True)
class FenceFailure:
    """The last refused fence: ``by`` could not fence ``old`` (``count`` times in a row)."""

    by: bytes
    old: str  # the old active's identity as text (its breadcrumb may be unreadable)
    error: str
    at: float  # wall clock
    count: int = 1

    def to_doc(self) -> dict[str, Any]:
        return {
            "by": _b64(self.by),
            "old": self.old,
            "error": self.error,
            "at": self.at,
            "count": self.count,
        }


@dataclass(frozen=True, slots=True)
class History:
    terms: tuple[Term, ...] = ()  # oldest first
    fence_failure: FenceFailure | None = None

    def encode(self) -> bytes:
        doc = {
            "format": HISTORY_FORMAT,
            "terms": [t.to_doc() for t in self.terms],
            "fence_failure": None if self.fence_failure is None else self.fence_failure.to_doc(),
        }
        return json.dumps(doc, separators=(",", ":")).encode()


def decode_history(raw: bytes) -> History | None:
    """The history in ``raw``, or None when it is not one (corrupt or foreign)."""
    try:
        doc = json.loads(raw)
        if doc.get("format") != HISTORY_FORMAT:
            return None
        terms = tuple(
            Term(
                int(t["epoch"]),
                _unb64(t["identity"]),
                float(t["started"]),
                str(t["cause"]),
                None if t.get("ended") is None else float(t["ended"]),
                None if t.get("end_cause") is None else str(t["end_cause"]),
            )
            for t in doc["terms"]
        )
        failed = doc.get("fence_failure")
        failure = None
        if failed is not None:
            failure = FenceFailure(
                _unb64(failed["by"]),
                str(failed["old"]),
                str(failed["error"]),
                float(failed["at"]),
                int(failed.get("count", 1)),
            )
        return History(terms, failure)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


async def read_history(driver: Driver, nodes: ElectionNodes) -> tuple[History, int] | None:
    """(history, version), or None when nothing was recorded yet. A corrupt document reads
    as an empty history (the next append replaces it)."""
    try:
        raw, stat = await driver.get(nodes.history)
    except NoNode:
        return None
    return decode_history(raw) or History(), stat.version


async def _update(
    driver: Driver, nodes: ElectionNodes, change: Callable[[History], History], guard: str | None
) -> bool:
    """Apply ``change`` with a compare-and-set, ``guard`` (a node) checked in the same
    transaction. False when the guard is gone (our term is over: nothing is written)."""
    for _ in range(_TRIES):
        found = await read_history(driver, nodes)
        old, version = found if found is not None else (History(), None)
        data = change(old).encode()
        write: Op = (
            Create(nodes.history, data)
            if version is None
            else SetData(nodes.history, data, version)
        )
        ops: list[Op] = [write] if guard is None else [Check(guard), write]
        try:
            await driver.transaction(ops)
            return True
        except TransactionFailed as exc:
            if guard is not None and exc.index == 0:
                return False
            if not isinstance(exc.cause, BadVersion | NodeExists | NoNode):
                raise exc.cause from exc
    return False  # others kept winning: this record is lost, nothing else


async def append_term(
    driver: Driver, nodes: ElectionNodes, node: str, term: Term, ends: str = "resigned"
) -> bool:
    """Append ``term`` while our queue node ``node`` lives (kept in epoch order, bounded),
    ending the open terms before it with ``ends`` at its start. A term of the same epoch
    already there stays as it is (resumed in the same session: not a new term)."""

    def add(history: History) -> History:
        if any(t.epoch == term.epoch for t in history.terms):
            return history
        terms = [
            replace(t, ended=term.started, end_cause=ends)
            if t.ended is None and t.epoch < term.epoch
            else t
            for t in history.terms
        ]
        terms = sorted((*terms, term), key=_epoch)
        return replace(history, terms=tuple(terms[-LIMIT:]))

    return await _update(driver, nodes, add, nodes.node(node))


async def record_fence_failure(driver: Driver, nodes: ElectionNodes, failure: FenceFailure) -> None:
    """Write ``failure`` as the last refused fence (unguarded: the writer does not lead)."""
    await _update(driver, nodes, lambda h: replace(h, fence_failure=failure), None)


def _epoch(term: Term) -> int:
    return term.epoch
