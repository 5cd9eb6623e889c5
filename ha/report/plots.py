"""The report's charts (SVG, ``svg``), drawn from a ``JournalReport``'s small pandas frames.

Every chart has a legend and is drawn only when it has something to show: a journal of a
few seconds gets no rate line of one point and no epoch staircase of one step. Times on the
axes are relative (seconds or hours since a start the title gives in local ISO time); counts
and epochs get whole-number ticks. What the report estimated rather than read (an end of a
leadership that no record gives, ``summary.INFERRED_ENDS``) is drawn hatched.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from .analysis import JournalReport
from .summary import INFERRED_ENDS
from .svg import PALETTE, Axis, Bar, Chart, Key, Line, Panel, linear_ticks, log_ticks

__all__ = ("charts", "local_time", "seconds_label")

ACTIVE_COLOR = "#1f77b4"
OVERLAP_COLOR = "#d62728"
OTHERS_COLOR = "#999999"  # the elections beyond MAX_SERIES, as one series
# The gaps by how the previous holder's end is known (its ``end_kind``), with their colors.
GAP_KINDS = {
    "left": ("handover: both ends on record", "#2ca02c"),
    "superseded": ("crash: end estimated from the new active's record", "#ff7f0e"),
    "restarted": ("crash: end at the restarted process's first record", "#9467bd"),
    "assumed": ("crash: end assumed a session timeout before the takeover", "#7f7f7f"),
}
LOG_GAPS_ABOVE = 100.0  # a log axis once the gaps span more than this ratio
MAX_SERIES = 12  # lines with their own legend entry; the rest are drawn as one grey series
MIN_RATE_POINTS = 3


def seconds_label(value: float) -> str:
    """A duration for an axis or a table: ms below a second, then s, min, h."""
    if value == 0:
        return "0"
    if value < 1:
        return f"{value * 1000:.3g} ms"
    if value < 120:
        return f"{value:.3g} s"
    if value < 7200:
        return f"{value / 60:.3g} min"
    return f"{value / 3600:.3g} h"


def local_time(ts: float) -> str:
    """Unix seconds as ISO 8601 local time to the millisecond, with its UTC offset."""
    return datetime.fromtimestamp(ts).astimezone().isoformat(sep=" ", timespec="milliseconds")


def charts(report: JournalReport) -> list[Chart]:
    """Each chart that has data, in the page's order."""
    drawers: list[Callable[[JournalReport], Chart | None]] = [
        _timeline, _gaps, _rates, _closeups, _epochs,
    ]  # fmt: skip
    return [drawn for draw in drawers if (drawn := draw(report)) is not None]


def _bar_keys(overlap: bool, estimated: bool = False) -> list[Key]:
    keys = [Key("active", ACTIVE_COLOR)]
    if estimated:
        keys.append(Key("active, end estimated (no record of leaving)", ACTIVE_COLOR, "hatch"))
    if overlap:
        keys.append(Key("active while another was (overlap)", OVERLAP_COLOR))
    return keys


def _bars(rows: Any, lo: float, hi: float | None = None) -> tuple[list[Bar], Axis]:
    """One row of leadership bars per identity, from ``lo`` (seconds since ``lo``), and the
    axis naming the rows."""
    idents = sorted(rows["identity"].unique())
    estimated = rows["end_kind"].isin(INFERRED_ENDS) if "end_kind" in rows else None
    bars = []
    for y, ident in enumerate(idents):
        mine = rows["identity"] == ident
        starts = rows.loc[mine, "start"].clip(lower=lo)
        ends = rows.loc[mine, "end"] if hi is None else rows.loc[mine, "end"].clip(upper=hi)
        guesses = estimated[mine] if estimated is not None else [False] * len(starts)
        for start, end, kind, guess in zip(
            starts, ends, rows.loc[mine, "kind"], guesses, strict=True
        ):
            color = OVERLAP_COLOR if kind == "overlap" else ACTIVE_COLOR
            bars.append(Bar(start - lo, end - lo, y - 0.35, y + 0.35, color, bool(guess)))
    names = Axis(-0.6, len(idents) - 0.4, ticks=[(float(y), i) for y, i in enumerate(idents)])
    return bars, names


