"""The report's presentation: the per-election summary table (rich), the plots and the HTML page.

Everything here works on a ``JournalReport`` (small pandas frames), never on Spark.
"""

from __future__ import annotations

import base64
import html
import io
from typing import TYPE_CHECKING, Any

from .analysis import JournalReport

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ("render_html", "summary_table")

TERMINAL_SKIP = ("span", "intervals", "unclosed")  # in the HTML only: keep the table narrow


def _fmt_s(value: Any) -> str:
    if value is None or value != value:  # None or NaN
        return "-"
    v = float(value)
    if v < 1:
        return f"{v * 1000:.1f} ms"
    if v < 120:
        return f"{v:.2f} s"
    if v < 7200:
        return f"{v / 60:.1f} min"
    return f"{v / 3600:.1f} h"


def _fmt_int(value: Any) -> str:
    if value is None or value != value:
        return "-"
    return f"{int(value):,}"


def _summary_rows(report: JournalReport) -> list[dict[str, str]]:
    rows = []
    for r in report.summary.to_dict("records"):
        avail = r.get("availability")
        rows.append(
            {
                "election": str(r["election"]),
                "events": _fmt_int(r["events"]),
                "span": _fmt_s(r["span_s"]),
                "intervals": _fmt_int(r["intervals"]),
                "failovers": _fmt_int(r["failovers"]),
                "unclosed": _fmt_int(r["unclosed"]),
                "gap p50": _fmt_s(r["gap_p50"]),
                "gap p90": _fmt_s(r["gap_p90"]),
                "gap max": _fmt_s(r["gap_max"]),
                "overlaps": _fmt_int(r["overlaps"]),
                "availability": "-" if avail != avail or avail is None else f"{avail:.4%}",
                "transitions/h": "-"
                if r["transitions_per_hour"] != r["transitions_per_hour"]
                else f"{r['transitions_per_hour']:.1f}",
                "epochs": f"{_fmt_int(r['first_epoch'])}..{_fmt_int(r['last_epoch'])}",
                "epoch errors": _fmt_int(r["epoch_violations"]),
            }
        )
    return rows


