"""The report's charts (matplotlib), drawn from a ``JournalReport``'s small pandas frames.

Every chart has a legend and is drawn only when it has something to show: a journal of a
few seconds gets no rate line of one point and no epoch staircase of one step. Times on the
axes are relative (seconds or hours since a start the title gives in local ISO time).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .analysis import JournalReport

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ("figures", "local_time")

ACTIVE_COLOR = "#1f77b4"
OVERLAP_COLOR = "#d62728"
MAX_SERIES = 12  # lines with their own legend entry; the rest are drawn as one grey series
MIN_RATE_POINTS = 3


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


def _bar_legend(ax: Any, overlap: bool) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(color=ACTIVE_COLOR, label="active")]
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
        ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=colors)
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
        _bar_legend(ax, bool((rows["kind"] == "overlap").any()))
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

    gaps = report.gaps
    if not len(gaps):
        return None
    fig, ax = plt.subplots(figsize=(10, 3.5))
    positive = gaps["gap"].clip(lower=1e-6)
    bins = np.logspace(np.log10(positive.min()), np.log10(positive.max()) + 1e-3, 60).tolist()
    for name, group in _series(gaps):
        ax.hist(group["gap"].clip(lower=1e-6), bins=bins, histtype="step", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("failover gap (s): no active until the new active")
    ax.set_ylabel("failovers")
    ax.legend(fontsize=7, title="election", title_fontsize=7)
    return "Failover gaps (a crash's counts from a session timeout before the takeover)", fig


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

    ep = report.epochs
    if not len(ep) or ep.groupby("election").size().max() < 2:
        return None  # one interval per election: no succession to show
    t0 = float(ep["start"].min())
    hours = float(ep["start"].max() - t0) >= 2 * 3600
    unit, per = ("hours", 3600.0) if hours else ("seconds", 1.0)
    fig, ax = plt.subplots(figsize=(10, 3.5))
    for name, group in _series(ep, merge_rest=False):
        group = group.sort_values("start")
        ax.step((group["start"] - t0) / per, group["epoch"], where="post", label=name)
    ax.set_xlabel(f"{unit} since {local_time(t0)}")
    ax.set_ylabel("epoch")
    ax.legend(fontsize=7, title="election", title_fontsize=7)
    return "Epochs of successive leaders", fig
