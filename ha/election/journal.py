"""Transitions: the record of every change of an elector's public state, and its journal file.

A journal is JSON lines, one transition per line:
``{"ts": 1732240000.123, "election": "/path", "identity": "host-a", "from": "standby",
"to": "active", "epoch": 7, "cause": "won the election"}`` (``epoch`` is null unless ``to`` is
"active"). The Spark report (``ha report``) and the benchmarks read it.
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

    def to_json(self) -> dict[str, Any]:
        return {
            "ts": self.ts,
            "election": self.election,
            "identity": self.identity,
            "from": self.old.value,
            "to": self.new.value,
            "epoch": self.epoch,
            "cause": self.cause,
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
