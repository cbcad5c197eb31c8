"""The page's settings panels, beside each other under the examples: the Ouroboros knobs a visitor
may set and the sampling options, each a slider or box laid out from its definition."""

from __future__ import annotations

import gradio as gr
from gradio.components import Component

from ui.guard import KNOBS, SAMPLING


def settings_panel() -> tuple[dict[str, Component], dict[str, Component]]:
    """Lay the panels out (inside the page's Blocks) and return their inputs by name: the Ouroboros
    knobs' sliders, and the sampling inputs (temperature, top_p, seed)."""
    with gr.Row(elem_id="settings"):  # side by side; stacked on a phone (assets/style.css)
        with gr.Accordion("Ouroboros parameters", open=False, elem_id="knobs"):
            knob_sliders = {
                name: gr.Slider(
                    knob.page.low,
                    knob.page.high,
                    value=knob.default,
                    step=1,
                    label=knob.page.label,
                    info=knob.page.info,
                )
                for name, knob in KNOBS.items()
            }
        with gr.Accordion("Sampling (greedy by default)", open=False, elem_id="sampling"):
            temperature = gr.Slider(
                *SAMPLING["temperature"][:2],
                value=0.0,
                step=0.05,
                label="Temperature",
                info="0: greedy. Above 0 both lanes sample, and still write the same text",
            )
            top_p = gr.Slider(
                *SAMPLING["top_p"][:2],
                value=1.0,
                step=0.05,
                label="Top-p",
                info="sample from the smallest set of tokens holding this much probability",
            )
            seed = gr.Number(
                0,
                label="Seed",
                elem_id="seed",  # unbounded: the validator says why
                info="each position's draw comes from the seed and the position "
                "alone; empty: a new one each race, shown after it",
            )
    return knob_sliders, {"temperature": temperature, "top_p": top_p, "seed": seed}