def summary_table(report: JournalReport) -> Table:
    """The per-election summary as a rich table (print it with ``rich.print``)."""
    from rich.table import Table

    bad = report.overlap_count > 0
    table = Table(
        title=f"Election journal: {report.events:,} events, {report.malformed:,} malformed, "
        f"{report.overlap_count:,} overlaps",
        title_style="bold red" if bad else "bold",
    )
    rows = [{k: v for k, v in r.items() if k not in TERMINAL_SKIP} for r in _summary_rows(report)]
    columns = list(rows[0]) if rows else ["election"]
    for name in columns:
        table.add_column(name, justify="left" if name == "election" else "right")
    for row in rows:
        style = "red" if row.get("overlaps") not in ("0", "-") else None
        table.add_row(*row.values(), style=style)
    return table


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _plots(report: JournalReport) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")  # no display; also safe in worker threads
    import matplotlib.pyplot as plt
    import numpy as np

    out: list[tuple[str, str]] = []

    tl = report.timeline
    if len(tl):
        elections = list(dict.fromkeys(tl["election"]))
        fig, axes = plt.subplots(
            len(elections), 1, figsize=(10, 1.2 + 1.1 * len(elections)), squeeze=False
        )
        for ax, name in zip(axes[:, 0], elections, strict=True):
            rows = tl[tl["election"] == name]
            idents = sorted(rows["identity"].unique())
            t0 = rows["start"].min()
            for y, ident in enumerate(idents):
                mine = rows[rows["identity"] == ident]
                bars = list(zip(mine["start"] - t0, mine["end"] - mine["start"], strict=True))
                colors = ["#d62728" if k == "overlap" else "#1f77b4" for k in mine["kind"]]
                ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=colors)
            ax.set_yticks(range(len(idents)), idents)
            ax.set_title(f"{name}: first {len(rows)} leadership intervals", fontsize=9)
            ax.set_xlabel("seconds since first interval", fontsize=8)
        fig.tight_layout()
        out.append(("Who was active (red: overlapping leadership)", _png(fig)))

    gaps = report.gaps
    if len(gaps):
        fig, ax = plt.subplots(figsize=(10, 3.5))
        positive = gaps["gap"].clip(lower=1e-6)
        bins = np.logspace(np.log10(positive.min()), np.log10(positive.max()) + 1e-9, 60).tolist()
        for name, group in gaps.groupby("election"):
            ax.hist(group["gap"].clip(lower=1e-6), bins=bins, histtype="step", label=str(name))
        ax.set_xscale("log")
        ax.set_xlabel("failover gap (s, no active to new active)")
        ax.set_ylabel("failovers")
        if gaps["election"].nunique() <= 12:
            ax.legend(fontsize=7)
        out.append(("Failover gaps", _png(fig)))

    hourly = report.hourly
    if len(hourly):
        # Hundreds of bins at most: one line per hour over months is only noise.
        t0 = hourly["hour"].min()
        width = max(3600.0, float(hourly["hour"].max() - t0 + 3600) / 200)
        binned = hourly.assign(bin=((hourly["hour"] - t0) // width) * width)
        rates = binned.groupby(["election", "bin"])["transitions"].sum() / (width / 3600)
        fig, ax = plt.subplots(figsize=(10, 3.5))
        for name, series in rates.groupby(level="election"):
            x = series.index.get_level_values("bin") / 3600
            ax.plot(x, series.to_numpy(), lw=0.9, label=str(name))
        ax.set_xlabel("hours since the first record")
        ax.set_ylabel("transitions per hour")
        ax.set_ylim(bottom=0)
        if hourly["election"].nunique() <= 12:
            ax.legend(fontsize=7)
        out.append(("Transitions per hour, per election", _png(fig)))

    close = report.closeups
    if len(close):
        shots = list(dict.fromkeys(close["closeup"]))
        fig, axes = plt.subplots(len(shots), 1, figsize=(10, 0.6 + 1.3 * len(shots)), squeeze=False)
        for ax, shot in zip(axes[:, 0], shots, strict=True):
            rows = close[close["closeup"] == shot]
            lo, hi = float(rows["lo"].iloc[0]), float(rows["hi"].iloc[0])
            idents = sorted(rows["identity"].unique())
            for y, ident in enumerate(idents):
                mine = rows[rows["identity"] == ident]
                starts = mine["start"].clip(lower=lo) - lo
                ends = mine["end"].clip(upper=hi) - lo
                bars = list(zip(starts, ends - starts, strict=True))
                colors = ["#d62728" if k == "overlap" else "#1f77b4" for k in mine["kind"]]
                ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=colors)
            first = rows.iloc[0]
            ax.axvspan(first["ov_start"] - lo, first["ov_end"] - lo, color="#d62728", alpha=0.15)
            ax.set_xlim(0, hi - lo)
            ax.set_yticks(range(len(idents)), idents)
            ax.set_title(f"{rows['election'].iloc[0]} from unix {lo:.3f}", fontsize=9)
        axes[-1, 0].set_xlabel("seconds")
        fig.tight_layout()
        out.append(("Overlapping leadership up close (red: the later interval)", _png(fig)))

    ep = report.epochs
    if len(ep):
        fig, ax = plt.subplots(figsize=(10, 3.5))
        for _name, group in ep.groupby("election"):
            ax.step((group["start"] - ep["start"].min()) / 3600, group["epoch"], where="post")
        ax.set_xlabel("hours since the first interval")
        ax.set_ylabel("epoch")
        out.append(("Epochs of successive leaders", _png(fig)))
    return out


def _html_table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return "<p>none</p>"
    head = "".join(f"<th>{html.escape(k)}</th>" for k in rows[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row.values()) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(report: JournalReport, title: str = "Election journal report") -> str:
    """A self-contained HTML page (plots embedded as base64 PNG)."""
    overlap_rows = [
        {
            "election": str(r["election"]),
            "first": str(r["first"]),
            "second": str(r["second"]),
            "epochs": f"{_fmt_int(r['first_epoch'])} / {_fmt_int(r['second_epoch'])}",
            "from (unix s)": f"{r['start']:.6f}",
            "to (unix s)": f"{r['end']:.6f}",
            "overlap": _fmt_s(r["overlap"]),
        }
        for r in report.overlaps.to_dict("records")
    ]
    if report.overlap_count:
        verdict = (
            f'<p class="bad">{report.overlap_count:,} overlapping leadership interval(s): '
            "two identities were active at the same time.</p>"
        )
    else:
        verdict = '<p class="good">No overlapping leadership.</p>'
    shown = (
        f" (first {len(overlap_rows):,} shown)" if report.overlap_count > len(overlap_rows) else ""
    )
    figures = "".join(
        f'<h2>{html.escape(caption)}</h2><img alt="{html.escape(caption)}" '
        f'src="data:image/png;base64,{data}">'
        for caption, data in _plots(report)
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; font-size: 0.85em; margin: 1em 0; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
th {{ background: #f3f3f3; }} td:first-child {{ text-align: left; }}
.bad {{ color: #b00; font-weight: bold; }} .good {{ color: #070; }}
img {{ max-width: 100%; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>{report.events:,} transitions, {report.malformed:,} malformed records,
analyzed in {report.seconds:.1f} s ({report.events_per_second:,.0f} events/s).</p>
{verdict}
<h2>Per election</h2>
{_html_table(_summary_rows(report))}
<h2>Overlapping leadership{shown}</h2>
{_html_table(overlap_rows)}
{figures}
</body></html>
"""
