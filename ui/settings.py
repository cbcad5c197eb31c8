"""The page's settings panels, beside each other under the examples: the Ouroboros knobs a visitor
may set and the sampling options, each laid out from its knob's place on the page (config.py)."""

from __future__ import annotations

import gradio as gr
from gradio.components import Component

from ouroboros_core.config import Knob
from ui.guard import KNOBS, SAMPLING


def knob_input(name: str, setting: Knob) -> Component:
    """A knob's slider, at its default; a knob that may be left unset (the seed) gets a text box
    instead, starting empty: a number box shows 0 for no value, and 0 is a seed."""
    page = setting.page
    if setting.default is None:
        # The validator reads the text and says why a value is refused.
        return gr.Textbox(
            "",
            label=page.label,
            elem_id=name,
            info=page.info,
            placeholder="empty: a new seed each race",
            max_lines=1,
        )
    return gr.Slider(
        page.low,
        page.high,
        value=setting.default,
        step=page.step,
        label=page.label,
        info=page.info,
    )


def settings_panel() -> tuple[dict[str, Component], dict[str, Component]]:
    """Lay the panels out (inside the page's Blocks) and return their inputs by name: the Ouroboros
    knobs' sliders, and the sampling inputs (temperature, top_p, seed)."""
    with gr.Row(elem_id="settings"):  # side by side; stacked on a phone (assets/style.css)
        with gr.Accordion("Ouroboros parameters", open=False, elem_id="knobs"):
            knob_sliders = {name: knob_input(name, setting) for name, setting in KNOBS.items()}
        with gr.Accordion("Sampling (greedy by default)", open=False, elem_id="sampling"):
            sampling = {name: knob_input(name, setting) for name, setting in SAMPLING.items()}
    return knob_sliders, sampling
