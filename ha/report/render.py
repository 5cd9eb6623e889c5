"""The report's presentation: the per-election summary table (rich) and the HTML page.

Everything here works on a ``JournalReport`` (small pandas frames), never on Spark. The
terminal table keeps to 80 columns (its less telling columns are in the HTML only); times
are shown as ISO local time, never as unix seconds.
"""

from __future__ import annotations

import base64
import html
from typing import TYPE_CHECKING, Any

from .analysis import JournalReport
from .plots import charts, local_time

if TYPE_CHECKING:
    from rich.table import Table

    from .svg import Chart

__all__ = ("render_html", "summary_table")

# What fits 80 columns (the title gives the number of events); the HTML has every column.
TERMINAL_COLUMNS = (
    "election", "failovers", "crashes", "gap p50", "gap max", "overlaps", "available",
)  # fmt: skip
ELECTION_WIDTH = 18  # longer names wrap in the terminal table


def _missing(value: Any) -> bool:
    return value is None or value != value  # None or NaN


def _fmt_s(value: Any) -> str:
    if _missing(value):
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
    return "-" if _missing(value) else f"{int(value):,}"


def _summary_rows(report: JournalReport) -> list[dict[str, str]]:
    rows = []
    for r in report.summary.to_dict("records"):
        avail, rate = r.get("availability"), r["transitions_per_hour"]
        rows.append(
            {
                "election": str(r["election"]),
                "events": _fmt_int(r["events"]),
                "from": "-" if _missing(r["first_ts"]) else local_time(r["first_ts"]),
                "to": "-" if _missing(r["last_ts"]) else local_time(r["last_ts"]),
                "span": _fmt_s(r["span_s"]),
                "intervals": _fmt_int(r["intervals"]),
                "failovers": _fmt_int(r["failovers"]),
                "crashes": _fmt_int(r["crashes"]),
                "gap p50": _fmt_s(r["gap_p50"]),
                "gap p90": _fmt_s(r["gap_p90"]),
                "gap max": _fmt_s(r["gap_max"]),
                "overlaps": _fmt_int(r["overlaps"]),
                "available": "-" if _missing(avail) else f"{avail:.3%}",
                "transitions/h": "-" if _missing(rate) else f"{rate:.1f}",
                "epochs": f"{_fmt_int(r['first_epoch'])}..{_fmt_int(r['last_epoch'])}",
                "epoch errors": _fmt_int(r["epoch_violations"]),
            }
        )
    return rows


def _total(report: JournalReport, column: str) -> int:
    summary = report.summary
    return int(summary[column].fillna(0).sum()) if len(summary) else 0


def _assumption(report: JournalReport) -> str | None:
    """What the report estimated rather than read, or None when every end is on record."""
    dated, assumed = _total(report, "dated_ends"), _total(report, "assumed_ends")
    restarted = _total(report, "unclosed") - dated - assumed
    said = []
    if dated:
        said.append(
            f"{dated:,} end(s) of killed actives dated from the new active's record (when it"
            " found the lock free, less the time the backend takes to see a process die)"
        )
    if assumed:
        said.append(
            f"{assumed:,} end(s) of killed actives assumed a session timeout before the next"
            f" active took over ({report.session_timeout:g} s, --session-timeout, where the"
            " journal gives none): their journals do not say"
        )
    if restarted:
        said.append(f"{restarted:,} end(s) taken as the restarted process's first record")
    if not said:
        return None
    return "Estimated, not recorded: " + "; ".join(said) + "."


def summary_table(report: JournalReport) -> Table:
    """The per-election summary as a rich table, at most 80 columns wide."""
    from rich import box
    from rich.table import Table

    summary = report.summary
    span = ""
    if len(summary):
        span = (
            f"\n{local_time(summary['first_ts'].min())} to {local_time(summary['last_ts'].max())}"
        )
    table = Table(
        title=f"Election journal: {report.events:,} events, {report.malformed:,} malformed, "
        f"{report.overlap_count:,} overlaps{span}",
        title_style="bold red" if report.overlap_count else "bold",
        caption=_assumption(report),
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),  # with the box's blank divider: two spaces between columns
    )
    for name in TERMINAL_COLUMNS:
        if name == "election":
            table.add_column(name, max_width=ELECTION_WIDTH, overflow="fold")
        else:
            table.add_column(name, justify="right")
    for row in _summary_rows(report):
        style = "red" if row["overlaps"] not in ("0", "-") else None
        table.add_row(*(row[name] for name in TERMINAL_COLUMNS), style=style)
    return table


def _svg_uri(chart: Chart) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(chart.svg().encode()).decode()


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
    """A self-contained HTML page (charts embedded as SVG images)."""
    overlap_rows = [
        {
            "election": str(r["election"]),
            "first": str(r["first"]),
            "second": str(r["second"]),
            "epochs": f"{_fmt_int(r['first_epoch'])} / {_fmt_int(r['second_epoch'])}",
            "from": local_time(r["start"]),
            "to": local_time(r["end"]),
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
    drawn = "".join(
        f'<h2>{html.escape(chart.caption)}</h2><img alt="{html.escape(chart.caption)}" '
        f'src="{_svg_uri(chart)}">'
        for chart in charts(report)
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
analyzed in {report.seconds:.1f} s ({report.engine} engine).</p>
{verdict}
<h2>Per election</h2>
{_html_table(_summary_rows(report))}
<p>{html.escape(_assumption(report) or "Every leadership end is on record.")} A failover's
gap is the time with no active; availability is the share of the observed span with an active.
Bars drawn hatched end at an estimate, not a record.</p>
<h2>Overlapping leadership{shown}</h2>
{_html_table(overlap_rows)}
{drawn}
</body></html>
"""
