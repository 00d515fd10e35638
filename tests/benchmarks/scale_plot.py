"""Figures against a count drawn as one SVG of small panels, a line per system.

The venv has no matplotlib (and a benchmark should not pull it in for one picture), so
the SVG is written by hand: a panel per figure, linear axes from 0, the points marked
and labelled with their values so the picture can be read without the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

__all__ = ["Series", "write_svg"]

PANEL_W, PANEL_H, COLUMNS = 300, 200, 3
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 50, 20, 30, 35
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


@dataclass(frozen=True)
class Series:
    """One figure: its value at each count, by system (None: not measured)."""

    title: str
    counts: Sequence[int]
    values: dict[str, Sequence[float | None]]


def _label(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _panel(series: Series, left: float, top: float) -> list[str]:
    plot_w = PANEL_W - MARGIN_L - MARGIN_R
    plot_h = PANEL_H - MARGIN_T - MARGIN_B
    x0, y0 = left + MARGIN_L, top + MARGIN_T + plot_h
    known = [v for values in series.values.values() for v in values if v is not None]
    y_max = max(known, default=1.0) * 1.1 or 1.0
    x_max = max(series.counts) or 1

    def x(count: int) -> float:
        return x0 + plot_w * count / x_max

    def y(value: float) -> float:
        return y0 - plot_h * value / y_max

    parts = [
        f'<text x="{left + PANEL_W / 2}" y="{top + 18}" text-anchor="middle" '
        f'font-weight="bold">{escape(series.title)}</text>',
        f'<line x1="{x0}" y1="{y0}" x2="{x0 + plot_w}" y2="{y0}" stroke="#000"/>',
        f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y0 - plot_h}" stroke="#000"/>',
        f'<text x="{x0 - 4}" y="{y0 - plot_h + 4}" text-anchor="end">{_label(y_max)}</text>',
        f'<text x="{x0 - 4}" y="{y0 + 4}" text-anchor="end">0</text>',
    ]
    parts += [
        f'<text x="{x(c)}" y="{y0 + 14}" text-anchor="middle">{c:,}</text>' for c in series.counts
    ]
    for colour, values in zip(COLOURS, series.values.values(), strict=False):
        points = [(x(c), y(v)) for c, v in zip(series.counts, values, strict=True) if v is not None]
        if len(points) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}"/>')
        for (px, py), value in zip(points, (v for v in values if v is not None), strict=True):
            parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}"/>')
            parts.append(
                f'<text x="{px + 4:.1f}" y="{py - 4:.1f}" fill="{colour}">{_label(value)}</text>'
            )
    return parts


def write_svg(path: Path, x_title: str, figures: Sequence[Series]) -> None:
    """``figures`` as panels of ``COLUMNS`` per row, a legend and ``x_title`` below."""
    rows = -(-len(figures) // COLUMNS)
    width, height = PANEL_W * COLUMNS, PANEL_H * rows + 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="#fff"/>',
    ]
    for index, series in enumerate(figures):
        row, column = divmod(index, COLUMNS)
        parts += _panel(series, column * PANEL_W, row * PANEL_H)
    systems = list(figures[0].values) if figures else []
    legend_y = height - 15
    for index, (colour, system) in enumerate(zip(COLOURS, systems, strict=False)):
        parts.append(
            f'<rect x="{20 + 110 * index}" y="{legend_y - 9}" width="10" height="10" '
            f'fill="{colour}"/><text x="{34 + 110 * index}" y="{legend_y}">{escape(system)}</text>'
        )
    parts.append(
        f'<text x="{width - 20}" y="{legend_y}" text-anchor="end">x: {escape(x_title)}</text>'
    )
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")