def _timeline(report: JournalReport) -> Chart | None:
    tl = report.timeline
    if not len(tl):
        return None
    panels = []
    for name in dict.fromkeys(tl["election"]):
        rows = tl[tl["election"] == name]
        t0 = float(rows["start"].min())
        bars, names = _bars(rows, t0)
        right = max(float(rows["end"].max()) - t0, 1e-3) * 1.02
        estimated = bool(rows["end_kind"].isin(INFERRED_ENDS).any())
        panels.append(
            Panel(
                Axis(0.0, right, "seconds since the first interval", linear_ticks(0.0, right)),
                names,
                title=f"{name}: first {len(rows)} leadership intervals from {local_time(t0)}",
                bars=bars,
                keys=_bar_keys(bool((rows["kind"] == "overlap").any()), estimated),
            )
        )
    return Chart("Who was active", panels, panel_height=150 if len(panels) > 1 else 200)


def _series(frame: Any, *, merge_rest: bool = True) -> list[tuple[str, Any]]:
    """The frame per election: the busiest MAX_SERIES - 1 by name, then the rest as one
    series (or left out, when series of different elections cannot be merged)."""
    groups = sorted(frame.groupby("election"), key=lambda item: -len(item[1]))
    if len(groups) <= MAX_SERIES:
        return [(str(name), group) for name, group in sorted(groups, key=lambda g: str(g[0]))]
    import pandas as pd

    kept = [(str(name), group) for name, group in groups[: MAX_SERIES - 1]]
    if not merge_rest:
        return kept
    rest = pd.concat([group for _, group in groups[MAX_SERIES - 1 :]])
    return [*kept, (f"{len(groups) - MAX_SERIES + 1} other elections", rest)]


def _color(n: int, name: str) -> str:
    return OTHERS_COLOR if name.endswith(" other elections") else PALETTE[n % len(PALETTE)]


def _gaps(report: JournalReport) -> Chart | None:
    import numpy as np

    gaps = report.gaps
    if not len(gaps):
        return None
    values = gaps["gap"].to_numpy(dtype=float)
    smallest, largest = max(float(values.min()), 1e-6), max(float(values.max()), 1e-6)
    log = largest / smallest > LOG_GAPS_ABOVE
    if log:  # from microseconds to seconds: each decade as wide
        bins = np.logspace(np.log10(smallest) - 0.05, np.log10(largest) + 0.05, 50)
        values = np.clip(values, smallest, None)
        x = Axis(float(bins[0]), float(bins[-1]), log=True)
        x.ticks = log_ticks(x.lo, x.hi, seconds_label)
    else:  # a few values, or of one magnitude: a plain axis from 0
        bins = np.linspace(0.0, largest * 1.05, 43)
        x = Axis(0.0, float(bins[-1]), ticks=linear_ticks(0.0, float(bins[-1]), seconds_label))
    x.label = "failover gap: no active until the new active"
    after = gaps["after"].to_numpy()
    stacked = np.zeros(len(bins) - 1)
    bars, keys = [], []
    for kind, (label, color) in GAP_KINDS.items():
        mine = values[after == kind]
        if not len(mine):
            continue
        counts, _ = np.histogram(mine, bins=bins)
        for n in np.flatnonzero(counts):
            top = stacked[n] + counts[n]
            bars.append(Bar(float(bins[n]), float(bins[n + 1]), float(stacked[n]), top, color))
        stacked += counts
        keys.append(Key(f"{label} ({len(mine):,})", color))
    most = float(stacked.max()) * 1.05
    y = Axis(0.0, most, "failovers", linear_ticks(0.0, most, integer=True))
    panel = Panel(x, y, bars=bars, keys=keys, key_title="how the old active's end is known")
    return Chart("Failover gaps, every election", [panel])


