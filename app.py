"""Ouroboros race: vanilla decoding and Ouroboros side by side, from one engine on one device.

This file holds the layout and the handlers. What they call lives in ui/ (request checks, visitor
sessions, rendering of the lanes) and the engine in ouroboros_core/.
"""

from __future__ import annotations

import html
import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import gradio as gr

from ouroboros_core import ConfigError, LoadError, OuroborosConfig, OutputVerdict
from ouroboros_core.race import Lane, race
from ui.guard import KNOBS, UNEXPECTED, Limits, check_request, input_problems, refuse, shielded  # noqa: F401  (UNEXPECTED: tests)
from ui.render import (LANE_TITLES, LEGEND, TIMING_NOTE, badge_html, chart_frame, lane_parts, race_log_line,
                       summary_markdown)
from ui.sessions import Sessions

ASSETS = Path(__file__).resolve().parent / "assets"
LIMITS = Limits.from_env()  # the host's caps on what a visitor may ask for
MAX_NEW_TOKENS = LIMITS.max_new_tokens
QUEUE_SIZE = int(os.environ.get("OUROBOROS_QUEUE_SIZE", "16"))
# Phrases one visitor's warm pool may hold (~0.4 kB each): with at most 256 sessions, pools stay under ~0.5 GB.
SESSION_POOL_SIZE = int(os.environ.get("OUROBOROS_SESSION_POOL_SIZE", "4096"))
DEFAULTS = OuroborosConfig()
log = logging.getLogger("ouroboros.app")

_engine = None
_engine_lock = threading.Lock()
SESSIONS = Sessions()

try:
    import spaces  # present on Hugging Face Spaces (ZeroGPU); absent elsewhere, and then nothing changes

    on_gpu = spaces.GPU  # on ZeroGPU, device work may only happen inside functions it wraps
    ZERO_GPU = True
except ImportError:
    def on_gpu(fn):
        return fn

    ZERO_GPU = False


def get_engine():
    """Load the pair once per process, on first use (never at import)."""
    global _engine
    with _engine_lock:
        if _engine is None:
            from ouroboros_core import load_engine

            # Settings come from the environment of the host (a Space's variables), never from the page.
            _engine = load_engine(os.environ.get("OUROBOROS_TARGET") or os.environ.get("OUROBOROS_PRESET"),
                                  os.environ.get("OUROBOROS_DRAFT"), os.environ.get("OUROBOROS_DEVICE"),
                                  dtype=os.environ.get("OUROBOROS_DTYPE") or None, check_memory=not ZERO_GPU)
            if not ZERO_GPU:  # there the first race, inside its GPU function, warms up instead
                _engine.generate("def warm_up():\n", "ouroboros", 8)  # first-call allocations, kernels
        return _engine


def run_race(prompt, max_new_tokens, options, methods, stop, pools):
    """Yield lanes of a checked request; request errors the engine finds become messages for the visitor."""
    engine = get_engine()
    try:
        updates = race(engine, prompt, methods, max_new_tokens, {"ouroboros": options}, stop, pools)
        # race() is a generator: the engine validates the request on its first step, so take it here.
        first = next(updates)
    except ConfigError as err:
        raise refuse(str(err)) from None
    return itertools.chain([first], updates)


def race_verdicts(prompt: str, lanes: dict[str, Lane]) -> dict[str, OutputVerdict]:
    """Each drafting lane's output against vanilla's, once every lane has finished (not when stopped)."""
    if any(lane.done is None or lane.done.stop_reason == "cancelled" for lane in lanes.values()):
        return {}
    reference = lanes["vanilla"].done.token_ids
    return {method: get_engine().verdict(prompt, reference, lane.done.token_ids)
            for method, lane in lanes.items() if method != "vanilla"}


