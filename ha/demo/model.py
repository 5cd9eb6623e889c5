"""What the demo knows of each contender: a row per contender, built from journal records.

Records are the elector's transitions (``Transition.to_json()``: ``from``, ``to``, ``epoch``,
``cause``) and the contenders' notes (``note``, ``text``, ``pid``), each with ``ts`` and
``identity``. The scenario waits on the model (``wait_for``) and searches its records.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from ..errors import HAError

__all__ = ("SETTLE_TIMEOUT", "DemoFailed", "Model", "Row")

SETTLE_TIMEOUT = 30.0  # seconds to wait for any expected step before giving up


class DemoFailed(HAError):
    """The demo did not see what it expected in time."""


@dataclass(slots=True)
class Row:
    identity: str
    state: str = "starting"
    epoch: int | None = None
    since: float = field(default_factory=time.time)
    pid: int | None = None
    note: str = ""


class Model:
    """Rows per contender, built from journal records; waiters wake on every change."""

    def __init__(self, identities: tuple[str, ...]) -> None:
        self.rows = {i: Row(i) for i in identities}
        self.records: list[dict[str, Any]] = []
        self.log: list[str] = []
        self._changed = anyio.Event()

    def apply(self, record: dict[str, Any]) -> None:
        row = self.rows.get(str(record.get("identity")))
        if row is None:
            return
        self.records.append(record)
        ts = float(record.get("ts", time.time()))
        if "to" in record:
            row.state, row.epoch, row.since = record["to"], record.get("epoch"), ts
            epoch = f" epoch {row.epoch}" if row.epoch is not None else ""
            self.say(
                f"{row.identity}: {record['from']} -> {record['to']}{epoch} ({record['cause']})"
            )
        elif "note" in record:
            row.note = str(record.get("text", ""))
            if record.get("pid"):
                row.pid = int(record["pid"])
            if record["note"] != "started":
                self.say(f"{row.identity}: {row.note}")
        self._changed.set()

    def mark(self, identity: str, state: str, text: str) -> None:
        """A state the contender cannot report itself (killed, frozen)."""
        row = self.rows[identity]
        row.state, row.since, row.epoch = state, time.time(), row.epoch
        self.say(text)
        self._changed.set()

    def say(self, text: str) -> None:
        self.log.append(time.strftime("%H:%M:%S ") + text)

    def active(self) -> list[Row]:
        return [r for r in self.rows.values() if r.state == "active"]

    def settled(self) -> str | None:
        """The one active when every live contender is active or standby, else None."""
        states = [r.state for r in self.rows.values()]
        if states.count("active") == 1 and all(s in ("active", "standby") for s in states):
            return self.active()[0].identity
        return None

    async def wait_for(self, what: str, check: Callable[[], Any]) -> Any:
        """Wait until ``check()`` is truthy; return it. Raises DemoFailed on timeout."""
        with anyio.move_on_after(SETTLE_TIMEOUT):
            while True:
                self._changed = anyio.Event()
                found = check()
                if found:
                    return found
                await self._changed.wait()
        raise DemoFailed(f"timed out after {SETTLE_TIMEOUT:g}s waiting for {what}")

    def transition_after(
        self, ts: float, predicate: Callable[[dict[str, Any]], bool]
    ) -> dict[str, Any] | None:
        for record in self.records:
            if "to" in record and record["ts"] >= ts and predicate(record):
                return record
        return None

    def note_after(self, ts: float, identity: str, kind: str) -> dict[str, Any] | None:
        for record in self.records:
            if (
                record.get("note") == kind
                and record.get("identity") == identity
                and record["ts"] >= ts
            ):
                return record
        return None
