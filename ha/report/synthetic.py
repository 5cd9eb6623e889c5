"""Synthetic election journals, in the format electors write (``ha.election.journal``); ``ha.report`` reads them.

A journal is JSON lines, one record per elector transition::

    {"ts": 1700000000.25, "election": "/jobs", "identity": "host-a", "from": "standby",
     "to": "active", "epoch": 7, "cause": "lock created"}

``ts`` is Unix seconds (float), ``epoch`` an integer when ``to`` is active and null otherwise,
states are the elector's. Each process appends its own file; the report reads any number of
them, in any order.

The generator models electors handing leadership on: terms of exponential length, then either
a graceful handover (active -> neutral, gap of milliseconds) or a crash (active -> fenced, gap
of about a session timeout), the next active taking epoch + 1. It is vectorized with numpy, so
ten million events take seconds, and it returns the ground truth (interval and failover
counts, injected overlaps) so tests can check the report against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError
from .analysis import COLUMNS

__all__ = ("InjectedOverlap", "JournalTruth", "generate_journal")


@dataclass(frozen=True, slots=True)
class InjectedOverlap:
    """Leadership of ``first`` and ``second`` overlapped in ``election`` over [start, end)."""

    election: str
    first: str
    second: str
    start: float
    end: float


@dataclass(slots=True)
class JournalTruth:
    """What the generator wrote, for checking the report."""

    files: list[Path] = field(default_factory=list)
    events: int = 0
    intervals: dict[str, int] = field(default_factory=dict)  # per election
    failovers: dict[str, int] = field(default_factory=dict)  # per election (gap >= 0)
    overlaps: list[InjectedOverlap] = field(default_factory=list)
    last_epoch: dict[str, int] = field(default_factory=dict)
    gaps: dict[str, Any] = field(default_factory=dict)  # per election: numpy array, seconds


def generate_journal(
    directory: Path | str,
    *,
    events: int = 100_000,
    elections: int = 4,
    identities: int = 3,
    mean_term_s: float = 600.0,
    crash_share: float = 0.3,
    session_timeout_s: float = 2.0,
    overlaps: int = 0,
    overlap_s: float = 0.5,
    events_per_file: int = 1_000_000,
    start_ts: float = 1_700_000_000.0,
    seed: int = 0,
) -> JournalTruth:
    """Write about ``events`` records in ``journal-NNNN.jsonl`` files under ``directory``.

    ``overlaps`` handovers (spread over the elections) are corrupted on purpose: the next
    active starts ``overlap_s`` seconds before the previous one leaves.
    """
    import numpy as np

    if identities < 2:
        raise ConfigurationError("a failover needs at least 2 identities")
    if elections < 1 or events < elections * (identities + 4):
        raise ConfigurationError("too few events for that many elections")
    if not 0 < overlap_s < 1.0:
        raise ConfigurationError("overlap_s must be in (0, 1) seconds (terms last at least 3 s)")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    truth = JournalTruth()
    per_step = 3 + crash_share  # events per handover on average
    terms = max(2, int((events / elections - identities) / per_step))
    overlap_at = rng.choice(elections * (terms - 1), size=overlaps, replace=False)
    buffered: list[Any] = []
    buffered_rows = 0
    for e in range(elections):
        name = f"/service-{e:03d}"
        mine = np.sort(overlap_at[overlap_at // (terms - 1) == e] % (terms - 1))
        frame, injected, gaps = _election_frame(
            np, rng, name, terms, identities, mean_term_s, crash_share, session_timeout_s,
            mine, overlap_s, start_ts,
        )  # fmt: skip
        truth.events += len(frame)
        truth.intervals[name] = terms
        truth.failovers[name] = terms - 1 - len(mine)
        truth.overlaps.extend(injected)
        truth.last_epoch[name] = int(frame["epoch"].max())
        truth.gaps[name] = gaps
        buffered.append(frame)
        buffered_rows += len(frame)
        if buffered_rows >= events_per_file or e == elections - 1:
            truth.files.append(_write(out / f"journal-{len(truth.files):04d}.jsonl", buffered))
            buffered, buffered_rows = [], 0
    return truth


def _election_frame(
    np: Any,
    rng: Any,
    name: str,
    terms: int,
    k: int,
    mean_term_s: float,
    crash_share: float,
    session_timeout_s: float,
    overlap_terms: Any,
    overlap_s: float,
    start_ts: float,
) -> tuple[Any, list[InjectedOverlap], Any]:
    import pandas as pd

    hosts = np.array([f"host-{i}" for i in range(k)], dtype=object)
    # Leader of each term: never the previous one.
    steps = rng.integers(1, k, size=terms)
    steps[0] = 0
    leader = np.cumsum(steps) % k
    epoch = np.cumsum(1 + (rng.random(terms) < 0.05))  # sometimes an attempt burns an epoch
    duration = np.maximum(rng.exponential(mean_term_s, size=terms), 3.0)
    crash = rng.random(terms - 1) < crash_share
    gap = np.where(
        crash,
        session_timeout_s + rng.uniform(0, 0.4, size=terms - 1),
        # At least 10 us: the file keeps microseconds, so a smaller gap could print as overlap.
        1e-5 + rng.exponential(0.005, size=terms - 1),
    )
    # Term i starts when the previous one ended plus the gap.
    start = np.empty(terms)
    start[0] = start_ts + 0.05
    start[1:] = start[0] + np.cumsum(duration[:-1] + gap)
    end = start[:-1] + duration[:-1]  # terms 0..n-2 end; the last is still open
    start[1:][overlap_terms] = end[overlap_terms] - overlap_s  # the injected faults
    start, end = np.round(start, 6), np.round(end, 6)  # as written, so the truth matches

    cols: dict[str, list[Any]] = {f: [] for f in COLUMNS}

    def add(ts: Any, ident: Any, frm: Any, to: Any, ep: Any, cause: Any) -> None:
        n = len(ts)
        cols["ts"].append(ts)
        cols["identity"].append(ident)
        for key, value in (("from", frm), ("to", to), ("cause", cause)):
            cols[key].append(np.full(n, value, dtype=object) if isinstance(value, str) else value)
        cols["epoch"].append(ep)

    none = np.full(k, -1)
    add(np.full(k, start_ts), hosts, "neutral", "standby", none, "connected")
    add(start[:1], hosts[leader[:1]], "standby", "active", epoch[:1], "lock created")
    old, new = leader[:-1], leader[1:]
    left_to = np.where(crash, "fenced", "neutral").astype(object)
    left_cause = np.where(crash, "session expired", "quit").astype(object)
    add(end, hosts[old], "active", left_to, np.full(terms - 1, -1), left_cause)
    add(start[1:], hosts[new], "standby", "active", epoch[1:], "lock created")
    back = np.maximum(end, start[1:]) + rng.uniform(0.05, 0.5, size=terms - 1)
    add(
        back[crash],
        hosts[old][crash],
        "fenced",
        "neutral",
        np.full(crash.sum(), -1),
        "backoff elapsed",
    )
    add(back + 0.5, hosts[old], "neutral", "standby", np.full(terms - 1, -1), "lock held by other")

    frame = pd.DataFrame(
        {
            "ts": np.concatenate(cols["ts"]),
            "election": name,
            "identity": np.concatenate(cols["identity"]),
            "from": np.concatenate(cols["from"]),
            "to": np.concatenate(cols["to"]),
            "epoch": pd.array(np.concatenate(cols["epoch"]), dtype="Int64"),
            "cause": np.concatenate(cols["cause"]),
        }
    )
    frame.loc[frame["epoch"] < 0, "epoch"] = pd.NA
    frame = frame.sort_values("ts", kind="stable", ignore_index=True)
    injected = [
        InjectedOverlap(
            election=name,
            first=str(hosts[old[t]]),
            second=str(hosts[new[t]]),
            start=float(start[t + 1]),
            end=float(end[t]),
        )
        for t in overlap_terms
    ]
    real_gaps = np.delete(start[1:] - end, overlap_terms)
    return frame, injected, real_gaps


def _write(path: Path, frames: list[Any]) -> Path:
    import pandas as pd

    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    # pandas' C encoder is ~10x faster than json.dumps per row; it escapes '/' as '\/'.
    text = frame.to_json(orient="records", lines=True, double_precision=6)
    with path.open("w") as f:
        f.write(text.replace("\\/", "/"))
        if not text.endswith("\n"):
            f.write("\n")
    return path
