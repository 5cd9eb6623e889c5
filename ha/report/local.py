"""The report's analysis on this machine, without Spark: the same definitions (``analysis``'s
docstring), the same ``JournalReport``, computed with Arrow and numpy in this process.

A JVM takes seconds to start before it reads a line; a day's journal is read and swept here
in a fraction of that. ``ha report`` chooses this engine for local files that fit in memory
(``engine.choose``) and Spark for the rest (remote URIs, a cluster, inputs beyond memory).
The results are Spark's, number for number (``tests/report/test_engines.py`` compares them on
the same journals), with two exceptions that are Spark's by nature: the order of records of
one holder at the very same time (arbitrary in both), and which failovers a sample keeps when
there are more than ``GAP_SAMPLE``.

Each file is read by Arrow's JSON reader with the journal's schema; a file it refuses (a line
that is not JSON, a field of the wrong type: a torn or foreign line) is read again line by
line, a bad line counting as one malformed record, as Spark's permissive mode counts it.
"""

from __future__ import annotations

import glob
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from .analysis import (
    COLUMNS,
    DEFAULT_SESSION_TIMEOUT,
    GAP_SAMPLE,
    MAX_OVERLAP_ROWS,
    MINUTE_RATES_BELOW,
    STAGES,
    STATES,
    JournalReport,
)
from .summary import (
    CLOSEUPS,
    EPOCH_POINTS,
    INFERRED_ENDS,
    TIMELINE_ELECTIONS,
    TIMELINE_INTERVALS,
    finish_summary,
)

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import pyarrow as pa

__all__ = ("analyze_local", "journal_files")

END_KINDS = ("assumed", "left", "open", "restarted", "superseded")  # sorted: struct order
KINDS = ("first", "failover", "overlap")  # sweep's kind, by code
# summary.election_summary's per-interval columns, in its order
COUNTED = (
    "election", "intervals", "open_intervals", "unclosed", "dated_ends", "assumed_ends",
    "failovers", "known_gaps", "crashes", "gap_p50", "gap_p90", "gap_max", "overlaps",
    "overlap_s", "covered_s", "first_epoch", "last_epoch", "epoch_violations", "distinct_epochs",
)  # fmt: skip


def journal_files(paths: Sequence[str]) -> list[str]:
    """The files a list of paths names, as Spark lists them: a directory's files (not its
    subdirectories', nor names starting with ``_`` or ``.``), a glob's matches."""
    found: list[str] = []
    for path in paths:
        local = os.path.expanduser(path)
        if any(c in path for c in "*?["):
            matches = sorted(glob.glob(local))
            if not matches:
                raise ConfigurationError(f"no journal matches {path!r}")
        elif os.path.exists(local):
            matches = [local]
        else:
            raise ConfigurationError(f"no such journal: {path}")
        for match in matches:
            if os.path.isdir(match):
                found.extend(
                    os.path.join(match, name)
                    for name in sorted(os.listdir(match))
                    if not name.startswith(("_", ".")) and os.path.isfile(os.path.join(match, name))
                )
            else:
                found.append(match)
    return found


def _schema() -> pa.Schema:
    import pyarrow as pa

    types = {"double": pa.float64(), "long": pa.int64(), "string": pa.string()}
    return pa.schema([(name, types[kind]) for name, kind in COLUMNS.items()])


def _read_file(path: str, schema: pa.Schema) -> pa.Table:
    import pyarrow as pa
    from pyarrow import json as pa_json

    options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        return pa_json.read_json(path, parse_options=options)
    except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeDecodeError):
        return _read_lines(path, schema)


def _read_lines(path: str, schema: pa.Schema) -> pa.Table:
    """A file Arrow refused, line by line: a line that is not a JSON object is a row of
    nulls, a field of the wrong type is null (Spark's permissive mode)."""
    import pyarrow as pa

    kinds = {"double": (int, float), "long": (int,), "string": (str,)}
    columns: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict):
                record = {}
            for name, kind in COLUMNS.items():
                value = record.get(name)
                ok = isinstance(value, kinds[kind]) and not isinstance(value, bool)
                columns[name].append(value if ok else None)
    return pa.table(columns, schema=schema)


