"""Transitions: the record of every change of an elector's public state, and its journal file.

A journal is JSON lines, one transition per line:
``{"ts": 1732240000.123, "election": "/path", "identity": "host-a", "from": "standby",
"to": "active", "epoch": 7, "cause": "won the election"}`` (``epoch`` is null unless ``to`` is
"active"). The report (``ha report``) and the benchmarks read it.

Three more fields let the report date a crash from the journal instead of assuming it:
``session_timeout`` (the backend's timeout of the writer's session, in seconds),
``detection`` (at most how long after a contender's process dies the backend ends its
session: the session timeout, or less where the backend sees a process die) and, on the
record of a new active that had to fence a predecessor (one that left no record of leaving:
killed, or cut off), ``vacant_since``: when that new active found the lock free (wall clock).
The old active stopped at most ``detection`` before then. And on a record leaving ``active``
written after the term's local deadline had passed (the process was frozen, or starved, past
it), ``until``: that deadline (wall clock), when the term's work had stopped, as the elector's
watchdog would have stopped it. Null when unknown.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import IO, Any

from .machine import State

__all__ = ("JournalWriter", "Transition", "read_journal")


@dataclass(frozen=True, slots=True)
class Transition:
    ts: float  # wall clock, seconds since the epoch
    monotonic: float  # anyio.current_time() in the elector's process
    election: str
    identity: str
    old: State
    new: State
    epoch: int | None
    cause: str
    session_timeout: float | None = None  # the writer's session, as the backend granted it
    detection: float | None = None  # a dead contender's session ends within this (s)
    vacant_since: float | None = None  # a takeover from a crashed active: lock seen free
    until: float | None = None  # leaving active: its local deadline had passed by then

    def to_json(self) -> dict[str, Any]:
        return {
            "ts": self.ts,
            "election": self.election,
            "identity": self.identity,
            "from": self.old.value,
            "to": self.new.value,
            "epoch": self.epoch,
            "cause": self.cause,
            "session_timeout": self.session_timeout,
            "detection": self.detection,
            "vacant_since": self.vacant_since,
            "until": self.until,
        }

    def log_fields(self) -> dict[str, Any]:
        """The structured fields of its log lines (``extra``): JSON logs carry them."""
        return {
            "election": self.election,
            "identity": self.identity,
            "from_state": self.old.value,
            "to_state": self.new.value,
            "epoch": self.epoch,
            "cause": self.cause,
        }


class JournalWriter:
    """Appends transitions to a JSON-lines file, one line and one flush per transition.

    Lines are written whole with one ``write`` in append mode, so several processes may share
    one journal file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._file: IO[str] | None = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def write(self, transition: Transition) -> None:
        if self._file is None:
            raise ValueError(f"journal {self.path} is closed")
        self._file.write(json.dumps(transition.to_json(), separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> JournalWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_journal(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every record of a journal file; a torn last line (a writer killed mid-write) is skipped."""
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records
