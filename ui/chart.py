"""The race chart, tokens over each lane's own clock, as inline SVG: drawn on the server in one
piece, with round tick values spaced so that their labels never touch, on a wide screen or a
phone."""

from __future__ import annotations

import html
import math

from ouroboros_core.race import Lane

# Two drawings of the same chart, the page shows one: a wide one, and a narrow one for phones, so
# that its text keeps its size instead of shrinking with the screen (an SVG scales its text with its
# width).
SIZES = {"wide": (860, 250, 5), "narrow": (380, 240, 4)}  # width, height, most ticks per axis
LEFT, RIGHT, TOP, BOTTOM = 46, 16, 28, 36  # room for the axis labels and the legend
COLOURS = {"vanilla": "#7f8c8d", "ouroboros": "#e8710a", "speculative": "#1a73e8"}
NAMES = {"vanilla": "Vanilla", "ouroboros": "Ouroboros", "speculative": "Speculative"}


def nice_ticks(high: float, most: int = 5, whole: bool = False) -> list[float]:
    """Round values from 0 up to at least `high`, at most `most` + 1 of them, evenly spaced (1, 2,
    2.5, 5 x 10^k; whole: whole numbers only, so steps of 1, 2, 5 x 10^k and never below 1)."""
    if high <= 0:
        return [0.0, 1.0]
    raw = high / most
    power = 10 ** math.floor(math.log10(raw))
    multiples = (1, 2, 5, 10) if whole else (1, 2, 2.5, 5, 10)
    step = next(m * power for m in multiples if m * power >= raw)
    step = max(step, 1) if whole else step
    count = math.ceil(high / step - 1e-9)
    return [round(i * step, 10) for i in range(count + 1)]


def label(value: float) -> str:
    return f"{value:g}"


def chart_svg(lanes: dict[str, Lane]) -> str:
    """Each lane's (seconds, tokens) trace as a line; an empty frame with axes when no race has run
    yet."""
    return f'<div class="chart-box">{"".join(drawing(lanes, kind) for kind in SIZES)}</div>'


def legend_items(methods: list[str], right: float) -> list[str]:
    """Each lane's colour and name above the plot, right-aligned at `right`, in the lanes' order."""
    items = []
    legend_x = right
    for method in reversed(methods):
        name = NAMES.get(method, method)
        legend_x -= 14 + 8 * len(name)
        items.append(
            f'<g class="legend-item"><rect x="{legend_x}" y="{TOP - 20}" width="10" height="10" '
            f'fill="{COLOURS.get(method, "#333")}"/><text x="{legend_x + 14}" y="{TOP - 11}">'
            f"{html.escape(name)}</text></g>"
        )
    return items


def drawing(lanes: dict[str, Lane], kind: str) -> str:
    width, height, most = SIZES[kind]
    traces = {method: lane.trace for method, lane in lanes.items()}
    x_ticks = nice_ticks(max((t for trace in traces.values() for t, _ in trace), default=0.0), most)
    y_ticks = nice_ticks(
        max((n for trace in traces.values() for _, n in trace), default=0), most, whole=True
    )
    x_high, y_high = x_ticks[-1], y_ticks[-1]
    plot_w, plot_h = width - LEFT - RIGHT, height - TOP - BOTTOM

    def x(value):
        return LEFT + plot_w * value / x_high

    def y(value):
        return TOP + plot_h * (1 - value / y_high)

    parts = [
        f'<svg class="race-chart {kind}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="Tokens over each lane\'s own clock">'
    ]
    for tick in x_ticks:
        parts.append(
            f'<line class="grid" x1="{x(tick):.1f}" x2="{x(tick):.1f}" '
            f'y1="{TOP}" y2="{TOP + plot_h}"/>'
            f'<text class="tick x" x="{x(tick):.1f}" y="{TOP + plot_h + 16}">{label(tick)}</text>'
        )
    for tick in y_ticks:
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{LEFT + plot_w}" '
            f'y1="{y(tick):.1f}" y2="{y(tick):.1f}"/>'
            f'<text class="tick y" x="{LEFT - 6}" y="{y(tick) + 4:.1f}">{label(tick)}</text>'
        )
    parts.append(
        f'<text class="axis" x="{LEFT + plot_w / 2}" y="{height - 4}">'
        "seconds (each lane's own clock)"
        f'</text><text class="axis-y" x="4" y="{TOP - 12}">tokens</text>'
    )
    parts.extend(legend_items(list(traces), LEFT + plot_w))
    for method, trace in traces.items():
        points = " ".join(f"{x(t):.1f},{y(n):.1f}" for t, n in trace)
        parts.append(
            f'<polyline class="trace" data-lane="{method}" points="{points}" '
            f'stroke="{COLOURS.get(method, "#333")}"/>'
        )
    parts.append("</svg>")
    return "".join(parts)