def _codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """A string column as integer codes whose order is the strings' (-1 for null)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    names = sorted(str(v) for v in pc.unique(column).drop_null().to_pylist())
    if not names:
        return np.full(len(column), -1, dtype=np.int64), names
    codes = pc.index_in(column, value_set=pa.array(names))
    return np.asarray(codes.fill_null(-1).to_numpy(), dtype=np.int64), names


def _floats(column: pa.ChunkedArray) -> np.ndarray:
    import numpy as np
    import pyarrow as pa

    return np.asarray(column.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=float)


def _within(group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows (in a sorted order) whose previous / next row is in the same group."""
    import numpy as np

    same = np.zeros(len(group), dtype=bool)
    same[1:] = group[1:] == group[:-1]
    after = np.zeros(len(group), dtype=bool)
    after[:-1] = same[1:]
    return same, after


def _shift(values: np.ndarray, keep: np.ndarray, step: int) -> np.ndarray:
    """values[i + step] where ``keep`` (same group), else NaN."""
    import numpy as np

    out = np.full(len(values), np.nan)
    if step > 0:
        out[:-step] = values[step:]
    else:
        out[-step:] = values[:step]
    out[~keep] = np.nan
    return out


def analyze_local(
    paths: Sequence[str],
    *,
    session_timeout: float = DEFAULT_SESSION_TIMEOUT,
    on_stage: Callable[[str], None] | None = None,
) -> JournalReport:
    """``analysis.analyze`` in this process, for local journal files."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if session_timeout < 0:
        raise ConfigurationError(f"session_timeout must be >= 0 seconds, got {session_timeout}")
    stage = on_stage or (lambda name: None)
    started = time.perf_counter()
    stage(STAGES[0])
    schema = _schema()
    tables = [_read_file(path, schema) for path in journal_files(paths)]
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    read = table.num_rows
    states = pa.array(STATES)
    valid = pc.fill_null(
        pc.and_(
            pc.and_(pc.is_valid(table["ts"]), pc.is_valid(table["election"])),
            pc.and_(
                pc.is_valid(table["identity"]),
                pc.and_(
                    pc.is_in(table["from"], value_set=states),
                    pc.is_in(table["to"], value_set=states),
                ),
            ),
        ),
        False,
    )
    table = table.filter(valid)
    elect, elections = _codes(table["election"])
    ident, identities = _codes(table["identity"])
    ts = _floats(table["ts"])
    epoch = _floats(table["epoch"])
    departs = np.asarray(pc.fill_null(pc.equal(table["from"], "active"), False), dtype=bool)
    enters = np.asarray(pc.fill_null(pc.equal(table["to"], "active"), False), dtype=bool)
    timeout = _floats(table["session_timeout"])
    until = _floats(table["until"])
    prior_end = _floats(table["vacant_since"]) - _floats(table["detection"])
    del table

    stage(STAGES[1])
    # Each holder's records in order, a departure first at equal times; each one's next.
    order = np.lexsort((~departs, ts, ident, elect))
    holder = elect[order] * max(1, len(identities)) + ident[order]
    _, same_after = _within(holder)
    next_ts = _shift(ts[order], same_after, 1)
    next_departs = _shift(departs[order].astype(float), same_after, 1)
    next_until = _shift(until[order], same_after, 1)
    take = order[enters[order]]
    picked = enters[order]
    entries = {
        "elect": elect[take], "ident": ident[take], "ts": ts[take], "epoch": epoch[take],
        "timeout": timeout[take], "prior_end": prior_end[take],
        "next_ts": next_ts[picked], "next_departs": next_departs[picked],
        "next_until": next_until[picked],
    }  # fmt: skip
    events_per, first_ts, last_ts = _spans(elect, ts, len(elections))
    intervals = _intervals(entries, last_ts, session_timeout)
    swept = _sweep(intervals)

    import pandas as pd

    holders = pd.DataFrame({"election": elect, "identity": ident})
    per_election = pd.DataFrame(
        {
            "election": pd.Series(elections, dtype=object),
            "events": events_per,
            "identities": holders.groupby("election")["identity"]
            .nunique()
            .reindex(range(len(elections)), fill_value=0)
            .to_numpy(),
            "first_ts": first_ts,
            "last_ts": last_ts,
        }
    )
    names = (np.asarray(elections, dtype=object), np.asarray(identities, dtype=object))
    summary = finish_summary(
        per_election[per_election["events"] > 0].reset_index(drop=True),
        _counted(swept, names[0]),
    )
    total = int(summary["events"].sum())

    stage(STAGES[2])
    found = _rows(swept, swept["kind"] == KINDS.index("overlap"), names)
    overlaps = pd.DataFrame(
        {
            "election": found["election"],
            "first": found["prev_identity"],
            "second": found["identity"],
            "first_epoch": found["prev_epoch"],
            "second_epoch": found["epoch"],
            "start": found["start"],
            "end": found["start"] + found["overlap"],
            "overlap": found["overlap"],
        }
    ).sort_values(["election", "start"], kind="stable", ignore_index=True)
    overlap_count = len(overlaps)
    overlaps = overlaps.head(MAX_OVERLAP_ROWS)
    failovers = np.flatnonzero(~np.isnan(swept["gap"]))
    if len(failovers) > GAP_SAMPLE:
        failovers = np.sort(np.random.default_rng(1).choice(failovers, GAP_SAMPLE, replace=False))
    gaps = pd.DataFrame(
        {
            "election": names[0][swept["elect"][failovers]],
            "gap": swept["gap"][failovers],
            "after": np.asarray(END_KINDS, dtype=object)[swept["prev_code"][failovers]],
        }
    )

    stage(STAGES[3])
    observed = float(summary["last_ts"].max() - summary["first_ts"].min()) if total else 0.0
    bucket = 3600.0 if observed >= MINUTE_RATES_BELOW else 60.0
    counts = pd.DataFrame({"election": elect, "bucket": np.floor(ts / bucket) * bucket})
    rates = counts.groupby(["election", "bucket"]).size().rename("transitions").reset_index()
    rates["election"] = names[0][rates["election"]]
    rates = rates.sort_values(["election", "bucket"], ignore_index=True)
    timeline, epochs = _timeline_and_epochs(swept, summary, names)
    closeups = _closeups(swept, overlaps, names)
    return JournalReport(
        summary=summary,
        overlaps=overlaps,
        overlap_count=overlap_count,
        gaps=gaps,
        rates=rates,
        rate_bucket_s=bucket,
        timeline=timeline,
        closeups=closeups,
        epochs=epochs,
        events=total,
        malformed=read - total,
        seconds=time.perf_counter() - started,
        session_timeout=session_timeout,
        engine="local",
    )


def _spans(elect: np.ndarray, ts: np.ndarray, n: int) -> tuple[Any, Any, Any]:
    import numpy as np

    events = np.bincount(elect, minlength=n)
    first = np.full(n, np.inf)
    last = np.full(n, -np.inf)
    np.minimum.at(first, elect, ts)
    np.maximum.at(last, elect, ts)
    return events, first, last


def _intervals(e: dict[str, Any], election_end: Any, session_timeout: float) -> dict[str, Any]:
    """``analysis._intervals`` on arrays: each entry into active, dated."""
    import numpy as np

    order = np.lexsort((e["ident"], e["ts"], e["elect"]))
    e = {key: value[order] for key, value in e.items()}
    _, same_after = _within(e["elect"])
    succ_ts = _shift(e["ts"], same_after, 1)
    succ_epoch = _shift(e["epoch"], same_after, 1)
    succ_prior_end = _shift(e["prior_end"], same_after, 1)
    left = e["next_departs"] == 1
    higher = np.isnan(succ_epoch) | np.isnan(e["epoch"]) | (succ_epoch > e["epoch"])
    timeout = np.where(np.isnan(e["timeout"]), float(session_timeout), e["timeout"])
    dated = np.where(np.isnan(succ_prior_end), succ_ts - timeout, succ_prior_end)
    superseded_at = np.where(higher & ~np.isnan(succ_ts), np.fmax(e["ts"], dated), np.nan)
    last = election_end[e["elect"]]
    end = np.where(
        left,
        np.fmin(e["next_ts"], e["next_until"]),
        np.fmin(np.fmin(e["next_ts"], superseded_at), last),
    )
    has_next, has_sup = ~np.isnan(e["next_ts"]), ~np.isnan(superseded_at)
    kind = np.select(
        [
            left,
            has_next & (~has_sup | (e["next_ts"] <= superseded_at)),
            has_sup & ~np.isnan(succ_prior_end),
            has_sup,
        ],
        [END_KINDS.index(k) for k in ("left", "restarted", "superseded", "assumed")],
        END_KINDS.index("open"),
    )
    return {
        "elect": e["elect"], "ident": e["ident"], "start": e["ts"], "end": end,
        "epoch": e["epoch"], "end_code": kind,
    }  # fmt: skip


def _sweep(iv: dict[str, Any]) -> dict[str, Any]:
    """``analysis.sweep`` on arrays: each interval with the latest end before it (the
    greatest (end, identity, epoch, end_kind) of the intervals before it in start order)."""
    import numpy as np

    order = np.lexsort((iv["ident"], iv["end"], iv["start"], iv["elect"]))
    iv = {key: value[order] for key, value in iv.items()}
    n = len(iv["start"])
    same_before, _ = _within(iv["elect"])
    # Rank every interval by (election, end, identity, epoch, end_kind): an election's ranks
    # are above every earlier election's, so a running maximum of the ranks in start order
    # never carries one election's into the next beyond its first row (which has none).
    epoch_key = np.where(np.isnan(iv["epoch"]), -np.inf, iv["epoch"])
    by_rank = np.lexsort((iv["end_code"], epoch_key, iv["ident"], iv["end"], iv["elect"]))
    rank = np.empty(n, dtype=np.int64)
    rank[by_rank] = np.arange(n)
    running = np.maximum.accumulate(rank) if n else rank
    prev_rank = np.full(n, -1, dtype=np.int64)
    prev_rank[1:] = running[:-1]
    prev_rank[~same_before] = -1
    has_prev = prev_rank >= 0
    prev = by_rank[np.where(has_prev, prev_rank, 0)] if n else prev_rank

    def before(values: np.ndarray, missing: Any) -> np.ndarray:
        return np.where(has_prev, values[prev] if n else values, missing)

    prev_end = before(iv["end"], np.nan)
    start, end = iv["start"], iv["end"]
    overlapping = has_prev & (start < prev_end)
    failover = has_prev & ~overlapping
    lag_epoch = _shift(iv["epoch"], same_before, -1)
    # Spark: null when the epoch is (lag_epoch null: ok); a NaN comparison is False here
    bad_epoch = ~np.isnan(lag_epoch) & ~np.isnan(iv["epoch"]) & ~(iv["epoch"] > lag_epoch)
    prev_code = before(iv["end_code"], -1)
    numbers = np.arange(n) - np.maximum.accumulate(np.where(same_before, 0, np.arange(n)))
    return {
        **iv,
        "prev_end": prev_end,
        "prev_ident": before(iv["ident"], -1),
        "prev_epoch": before(iv["epoch"], np.nan),
        "prev_code": prev_code,
        "kind": np.select([~has_prev, overlapping], [0, 2], KINDS.index("failover")),
        "gap": np.where(failover, start - prev_end, np.nan),
        "crash": np.where(failover, prev_code != END_KINDS.index("left"), False),
        "overlap": np.where(overlapping, np.fmin(end, prev_end) - start, np.nan),
        "covered": np.maximum(0.0, end - np.fmax(start, np.where(has_prev, prev_end, start))),
        "bad_epoch": bad_epoch,
        "n": numbers + 1,
    }


def _rows(sw: dict[str, Any], mask: Any, names: tuple[Any, Any]) -> pd.DataFrame:
    """The swept intervals picked by ``mask`` as a frame, with names for codes (few rows:
    overlaps, a timeline, close-ups)."""
    import numpy as np
    import pandas as pd

    at = np.flatnonzero(mask)
    elections, identities = names
    none = np.array([*identities, None], dtype=object)  # prev_ident -1: none

    def epochs(values: Any) -> Any:
        return pd.array(values, dtype="Float64").astype("Int64")  # NaN: missing

    return pd.DataFrame(
        {
            "election": elections[sw["elect"][at]],
            "identity": identities[sw["ident"][at]],
            "start": sw["start"][at],
            "end": sw["end"][at],
            "epoch": epochs(sw["epoch"][at]),
            "kind": np.asarray(KINDS, dtype=object)[sw["kind"][at]],
            "end_kind": np.asarray(END_KINDS, dtype=object)[sw["end_code"][at]],
            "n": sw["n"][at],
            "prev_identity": none[sw["prev_ident"][at]],
            "prev_epoch": epochs(sw["prev_epoch"][at]),
            "overlap": sw["overlap"][at],
        }
    )


def _counted(sw: dict[str, Any], elections: Any) -> pd.DataFrame:
    """``summary.election_summary``'s per-interval aggregation, per election code."""
    import numpy as np
    import pandas as pd

    e, n = sw["elect"], len(elections)

    def count(flags: Any) -> Any:
        return np.bincount(e, weights=flags, minlength=n).astype(np.int64)

    def total(values: Any) -> Any:
        return np.bincount(e, weights=np.nan_to_num(values), minlength=n)

    code = sw["end_code"]
    has_gap = ~np.isnan(sw["gap"])
    # each election's gaps in order: the quantiles are the values at ranks (inverted CDF)
    order = np.lexsort((sw["gap"][has_gap], e[has_gap]))
    gaps, owner = sw["gap"][has_gap][order], e[has_gap][order]
    known = np.bincount(owner, minlength=n)
    offset = np.concatenate([[0], np.cumsum(known)[:-1]])

    def at_rank(q: float) -> Any:
        rank = np.maximum(np.ceil(q * known).astype(np.int64) - 1, 0)
        return np.where(known > 0, gaps[np.minimum(offset + rank, max(len(gaps) - 1, 0))]
                        if len(gaps) else np.nan, np.nan)  # fmt: skip

    has_epoch = ~np.isnan(sw["epoch"])
    low, high = np.full(n, np.inf), np.full(n, -np.inf)
    np.minimum.at(low, e[has_epoch], sw["epoch"][has_epoch])
    np.maximum.at(high, e[has_epoch], sw["epoch"][has_epoch])
    # distinct epochs: each election's epochs in order, counting where the value changes
    by_epoch = np.lexsort((sw["epoch"][has_epoch], e[has_epoch]))
    owners, values = e[has_epoch][by_epoch], sw["epoch"][has_epoch][by_epoch]
    new = np.ones(len(values), dtype=bool)
    new[1:] = (owners[1:] != owners[:-1]) | (values[1:] != values[:-1])
    inferred = [END_KINDS.index(kind) for kind in INFERRED_ENDS]
    counted = pd.DataFrame(
        {
            "election": elections,
            "intervals": np.bincount(e, minlength=n),
            "open_intervals": count(code == END_KINDS.index("open")),
            "unclosed": count(np.isin(code, inferred)),
            "dated_ends": count(code == END_KINDS.index("superseded")),
            "assumed_ends": count(code == END_KINDS.index("assumed")),
            "failovers": count(sw["kind"] == KINDS.index("failover")),
            "known_gaps": known,
            "crashes": count(sw["crash"]),
            "gap_p50": at_rank(0.5),
            "gap_p90": at_rank(0.9),
            "gap_max": at_rank(1.0),
            "overlaps": count(~np.isnan(sw["overlap"])),
            "overlap_s": total(sw["overlap"]),
            "covered_s": total(sw["covered"]),
            "first_epoch": pd.array([None if np.isinf(v) else int(v) for v in low], dtype="Int64"),
            "last_epoch": pd.array([None if np.isinf(v) else int(v) for v in high], dtype="Int64"),
            "epoch_violations": count(sw["bad_epoch"]),
            "distinct_epochs": np.bincount(owners[new], minlength=n),
        },
        columns=COUNTED,
    )
    return counted[counted["intervals"] > 0].reset_index(drop=True)