def _rates(report: JournalReport) -> Chart | None:
    rates, width = report.rates, report.rate_bucket_s
    if rates["bucket"].nunique() < MIN_RATE_POINTS:
        return None  # a line of one or two points says nothing
    t0 = float(rates["bucket"].min())
    # A few hundred points at most: one per bucket over months is only noise.
    step = max(width, float(rates["bucket"].max() - t0 + width) / 200)
    binned = rates.assign(bin=t0 + ((rates["bucket"] - t0) // step) * step)
    unit, per = ("hours", 3600.0) if width >= 3600 else ("minutes", 60.0)
    lines = []
    for n, (name, group) in enumerate(_series(binned)):
        series = group.groupby("bin")["transitions"].sum() / (step / 3600)
        xs = [float(v) for v in (series.index - t0) / per]
        lines.append(Line(name, xs, [float(v) for v in series], _color(n, name)))
    right = max(max(line.xs) for line in lines)
    top = max(max(line.ys) for line in lines) * 1.05 or 1.0
    panel = Panel(
        Axis(0.0, right, f"{unit} since {local_time(t0)}", linear_ticks(0.0, right)),
        Axis(0.0, top, "transitions per hour", linear_ticks(0.0, top)),
        lines=lines,
        keys=[Key(line.label, line.color, "line") for line in lines],
        key_title="election",
    )
    return Chart("Transitions per hour, per election", [panel])


def _closeups(report: JournalReport) -> Chart | None:
    close = report.closeups
    if not len(close):
        return None
    panels = []
    for shot in dict.fromkeys(close["closeup"]):
        rows = close[close["closeup"] == shot]
        lo, hi = float(rows["lo"].iloc[0]), float(rows["hi"].iloc[0])
        bars, names = _bars(rows, lo, hi)
        first = rows.iloc[0]
        overlap = Bar(first["ov_start"] - lo, first["ov_end"] - lo, names.lo, names.hi,
                      OVERLAP_COLOR, opacity=0.15)  # fmt: skip
        panels.append(
            Panel(
                Axis(0.0, hi - lo, "seconds", linear_ticks(0.0, hi - lo)),
                names,
                title=f"{rows['election'].iloc[0]} from {local_time(lo)}",
                bars=[overlap, *bars],
                keys=_bar_keys(True),
            )
        )
    return Chart("Overlapping leadership up close", panels, panel_height=170)


def _epochs(report: JournalReport) -> Chart | None:
    ep = report.epochs.dropna(subset=["epoch"])  # an elector too old to record one
    if not len(ep) or ep.groupby("election").size().max() < 2:
        return None  # one interval per election: no succession to show
    # The whole run of each election drawn: from its first record, the last epoch held to
    # its last record.
    spans = report.summary.set_index("election")
    shown = spans.loc[ep["election"].unique()]
    t0, t1 = float(shown["first_ts"].min()), float(shown["last_ts"].max())
    hours = t1 - t0 >= 2 * 3600
    unit, per = ("hours", 3600.0) if hours else ("seconds", 1.0)
    lines = []
    for n, (name, group) in enumerate(_series(ep, merge_rest=False)):
        group = group.sort_values("start")
        xs = [*((group["start"] - t0) / per), (float(spans.at[name, "last_ts"]) - t0) / per]
        ys = [*group["epoch"], group["epoch"].iloc[-1]]
        lines.append(
            Line(name, [float(v) for v in xs], [float(v) for v in ys], _color(n, name), True)
        )
    low = min(min(line.ys) for line in lines)
    high = max(max(line.ys) for line in lines)
    pad = max(1.0, (high - low) * 0.05)
    panel = Panel(
        Axis(0.0, (t1 - t0) / per, f"{unit} since {local_time(t0)}",
             linear_ticks(0.0, (t1 - t0) / per)),
        Axis(low - pad, high + pad, "epoch",
             linear_ticks(low - pad, high + pad, integer=True)),
        lines=lines,
        keys=[Key(line.label, line.color, "line") for line in lines],
        key_title="election",
    )  # fmt: skip
    return Chart("Epochs of successive leaders", [panel])
