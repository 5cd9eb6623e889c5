"""Helpers for testing code that uses `ha`, and the checker of the safety properties.

``Recorder`` is a contender that records what it is told in a shared ``History``;
``check_history`` verifies ARCHITECTURE.md's safety properties on it. Times are
``time.monotonic()``, one clock for every process of a machine, so histories recorded by
several processes can be merged and checked together.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import anyio

from .election.journal import Transition
from .election.lease import Lease
from .election.machine import LEGAL, State, decode_breadcrumb

__all__ = ("Event", "History", "Recorder", "SafetyViolation", "check_history")


class SafetyViolation(AssertionError):
    """A safety property of ARCHITECTURE.md does not hold in a recorded history."""


@dataclass(frozen=True, slots=True)
class Event:
    t: float
    identity: str
    kind: str  # start, stop, fence, transition, quit, expire (a forced expiry of its session)
    epoch: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "t": self.t,
                "identity": self.identity,
                "kind": self.kind,
                "epoch": self.epoch,
                "detail": self.detail,
            }
        )

    @classmethod
    def from_json(cls, line: str) -> Event:
        d = json.loads(line)
        return cls(d["t"], d["identity"], d["kind"], d["epoch"], d["detail"])


class History:
    """An append-only list of events (of one process, or merged from many)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, identity: str, kind: str, epoch: int | None = None, **detail: Any) -> None:
        self.events.append(Event(time.monotonic(), identity, kind, epoch, detail))

    def transition(self, t: Transition) -> None:
        self.add(t.identity, "transition", t.epoch, old=t.old.value, new=t.new.value, cause=t.cause)

    def merge(self, events: list[Event]) -> None:
        self.events.extend(events)
        self.events.sort(key=lambda e: e.t)


class Recorder:
    """A contender that records its calls. Knobs make its hooks fail, for fault tests."""

    def __init__(self, identity: str, history: History) -> None:
        self.identity = identity
        self.history = history
        self.refuse_fence = 0  # refuse the next n fence requests
        self.fail_active = 0  # raise in the next n become_active calls
        self.hang_hooks = False  # standby/neutral hooks hang (to test hook timeouts)
        self.leases: list[Lease] = []

    async def become_active(self, lease: Lease) -> None:
        self.leases.append(lease)
        self.history.add(self.identity, "start", lease.epoch)
        try:
            if self.fail_active > 0:
                self.fail_active -= 1
                raise RuntimeError("injected failure in become_active")
            await anyio.sleep_forever()
        finally:
            self.history.add(self.identity, "stop", lease.epoch)

    async def fence_old_active(self, breadcrumb: bytes) -> None:
        crumb = decode_breadcrumb(breadcrumb)
        old = crumb.identity.decode(errors="replace") if crumb else None
        self.history.add(
            self.identity, "fence", crumb.epoch if crumb else None, old=old, raw=breadcrumb.hex()
        )
        if self.refuse_fence > 0:
            self.refuse_fence -= 1
            raise RuntimeError("injected: fencing refused")

    async def become_standby(self) -> None:
        if self.hang_hooks:
            await anyio.sleep_forever()

    async def enter_neutral(self) -> None:
        if self.hang_hooks:
            await anyio.sleep_forever()


def check_history(history: History | list[Event]) -> None:
    """Raise SafetyViolation unless properties 1, 2, 3 and 6 hold in the history."""
    events = sorted(history.events if isinstance(history, History) else history, key=lambda e: e.t)
    # epoch -> (identity, time) of the report to ACTIVE with that epoch
    owners: dict[int, tuple[str, float]] = {}
    last_state: dict[str, State] = {}
    starts: list[Event] = []
    stops: dict[tuple[str, int], float] = {}
    fences: dict[str, list[Event]] = defaultdict(list)
    graceful: dict[int, float] = {}  # epoch -> time its active quit without fence
    forced: dict[str, list[float]] = defaultdict(list)  # identity -> forced expiry times

    for e in events:
        if e.kind == "transition":
            old, new = State(e.detail["old"]), State(e.detail["new"])
            was = last_state.get(e.identity, State.NEUTRAL)
            if was is not old:
                raise SafetyViolation(f"{e.identity}: transition from {old} but was {was}")
            if (old, new) not in LEGAL:
                raise SafetyViolation(f"{e.identity}: illegal transition {old} -> {new}")
            last_state[e.identity] = new
            if new is State.ACTIVE:
                assert e.epoch is not None
                if e.epoch in owners:  # property 1
                    raise SafetyViolation(
                        f"epoch {e.epoch} made active twice: {owners[e.epoch][0]} and {e.identity}"
                    )
                if owners and e.epoch <= max(owners):
                    raise SafetyViolation(f"epoch {e.epoch} of {e.identity} does not increase")
                owners[e.epoch] = (e.identity, e.t)
            if old is State.ACTIVE and e.detail["cause"] == "quit":
                epoch = max(
                    (ep for ep, (who, _) in owners.items() if who == e.identity), default=None
                )
                if epoch is not None:
                    graceful[epoch] = e.t
        elif e.kind == "start":
            starts.append(e)
        elif e.kind == "stop":
            assert e.epoch is not None
            stops[(e.identity, e.epoch)] = e.t
        elif e.kind == "fence":
            fences[e.identity].append(e)
        elif e.kind == "expire":
            forced[e.identity].append(e.t)

    for s in starts:
        assert s.epoch is not None
        owner = owners.get(s.epoch)
        if owner is None or owner[0] != s.identity:
            raise SafetyViolation(f"{s.identity} started work with epoch {s.epoch} it never won")
        prev_epoch = s.epoch - 1
        if prev_epoch in owners and owners[prev_epoch][0] != s.identity:
            # property 2: the previous breadcrumb was fenced, or its owner quit gracefully
            holder = owners[prev_epoch][0]
            fenced = any(
                f.t <= s.t and f.epoch == prev_epoch and f.detail.get("old") == holder
                for f in fences[s.identity]
            )
            if not fenced and not (prev_epoch in graceful and graceful[prev_epoch] <= s.t):
                raise SafetyViolation(
                    f"{s.identity} started epoch {s.epoch} without fencing {holder} "
                    f"(epoch {prev_epoch})"
                )
        # property 3: every earlier leadership scope of others had stopped, unless their
        # session was expired by force (then only fencing protects, checked above)
        for other in starts:
            assert other.epoch is not None
            if other.epoch >= s.epoch or other.identity == s.identity or other.t > s.t:
                continue
            stopped = stops.get((other.identity, other.epoch))
            if stopped is not None and stopped <= s.t:
                continue
            if any(other.t <= t <= s.t for t in forced[other.identity]):
                continue
            raise SafetyViolation(
                f"{s.identity} started epoch {s.epoch} while {other.identity} still ran "
                f"epoch {other.epoch}"
            )