def render(lanes: dict[str, Lane], colour: bool, chart: bool = True, verdicts: dict | None = None):
    """The outputs' new values; chart=False leaves the chart as it is (it is the costly one to redraw)."""
    out = [part for method in ("vanilla", "ouroboros", "speculative") for part in lane_parts(lanes, method, colour)]
    return out + [chart_frame(lanes) if chart else gr.skip(), badge_html(lanes, verdicts),
                  summary_markdown(lanes)]


def log_race(who: str, lanes: dict[str, Lane] | None) -> None:
    if lanes:
        log.info("race %s: %s", who[:8], race_log_line(lanes))


# ----------------------------------------------------------------------------------------------- handlers

TEXT_EVERY_S = 0.06  # streamed text ~16 times a second
CHART_EVERY_S = 0.5  # the chart ~2 times a second: a slow browser keeps up


@on_gpu
@shielded
def race_ui(prompt, max_new_tokens, gamma, window, ngram, branches, with_speculative, colour, warm_pool,
            request: gr.Request):
    prompt, max_new_tokens, options = check_request(
        prompt, max_new_tokens, {"gamma": gamma, "window": window, "ngram": ngram, "branches": branches}, LIMITS)
    who = request.session_hash or "anonymous"
    session = SESSIONS.get(who)
    stop = session["stop"]  # cleared by arm_stop when Run was pressed; a Stop while queued stays set
    methods = ["vanilla", "ouroboros"] + (["speculative"] if with_speculative else [])
    pools = {}
    if warm_pool:
        if session.get("pool") is None:
            session["pool"] = get_engine().new_pool(pool_size=SESSION_POOL_SIZE)
        pools["ouroboros"] = session["pool"]
    last_text = last_chart = 0.0
    lanes = None
    try:
        for lanes in run_race(prompt, max_new_tokens, options, methods, stop, pools):
            now = time.perf_counter()
            if now - last_text >= TEXT_EVERY_S:
                chart = now - last_chart >= CHART_EVERY_S
                last_text, last_chart = now, now if chart else last_chart
                yield render(lanes, colour, chart)
        if lanes is not None:
            yield render(lanes, colour, verdicts=race_verdicts(prompt, lanes))
    finally:
        log_race(who, lanes)


API_EVERY_S = 0.25


@on_gpu
@shielded
def race_api(prompt: str, max_new_tokens: int = 128, gamma: int | None = None, window: int | None = None,
             ngram: int | None = None, branches: int | None = None) -> Iterator[dict]:
    """Race vanilla and Ouroboros on one prompt. Streams {method: {text, token_ids, stop_reason, stats}}
    (stop_reason and stats are None until a lane is done); the last message is the finished race: each lane
    with "steps" (the engine's step events: drafted, accepted, rejected, target_token, milliseconds), its
    Ouroboros lane with "verdict": {kind: "identical" | "float tie" | "mismatch", first_difference, margin}
    against vanilla (None if the race was cut short). gamma, window, ngram, branches: Ouroboros settings,
    None for the defaults."""
    prompt, max_new_tokens, options = check_request(
        prompt, max_new_tokens, {"gamma": gamma, "window": window, "ngram": ngram, "branches": branches}, LIMITS)
    lanes = None
    last = 0.0
    try:
        for lanes in run_race(prompt, max_new_tokens, options, ["vanilla", "ouroboros"], None, {}):
            now = time.perf_counter()
            if now - last >= API_EVERY_S:
                last = now
                yield api_result(lanes)
        final = api_result(lanes)
        for method, lane in lanes.items():  # the engine's step events, as the CLI's --events prints them
            final[method]["steps"] = [event.to_dict() for event in lane.events]
        verdict = race_verdicts(prompt, lanes).get("ouroboros")
        final["ouroboros"]["verdict"] = verdict.to_dict() if verdict else None
        yield final
    finally:  # also when the client cancels: a generator left alone stops computing at once
        log_race("api", lanes)


