"""The supervised rounds' witness: the COMMANDs' own heartbeats, and the pure check of them.

Every COMMAND that ``ha run`` starts in these rounds (``tests/chaos/heartbeat.py``) appends a
line every ~20 ms: ``{"id": HA_IDENTITY, "epoch": HA_EPOCH, "pid": ..., "t": ...}``, where ``t``
is ``time.monotonic()`` read just before the append (CLOCK_MONOTONIC: one clock for every
process of a host namespace). A COMMAND is known by (identity, epoch, pid); it "started" at its
first reading. What a supervisor promises, judged by ``check``:

- ``older epoch``: no COMMAND of an older epoch reads the clock (and goes on to beat) after a
  COMMAND of a newer epoch read its first: two terms' COMMANDs never run at once;
- ``two COMMANDs``: one supervisor (one ``HA_IDENTITY``) never has two COMMANDs alive at once:
  one that started earlier has no reading after the later one's first;
- ``epoch shared``: two supervisors never run COMMANDs under the same epoch;
- ``liveness`` (when asked): some COMMAND beats within ``live_within`` of the healing.

No slack: a reading ``t`` after another COMMAND's first reading ``s`` means both processes were
running at ``s``; that they were alive between their readings is all the order implies, so
a reading equal to ``s`` is not judged.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from tests.support.witness import Violation


@dataclass(frozen=True)
class Command:
    """One COMMAND's run, from its heartbeats."""

    identity: str
    epoch: int
    pid: int
    first: float
    last: float
    beats: int

    def __str__(self) -> str:
        return (
            f"{self.identity}'s COMMAND (pid {self.pid}, epoch {self.epoch}, "
            f"beats {self.first:.3f}..{self.last:.3f})"
        )


def read_beats(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The heartbeat file's lines (a line is whole or absent: one write(2) with O_APPEND)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in data.split(b"\n") if line.strip()]


def commands(beats: list[dict[str, Any]]) -> list[Command]:
    """The COMMANDs of a heartbeat history, by their first reading."""
    runs: dict[tuple[str, int, int], list[float]] = {}
    for b in beats:
        key = (str(b["id"]), int(b["epoch"]), int(b["pid"]))
        t = float(b["t"])
        run = runs.setdefault(key, [t, t, 0])
        run[0], run[1], run[2] = min(run[0], t), max(run[1], t), run[2] + 1
    found = [Command(i, e, p, f, last, int(n)) for (i, e, p), (f, last, n) in runs.items()]
    return sorted(found, key=lambda c: (c.first, c.identity, c.pid))


def most_alive(runs: list[Command]) -> int:
    """The most COMMANDs alive at once (from first to last reading): 1 in a healthy round."""
    events = sorted([(r.first, 1) for r in runs] + [(r.last, -1) for r in runs])
    alive = most = 0
    for _, step in events:  # at a tie the end comes first: readings equal are not judged
        alive += step
        most = max(most, alive)
    return most


def check(
    beats: list[dict[str, Any]],
    *,
    healed_at: float | None = None,
    live_within: float = 0.0,
) -> list[Violation]:
    """Judge a heartbeat history (see the module's rules); empty when all is well."""
    runs = commands(beats)
    out: list[Violation] = []
    for i, later in enumerate(runs):
        for earlier in runs[:i]:  # started no later than ``later``
            if earlier.epoch < later.epoch and earlier.last > later.first:
                text = f"{earlier} beat {earlier.last - later.first:.3f}s after {later} started"
                out.append(Violation("older epoch", text))
            if later.epoch < earlier.epoch and later.last > earlier.first:
                text = f"{later} beat after {earlier} started"  # a stale term started late
                out.append(Violation("older epoch", text))
            if earlier.identity == later.identity and earlier.last > later.first:
                text = f"{earlier} beat {earlier.last - later.first:.3f}s after {later} started"
                out.append(Violation("two COMMANDs", text))
    owner: dict[int, Command] = {}
    for run in runs:
        first = owner.setdefault(run.epoch, run)
        if first.identity != run.identity:
            out.append(Violation("epoch shared", f"{first} and {run}"))
    if healed_at is not None:
        after = [float(b["t"]) for b in beats if float(b["t"]) >= healed_at]
        if not after or min(after) > healed_at + live_within:
            first_beat = f"first at +{min(after) - healed_at:.2f}s" if after else "none at all"
            text = f"no COMMAND beat within {live_within:.1f}s of healing ({first_beat})"
            out.append(Violation("liveness", text))
    return out