def _timeline_and_epochs(
    sw: dict[str, Any], summary: pd.DataFrame, names: tuple[Any, Any]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``summary.timeline_and_epochs`` on the arrays."""
    import numpy as np

    busiest = summary.sort_values("events", ascending=False).head(TIMELINE_ELECTIONS)
    code = {name: n for n, name in enumerate(names[0])}
    stride = np.zeros(len(names[0]), dtype=np.int64)  # 0: not drawn
    for name, count in zip(busiest["election"], busiest["intervals"].fillna(0), strict=True):
        stride[code[name]] = max(1, math.ceil(count / EPOCH_POINTS))
    mine = stride[sw["elect"]]
    first = (mine > 0) & (sw["n"] <= TIMELINE_INTERVALS)
    sampled = (mine > 0) & ((sw["n"] - 1) % np.maximum(mine, 1) == 0)
    columns = ["election", "identity", "start", "end", "epoch", "kind", "end_kind", "n"]
    timeline = _rows(sw, first, names)[columns]
    timeline = timeline.sort_values(["election", "n"], ignore_index=True)
    epochs = _rows(sw, sampled, names)[["election", "start", "epoch"]]
    return timeline, epochs.sort_values(["election", "start"], ignore_index=True)


def _closeups(sw: dict[str, Any], overlaps: pd.DataFrame, names: tuple[Any, Any]) -> pd.DataFrame:
    """``summary.closeups`` on the arrays."""
    import pandas as pd

    code = {name: n for n, name in enumerate(names[0])}
    frames = []
    for n, row in enumerate(overlaps.head(CLOSEUPS).to_dict("records")):
        pad = max(10 * float(row["overlap"]), 5.0)
        lo, hi = float(row["start"]) - pad, float(row["end"]) + pad
        near = (sw["elect"] == code[row["election"]]) & (sw["start"] < hi) & (sw["end"] > lo)
        shot = _rows(sw, near, names)[["election", "identity", "start", "end", "epoch", "kind"]]
        shot["closeup"] = n
        shot["lo"], shot["hi"] = lo, hi
        shot["ov_start"], shot["ov_end"] = float(row["start"]), float(row["end"])
        frames.append(shot)
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)
