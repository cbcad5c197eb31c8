"""The page's frames: a race's lanes as the values of the page's outputs, and a stream of lanes thinned to what a
browser can draw."""

from __future__ import annotations

import time
from collections.abc import Iterator

import gradio as gr

from ouroboros_core.race import Lane
from ui.chart import chart_svg
from ui.render import badge_html, lane_parts, summary_html

TEXT_EVERY_S = 0.06  # streamed text ~16 times a second
CHART_EVERY_S = 0.5  # the chart ~2 times a second: a slow browser keeps up


def render(lanes: dict[str, Lane], colour: bool, chart: bool = True, final: dict | None = None, context: str = ""):
    """The outputs' new values; chart=False leaves the chart as it is (it is the costly one to redraw).
    final: once the race is over, its verdicts, the step costs measured before it, its sampling line and
    whether it met a busy machine ("busy": the CPU share its steps got, or None)."""
    final = final or {}
    out = [part for method in ("vanilla", "ouroboros", "speculative")
           for part in lane_parts(lanes, method, colour, context)]
    summary = summary_html(lanes, final["costs"], final.get("busy")) if final else ""
    return out + [chart_svg(lanes) if chart else gr.skip(),
                  badge_html(lanes, final.get("verdicts")) + final.get("sampling", ""), summary]


def streamed(updates: Iterator[dict[str, Lane]], colour: bool, extra: list, context: str = "") -> Iterator[list]:
    """Render a stream of lanes ~16 times a second and the chart ~2 times (a slow browser keeps up), each
    frame followed by `extra`."""
    last_text = last_chart = 0.0
    for lanes in updates:
        now = time.perf_counter()
        if now - last_text >= TEXT_EVERY_S:
            chart = now - last_chart >= CHART_EVERY_S
            last_text, last_chart = now, now if chart else last_chart
            yield render(lanes, colour, chart, context=context) + extra
