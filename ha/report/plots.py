"""The report's charts (matplotlib), drawn from a ``JournalReport``'s small pandas frames.

Every chart has a legend and is drawn only when it has something to show: a journal of a
few seconds gets no rate line of one point and no epoch staircase of one step. Times on the
axes are relative (seconds or hours since a start the title gives in local ISO time); counts
and epochs get whole-number ticks. What the report estimated rather than read (an end of a
leadership that no record gives, ``summary.INFERRED_ENDS``) is drawn hatched.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .analysis import JournalReport
from .summary import INFERRED_ENDS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ("figures", "local_time", "seconds_label")

ACTIVE_COLOR = "#1f77b4"
OVERLAP_COLOR = "#d62728"
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


def figures(report: JournalReport) -> list[tuple[str, Figure]]:
    """(caption, figure) for each chart that has data; close them after use."""
    import matplotlib

    matplotlib.use("Agg")  # no display; also safe in worker threads
    drawers: list[Callable[[JournalReport], tuple[str, Figure] | None]] = [
        _timeline, _gaps, _rates, _closeups, _epochs,
    ]  # fmt: skip
    return [drawn for draw in drawers if (drawn := draw(report)) is not None]


def _margins(fig: Any) -> None:
    """Fixed margins for a chart of one axes with numbers on both axes: tight_layout would
    draw the whole figure once more to measure its labels (a third of the time to render)."""
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.15, top=0.95)


def _bar_legend(ax: Any, overlap: bool, estimated: bool = False) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(color=ACTIVE_COLOR, label="active")]
    if estimated:
        handles.append(
            Patch(facecolor="white", edgecolor=ACTIVE_COLOR, hatch="////",
                  label="active, end estimated (no record of leaving)")
        )  # fmt: skip
    if overlap:
        handles.append(Patch(color=OVERLAP_COLOR, label="active while another was (overlap)"))
    ax.legend(handles=handles, fontsize=7, loc="upper right")


def _bars(ax: Any, rows: Any, lo: float, hi: float | None = None) -> None:
    """One row of leadership bars per identity, from ``lo`` (seconds since ``lo``)."""
    idents = sorted(rows["identity"].unique())
    for y, ident in enumerate(idents):
        mine = rows[rows["identity"] == ident]
        starts = mine["start"].clip(lower=lo)
        ends = mine["end"] if hi is None else mine["end"].clip(upper=hi)
        bars = list(zip(starts - lo, ends - starts, strict=True))
        colors = [OVERLAP_COLOR if k == "overlap" else ACTIVE_COLOR for k in mine["kind"]]
        if "end_kind" in mine:
            estimated = list(mine["end_kind"].isin(INFERRED_ENDS))
        else:
            estimated = [False] * len(bars)
        # one collection for the recorded bars, one for the estimated (hatched, not solid)
        for guess in (False, True):
            pick = [n for n, g in enumerate(estimated) if bool(g) == guess]
            if not pick:
                continue
            mine_bars, mine_colors = [bars[n] for n in pick], [colors[n] for n in pick]
            if guess:
                ax.broken_barh(mine_bars, (y - 0.35, 0.7), facecolors="white",
                               edgecolors=mine_colors, hatch="////")  # fmt: skip
            else:
                ax.broken_barh(mine_bars, (y - 0.35, 0.7), facecolors=mine_colors)
    ax.set_yticks(range(len(idents)), idents)


def _timeline(report: JournalReport) -> tuple[str, Figure] | None:
    import matplotlib.pyplot as plt

    tl = report.timeline
    if not len(tl):
        return None
    elections = list(dict.fromkeys(tl["election"]))
    fig, axes = plt.subplots(
        len(elections), 1, figsize=(10, 1.4 + 1.2 * len(elections)), squeeze=False
    )
    for ax, name in zip(axes[:, 0], elections, strict=True):
        rows = tl[tl["election"] == name]
        t0 = float(rows["start"].min())
        _bars(ax, rows, t0)
        ax.set_title(
            f"{name}: first {len(rows)} leadership intervals from {local_time(t0)}", fontsize=9
        )
        ax.set_xlabel("seconds since the first interval", fontsize=8)
        estimated = bool(rows["end_kind"].isin(INFERRED_ENDS).any())
        _bar_legend(ax, bool((rows["kind"] == "overlap").any()), estimated)
    fig.tight_layout()
    return "Who was active", fig


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


def _gaps(report: JournalReport) -> tuple[str, Figure] | None:
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    gaps = report.gaps
    if not len(gaps):
        return None
    fig, ax = plt.subplots(figsize=(10, 3.5))
    values = gaps["gap"].to_numpy(dtype=float)
    smallest, largest = max(float(values.min()), 1e-6), max(float(values.max()), 1e-6)
    log = largest / smallest > LOG_GAPS_ABOVE
    if log:  # from microseconds to seconds: each decade as wide
        bins = np.logspace(np.log10(smallest) - 0.05, np.log10(largest) + 0.05, 50)
        values = np.clip(values, smallest, None)
    else:  # a few values, or of one magnitude: a plain axis from 0
        bins = np.linspace(0.0, largest * 1.05, 43)
    after = gaps["after"].to_numpy()
    stacked, labels, colors = [], [], []
    for kind, (label, color) in GAP_KINDS.items():
        mine = values[after == kind]
        if len(mine):
            stacked.append(mine)
            labels.append(f"{label} ({len(mine):,})")
            colors.append(color)
    ax.hist(stacked, bins=bins.tolist(), stacked=True, label=labels, color=colors)
    if log:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: seconds_label(v)))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("failover gap: no active until the new active")
    ax.set_ylabel("failovers")
    ax.legend(fontsize=7, title="how the old active's end is known", title_fontsize=7)
    _margins(fig)
    return "Failover gaps, every election", fig


def _rates(report: JournalReport) -> tuple[str, Figure] | None:
    import matplotlib.pyplot as plt

    rates, width = report.rates, report.rate_bucket_s
    if rates["bucket"].nunique() < MIN_RATE_POINTS:
        return None  # a line of one or two points says nothing
    t0 = float(rates["bucket"].min())
    # A few hundred points at most: one per bucket over months is only noise.
    step = max(width, float(rates["bucket"].max() - t0 + width) / 200)
    binned = rates.assign(bin=t0 + ((rates["bucket"] - t0) // step) * step)
    unit, per = ("hours", 3600.0) if width >= 3600 else ("minutes", 60.0)
    fig, ax = plt.subplots(figsize=(10, 3.5))
    for name, group in _series(binned):
        series = group.groupby("bin")["transitions"].sum() / (step / 3600)
        ax.plot((series.index - t0) / per, series.to_numpy(), lw=0.9, label=name)
    ax.set_xlabel(f"{unit} since {local_time(t0)}")
    ax.set_ylabel("transitions per hour")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, title="election", title_fontsize=7)
    _margins(fig)
    return "Transitions per hour, per election", fig


def _closeups(report: JournalReport) -> tuple[str, Figure] | None:
    import matplotlib.pyplot as plt

    close = report.closeups
    if not len(close):
        return None
    shots = list(dict.fromkeys(close["closeup"]))
    fig, axes = plt.subplots(len(shots), 1, figsize=(10, 0.8 + 1.4 * len(shots)), squeeze=False)
    for ax, shot in zip(axes[:, 0], shots, strict=True):
        rows = close[close["closeup"] == shot]
        lo, hi = float(rows["lo"].iloc[0]), float(rows["hi"].iloc[0])
        _bars(ax, rows, lo, hi)
        first = rows.iloc[0]
        ax.axvspan(first["ov_start"] - lo, first["ov_end"] - lo, color=OVERLAP_COLOR, alpha=0.15)
        ax.set_xlim(0, hi - lo)
        ax.set_title(f"{rows['election'].iloc[0]} from {local_time(lo)}", fontsize=9)
        _bar_legend(ax, True)
    axes[-1, 0].set_xlabel("seconds")
    fig.tight_layout()
    return "Overlapping leadership up close", fig


def _epochs(report: JournalReport) -> tuple[str, Figure] | None:
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    ep = report.epochs
    if not len(ep) or ep.groupby("election").size().max() < 2:
        return None  # one interval per election: no succession to show
    # The whole run of each election drawn: from its first record, the last epoch held to
    # its last record.
    spans = report.summary.set_index("election")
    shown = spans.loc[ep["election"].unique()]
    t0, t1 = float(shown["first_ts"].min()), float(shown["last_ts"].max())
    hours = t1 - t0 >= 2 * 3600
    unit, per = ("hours", 3600.0) if hours else ("seconds", 1.0)
    fig, ax = plt.subplots(figsize=(10, 3.5))
    for name, group in _series(ep, merge_rest=False):
        group = group.sort_values("start")
        x = [*((group["start"] - t0) / per), (float(spans.at[name, "last_ts"]) - t0) / per]
        y = [*group["epoch"], group["epoch"].iloc[-1]]
        ax.step(x, y, where="post", label=name)
    ax.set_xlim(0, (t1 - t0) / per)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"{unit} since {local_time(t0)}")
    ax.set_ylabel("epoch")
    ax.legend(fontsize=7, title="election", title_fontsize=7)
    _margins(fig)
    return "Epochs of successive leaders", fig
