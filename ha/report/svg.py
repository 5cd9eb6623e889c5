"""Charts written as SVG text: a few panels of bars, lines and a legend each.

The report's charts are bars on a time axis, a stacked histogram and step lines: a plotting
library costs more to import and to draw them (a second of CPU for five charts) than the
analysis of a day's journal. A ``Chart`` holds what it shows (axes with their ticks, bars,
lines, legend entries: what tests look at) and ``svg()`` writes it out.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = (
    "PALETTE",
    "Axis",
    "Bar",
    "Chart",
    "Key",
    "Line",
    "Panel",
    "linear_ticks",
    "log_ticks",
    "number_label",
)

# matplotlib's default colors ("tab10"): the series of one chart tell apart
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
WIDTH = 1000
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
CHAR = 0.6  # a character's width, in font sizes: enough to size boxes without measuring
KEY_SIZE, KEY_ROW = 10, 16  # the legend's font size and row height


def number_label(value: float) -> str:
    """A tick's number: whole numbers without a point, others as short as they go."""
    if value == int(value):
        return f"{int(value)}"
    return f"{value:.6g}"


def linear_ticks(
    lo: float,
    hi: float,
    label: Callable[[float], str] = number_label,
    *,
    integer: bool = False,
    most: int = 8,
) -> list[tuple[float, str]]:
    """Ticks at round steps (1, 2, 2.5 or 5 times a power of ten; whole steps when
    ``integer``), at most ``most`` of them, within [lo, hi]."""
    span = hi - lo if hi > lo else 1.0
    raw = span / max(1, most - 1)
    power = 10 ** math.floor(math.log10(raw))
    steps = (1, 2, 5, 10) if integer else (1, 2, 2.5, 5, 10)
    step = next(m * power for m in steps if m * power >= raw)
    if integer:
        step = max(1.0, float(round(step)))
    first = math.ceil(lo / step - 1e-9)
    ticks = []
    for n in range(first, first + most + 2):
        value = n * step
        if value > hi + step * 1e-9:
            break
        value = round(value, 12) + 0.0  # no -0 nor 0.30000000000000004
        ticks.append((value, label(value)))
    return ticks


def log_ticks(lo: float, hi: float, label: Callable[[float], str]) -> list[tuple[float, str]]:
    """A tick at each power of ten within [lo, hi]."""
    first, last = math.ceil(math.log10(lo) - 1e-9), math.floor(math.log10(hi) + 1e-9)
    return [(10.0**k, label(10.0**k)) for k in range(first, last + 1)]


@dataclass
class Axis:
    lo: float
    hi: float
    label: str = ""
    ticks: list[tuple[float, str]] = field(default_factory=list)
    log: bool = False

    def labels(self) -> list[str]:
        return [text for _, text in self.ticks]

    def fraction(self, value: float) -> float:
        """Where ``value`` lies from lo (0) to hi (1)."""
        if self.log:
            lo, hi = math.log10(self.lo), math.log10(self.hi)
            value = math.log10(max(value, self.lo * 1e-3))
        else:
            lo, hi = self.lo, self.hi
        return (value - lo) / (hi - lo) if hi > lo else 0.5


@dataclass
class Bar:
    """A rectangle in data coordinates; ``hatched``: an outline with stripes, no fill."""

    x0: float
    x1: float
    y0: float
    y1: float
    color: str
    hatched: bool = False
    opacity: float = 1.0


@dataclass
class Line:
    label: str
    xs: list[float]
    ys: list[float]
    color: str
    step: bool = False  # each value held until the next x


@dataclass
class Key:
    """A legend entry: a solid patch, a hatched patch or a line of ``color``."""

    label: str
    color: str
    mark: str = "patch"  # "hatch", "line"


@dataclass
class Panel:
    x: Axis
    y: Axis
    title: str = ""
    bars: list[Bar] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    keys: list[Key] = field(default_factory=list)
    key_title: str = ""

    def has_data(self) -> bool:
        return bool(self.bars or self.lines)


@dataclass
class Chart:
    caption: str
    panels: list[Panel]
    panel_height: int = 300

    def svg(self) -> str:
        """The chart as a standalone SVG document."""
        left = 12 + max(_ticks_width(p.y) for p in self.panels) + 18
        rows = [_legend_rows(p.keys, p.key_title, WIDTH - left) for p in self.panels]
        heights = [self.panel_height + KEY_ROW * len(r) for r in rows]
        height = sum(heights)
        out = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}"'
            f' viewBox="0 0 {WIDTH} {height}" font-family="{FONT}" font-size="11">',
            f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        ]
        hatches: dict[str, str] = {}
        top = 0
        for n, (panel, keys) in enumerate(zip(self.panels, rows, strict=True)):
            bottom = top + self.panel_height - 42
            out.extend(_panel(panel, (left, top + 26, WIDTH - 16, bottom), n, hatches))
            out.extend(_legend(keys, left, bottom + 40, hatches))
            top += heights[n]
        patterns = [
            f'<pattern id="{pid}" width="7" height="7" patternUnits="userSpaceOnUse"'
            f' patternTransform="rotate(45)"><rect width="7" height="7" fill="white"/>'
            f'<line x1="0" y1="0" x2="0" y2="7" stroke="{color}" stroke-width="2"/></pattern>'
            for color, pid in hatches.items()
        ]
        out.insert(2, "<defs>" + "".join(patterns) + "</defs>")
        out.append("</svg>")
        return "\n".join(out)


def _text(x: float, y: float, text: str, anchor: str = "start", extra: str = "") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>{html.escape(text)}</text>'