def api_result(lanes: dict[str, Lane]) -> dict:
    out = {}
    for method, lane in lanes.items():
        done = lane.done
        out[method] = {"text": done.text if done else "".join(t.text for t in lane.committed),
                       "token_ids": list(done.token_ids) if done else [t.id for t in lane.committed],
                       "stop_reason": done.stop_reason if done else None,
                       "stats": done.stats.to_dict() if done else None}
    return out


def validate_race(prompt, max_new_tokens, gamma, window, ngram, branches, *flags) -> list[dict]:
    """The page's inputs checked before the race is queued: a bad one gets its message beside it, once, and
    the outputs are left alone (race_ui checks again, for every other caller)."""
    knobs = {"gamma": gamma, "window": window, "ngram": ngram, "branches": branches}
    problems = input_problems(prompt, max_new_tokens, knobs, LIMITS) + [None] * len(flags)
    return [gr.validate(problem is None, problem or "") for problem in problems]


def arm_stop(request: gr.Request):
    """Runs at once when Run is pressed, before the race waits for the device: a Stop pressed from now
    on, even while the race still waits in the queue, ends that race."""
    SESSIONS.get(request.session_hash or "anonymous")["stop"].clear()


def request_stop(request: gr.Request):
    SESSIONS.get(request.session_hash or "anonymous")["stop"].set()


def forget_session(request: gr.Request):
    SESSIONS.drop(request.session_hash or "anonymous")


def clear():
    return ["", "", "", "", "", "", chart_frame({}), "", ""]


# ----------------------------------------------------------------------------------------------- layout

def examples() -> list[dict]:
    """Prompts labelled by what they show, ordinary code first: when Ouroboros wins, and when it does not."""
    return json.loads((ASSETS / "examples.json").read_text())


EXAMPLES = examples()
# One line per Ouroboros knob, under its slider.
KNOB_INFO = {"gamma": "draft at least this many tokens before the target checks them",
             "window": "lookahead columns the draft refines in each forward (0: none; cheap on a GPU)",
             "ngram": "phrases of N-1 tokens enter the pool, keyed on the token before them",
             "branches": "pool phrases the target verifies beside the draft, in the same forward"}


def pair_description() -> str:
    from ouroboros_core.models import presets

    if os.environ.get("OUROBOROS_TARGET"):
        return f"Pair: target `{os.environ['OUROBOROS_TARGET']}`, draft `{os.environ.get('OUROBOROS_DRAFT')}`."
    name = os.environ.get("OUROBOROS_PRESET", "demo")
    preset = presets().get(name)
    if preset is None:
        return f"Pair: `{html.escape(name)}` (unknown preset)"
    return f"Pair **{name}**: target `{preset.target}`, draft `{preset.draft}`: {preset.description}."


def pair_line() -> str:
    """The pair and, once it is loaded, the device and dtype it runs on (read on every page load)."""
    if _engine is None:
        return pair_description()
    dtype = str(_engine.target.dtype).split(".")[-1]
    return f"{pair_description()} Running on **{_engine.target.device}** in **{dtype}**."


def knob_values() -> list[int]:
    """The sliders' starting values: the loaded pair's own settings for its device, else the engine's."""
    settings = {**asdict(DEFAULTS), **get_engine().defaults.get("ouroboros", {})}
    return [settings[name] for name in KNOBS]


