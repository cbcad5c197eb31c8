"""The page's frames: a race's lanes as new values for the components it draws on, keyed by
component (nothing has to line up with a list of outputs), and a stream of lanes thinned to what a
browser can draw."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import gradio as gr
from gradio.components import Component

from ouroboros_core.race import Lane
from ui.chart import chart_svg
from ui.inspect import best_step, replayable, step_html
from ui.render import badge_html, lane_parts, summary_html
from ui.loops import loop_note

TEXT_EVERY_S = 0.06  # streamed text ~16 times a second
CHART_EVERY_S = 0.5  # the chart ~2 times a second: a slow browser keeps up


@dataclass(frozen=True)
class RaceView:
    """The components a race draws on, from app.py's layout. A frame sets only the components it
    names; the others stay as they are."""

    lanes: dict[str, tuple[Component, Component]]  # by method: its text and its stats line
    chart: Component
    badge: Component
    summary: Component
    step: Component  # the step inspector's slider
    inspector: Component
    replay: Component  # the Replay button
    status: Component  # queued (Gradio's tracker: its place) or racing
    legend: Component  # set for each race when Run is accepted
    armed: Component  # the click's race number (Sessions.arm), a gr.State

    @property
    def outputs(self) -> list[Component]:
        """What a race, a replay or Clear may set."""
        lanes = [part for parts in self.lanes.values() for part in parts]
        return lanes + [
            self.chart,
            self.badge,
            self.summary,
            self.step,
            self.inspector,
            self.replay,
            self.status,
        ]

    def frame(
        self,
        lanes: dict[str, Lane],
        colour: bool,
        chart: bool = True,
        final: dict | None = None,
        context: str = "",
    ) -> dict:
        """The lanes, badge and summary (and the chart unless chart=False: it is the costly one to
        redraw). final: once the race is over, its verdicts, the step costs measured before it, its
        sampling line and whether it met a busy machine ("busy": the CPU share its steps got, or
        None)."""
        final = final or {}
        values = {}
        for method, (text, stats) in self.lanes.items():
            values[text], values[stats] = lane_parts(lanes, method, colour, context)
        if chart:
            values[self.chart] = chart_svg(lanes)
        values[self.badge] = (
            badge_html(lanes, final.get("verdicts"))
            + final.get("sampling", "")
            + (loop_note(lanes) if final else "")
        )
        values[self.summary] = (
            summary_html(lanes, final["costs"], final.get("busy")) if final else ""
        )
        return values

    def inspected(self, lanes: dict[str, Lane] | None) -> dict:
        """The step slider, the inspector and the Replay button for a finished race (None: none to
        show, and Replay off). A finished race leaves Replay as it is: only the end of the visitor's
        last Run turns it back on."""
        if not replayable(lanes):
            values = {self.step: gr.update(interactive=False), self.inspector: ""}
            if lanes is None:
                values[self.replay] = gr.update(interactive=False)
            return values
        lane = lanes["ouroboros"]
        best = best_step(lane)
        return {
            self.step: gr.update(
                maximum=max(len(lane.events), 2), value=best, interactive=len(lane.events) > 1
            ),
            self.inspector: step_html(lane, best),
        }

    def cleared(self) -> dict:
        """Every output empty, the chart's bare axes, the step slider and Replay off."""
        off = gr.update(interactive=False)
        values = {part: "" for parts in self.lanes.values() for part in parts}
        return {
            **values,
            self.chart: chart_svg({}),
            self.badge: "",
            self.summary: "",
            self.step: off,
            self.inspector: "",
            self.replay: off,
            self.status: "",
        }


def streamed(
    view: RaceView, updates: Iterator[dict[str, Lane]], colour: bool, context: str = ""
) -> Iterator[dict]:
    """Frames of a stream of lanes ~16 times a second, with the chart ~2 times (a slow browser keeps
    up)."""
    last_text = last_chart = 0.0
    for lanes in updates:
        now = time.perf_counter()
        if now - last_text >= TEXT_EVERY_S:
            chart = now - last_chart >= CHART_EVERY_S
            last_text, last_chart = now, now if chart else last_chart
            yield view.frame(lanes, colour, chart, context=context)