def _ticks_width(axis: Axis) -> float:
    return max((len(text) for text in axis.labels()), default=1) * 11 * CHAR


def _hatch(color: str, hatches: dict[str, str]) -> str:
    return hatches.setdefault(color, f"hatch{len(hatches)}")


def _panel(
    p: Panel, box: tuple[float, float, float, float], n: int, hatches: dict[str, str]
) -> list[str]:
    x0, y0, x1, y1 = box

    def sx(value: float) -> float:
        return x0 + p.x.fraction(value) * (x1 - x0)

    def sy(value: float) -> float:
        return y1 - p.y.fraction(value) * (y1 - y0)

    out = [f'<clipPath id="clip{n}"><rect x="{x0}" y="{y0}" width="{x1 - x0}"'
           f' height="{y1 - y0}"/></clipPath>']  # fmt: skip
    if p.title:
        out.append(_text((x0 + x1) / 2, y0 - 8, p.title, "middle", ' font-size="12"'))
    # grid and ticks
    for value, text in p.x.ticks:
        x = sx(value)
        out.append(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y1}" stroke="#eee"/>')
        out.append(f'<line x1="{x:.1f}" y1="{y1}" x2="{x:.1f}" y2="{y1 + 4}" stroke="#333"/>')
        out.append(_text(x, y1 + 15, text, "middle"))
    for value, text in p.y.ticks:
        y = sy(value)
        out.append(f'<line x1="{x0 - 4}" y1="{y:.1f}" x2="{x0}" y2="{y:.1f}" stroke="#333"/>')
        out.append(_text(x0 - 7, y + 4, text, "end"))
    if p.x.label:
        out.append(_text((x0 + x1) / 2, y1 + 31, p.x.label, "middle"))
    if p.y.label:
        cy = (y0 + y1) / 2
        out.append(_text(14, cy, p.y.label, "middle", f' transform="rotate(-90 14 {cy:.1f})"'))
    # the data, clipped to the plot area
    out.append(f'<g clip-path="url(#clip{n})">')
    for bar in p.bars:
        left, right = sorted((sx(bar.x0), sx(bar.x1)))
        top, bottom = sorted((sy(bar.y1), sy(bar.y0)))
        shape = (
            f'x="{left:.1f}" y="{top:.1f}" width="{max(right - left, 0.6):.1f}"'
            f' height="{bottom - top:.1f}"'
        )
        if bar.hatched:
            paint = f'fill="url(#{_hatch(bar.color, hatches)})" stroke="{bar.color}"'
        else:
            paint = f'fill="{bar.color}"'
        if bar.opacity < 1:
            paint += f' fill-opacity="{bar.opacity}"'
        out.append(f"<rect {shape} {paint}/>")
    for line in p.lines:
        points = []
        for k, (x, y) in enumerate(zip(line.xs, line.ys, strict=True)):
            if line.step and k:
                points.append(f"{sx(x):.1f},{sy(line.ys[k - 1]):.1f}")
            points.append(f"{sx(x):.1f},{sy(y):.1f}")
        out.append(
            f'<polyline points="{" ".join(points)}" fill="none" stroke="{line.color}"'
            ' stroke-width="1.3" stroke-linejoin="round"/>'
        )
        if len(points) == 1:  # a line of one point: a dot, or nothing would show
            dot_x, dot_y = points[0].split(",")
            out.append(f'<circle cx="{dot_x}" cy="{dot_y}" r="2.5" fill="{line.color}"/>')
    out.append("</g>")
    out.append(
        f'<rect x="{x0}" y="{y0}" width="{x1 - x0}" height="{y1 - y0}" fill="none" stroke="#333"/>'
    )
    return out


def _legend_rows(keys: Sequence[Key], title: str, width: float) -> list[list[Key | str]]:
    """The legend's entries in rows under the plot, its title first, wrapped at ``width``."""
    rows: list[list[Key | str]] = []
    used = width
    for item in ([f"{title}:"] if title and keys else []) + list(keys):
        wide = _key_width(item)
        if used + wide > width:
            rows.append([])
            used = 0.0
        rows[-1].append(item)
        used += wide
    return rows


def _key_width(item: Key | str) -> float:
    if isinstance(item, str):
        return len(item) * KEY_SIZE * CHAR + 10
    return len(item.label) * KEY_SIZE * CHAR + 42


def _legend(
    rows: Sequence[Sequence[Key | str]], left: float, top: float, hatches: dict[str, str]
) -> list[str]:
    """The legend in rows from (left, top): a swatch (patch, hatched patch, line) and a
    label for each entry."""
    out = [f'<g font-size="{KEY_SIZE}">']
    for n, row in enumerate(rows):
        x, mid = left, top + n * KEY_ROW + KEY_ROW / 2
        for item in row:
            if isinstance(item, str):
                out.append(_text(x, mid + 3.5, item, extra=' font-style="italic"'))
                x += _key_width(item)
                continue
            if item.mark == "line":
                out.append(
                    f'<line x1="{x:.1f}" y1="{mid:.1f}" x2="{x + 18:.1f}" y2="{mid:.1f}"'
                    f' stroke="{item.color}" stroke-width="2"/>'
                )
            else:
                fill = (
                    f"url(#{_hatch(item.color, hatches)})" if item.mark == "hatch" else item.color
                )
                out.append(
                    f'<rect x="{x:.1f}" y="{mid - 5:.1f}" width="18" height="10"'
                    f' fill="{fill}" stroke="{item.color}"/>'
                )
            out.append(_text(x + 24, mid + 3.5, item.label))
            x += _key_width(item)
    out.append("</g>")
    return out