with gr.Blocks(title="Ouroboros race") as demo:
    gr.Markdown("# Ouroboros race\nThe same prompt through plain greedy decoding and through Ouroboros "
                "speculative decoding, side by side. Both produce exactly the target model's greedy output; "
                "Ouroboros gets there in fewer target forwards.")
    gr.Markdown(pair_line, elem_id="pair")
    with gr.Row():
        prompt = gr.Textbox(EXAMPLES[0]["prompt"], label="Prompt", lines=8, max_lines=30, scale=3, elem_id="prompt",
                            max_length=LIMITS.max_prompt_chars)
        with gr.Column(scale=1):
            max_new = gr.Slider(1, MAX_NEW_TOKENS, value=min(EXAMPLES[0]["max_new_tokens"], MAX_NEW_TOKENS), step=1,
                                label="Max new tokens")
            speculative_lane = gr.Checkbox(False, label="Add a classic speculative decoding lane")
            colour = gr.Checkbox(True, label="Colour tokens by how they came")
            warm = gr.Checkbox(True, label="Keep my phrase pool warm (this session only)")
            with gr.Row():
                run = gr.Button("Run", variant="primary", elem_id="run")
                stop_button = gr.Button("Stop", elem_id="stop")
                clear_button = gr.Button("Clear")
    gr.Examples([[item["prompt"], item["max_new_tokens"]] for item in EXAMPLES], inputs=[prompt, max_new],
                example_labels=[item["label"] for item in EXAMPLES], label="Examples: what each one shows")
    with gr.Accordion("Ouroboros parameters", open=False):
        with gr.Row():
            gamma, window, ngram, branches = (
                gr.Slider(low, high, value=getattr(DEFAULTS, name), step=1, label=label, info=KNOB_INFO[name])
                for name, (low, high, label) in KNOBS.items())
    gr.HTML(LEGEND)
    with gr.Row(equal_height=True):
        with gr.Column():
            gr.Markdown(f"### {LANE_TITLES['vanilla']}")
            vanilla_text = gr.HTML(elem_id="lane-vanilla")
            vanilla_stats = gr.HTML(elem_id="stats-vanilla")
        with gr.Column():
            gr.Markdown(f"### {LANE_TITLES['ouroboros']}")
            ouroboros_text = gr.HTML(elem_id="lane-ouroboros")
            ouroboros_stats = gr.HTML(elem_id="stats-ouroboros")
    with gr.Row():
        speculative_text = gr.HTML(elem_id="lane-speculative")
        speculative_stats = gr.HTML(elem_id="stats-speculative")
    badge = gr.HTML(elem_id="badge")
    chart = gr.LinePlot(x="seconds", y="tokens", color="lane", title="Tokens over each lane's own clock",
                        height=260, elem_id="chart")
    summary = gr.Markdown(elem_id="summary")
    gr.Markdown(f"*How times are measured:* {TIMING_NOTE}")

    outputs = [vanilla_text, vanilla_stats, ouroboros_text, ouroboros_stats, speculative_text, speculative_stats,
               chart, badge, summary]
    run_event = run.click(arm_stop, None, None, concurrency_limit=None, api_visibility="private").then(
                          race_ui, [prompt, max_new, gamma, window, ngram, branches, speculative_lane, colour,
                                    warm], outputs,
                          concurrency_id="device", concurrency_limit=1, api_visibility="private",
                          validator=validate_race)
    stop_button.click(request_stop, None, None, concurrency_limit=None, api_visibility="private")
    clear_button.click(clear, None, outputs, api_visibility="private").then(
        lambda: "", None, prompt, api_visibility="private")
    demo.load(knob_values, None, [gamma, window, ngram, branches], api_visibility="private")
    demo.unload(forget_session)
    gr.api(race_api, api_name="race", concurrency_id="device", concurrency_limit=1)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    print("Loading and warming up the model pair...", flush=True)
    try:
        engine = get_engine()
    except LoadError as err:
        raise SystemExit(f"error: {err}") from None
    print(f"Ready: pair {engine.name} on {engine.target.device} in {str(engine.target.dtype).split('.')[-1]}.",
          flush=True)
    demo.queue(max_size=QUEUE_SIZE, default_concurrency_limit=1)
    # None lets Gradio read GRADIO_SERVER_NAME / GRADIO_SERVER_PORT (Spaces sets them), else localhost:7860.
    port = os.environ.get("PORT")
    demo.launch(server_name=os.environ.get("OUROBOROS_HOST"), server_port=int(port) if port else None,
                css=(ASSETS / "style.css").read_text(), show_error=False)


if __name__ == "__main__":
    main()
