"""Ouroboros race: vanilla decoding and Ouroboros side by side, from one engine on one device."""

from __future__ import annotations

import html
import itertools
import json
import math
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path

import gradio as gr

from ouroboros_core import ConfigError, LoadError, OuroborosConfig
from ouroboros_core.race import Lane, race

ASSETS = Path(__file__).resolve().parent / "assets"
MAX_NEW_TOKENS = int(os.environ.get("OUROBOROS_MAX_NEW_TOKENS", "512"))  # cap visitors cannot exceed
MAX_PROMPT_CHARS = int(os.environ.get("OUROBOROS_MAX_PROMPT_CHARS", "8000"))
QUEUE_SIZE = int(os.environ.get("OUROBOROS_QUEUE_SIZE", "16"))
DEFAULTS = OuroborosConfig()
LANE_TITLES = {"vanilla": "Vanilla (target alone)", "speculative": "Speculative (draft model)",
               "ouroboros": "Ouroboros"}
TIMING_NOTE = ("Each lane's clock counts only its own compute: the lanes take turns on the one device, the "
               "lane that is behind on its own clock always goes next, and every clock reads "
               "time.perf_counter (device synchronised) around its own steps, as if it ran alone.")

_engine = None
_engine_lock = threading.Lock()


class Sessions:
    """Per-visitor state kept on the server: a stop flag and, if asked for, a warm phrase pool.

    Bounded (least recently used visitors fall out) and dropped when the visitor's page unloads, so
    nothing grows across visitors and no visitor's phrases reach another's pool.
    """

    def __init__(self, capacity: int = 256):
        self.capacity = capacity
        self._items: OrderedDict[str, dict] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> dict:
        with self._lock:
            item = self._items.pop(key, None) or {"stop": threading.Event(), "pool": None}
            self._items[key] = item
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
            return item

    def drop(self, key: str) -> None:
        with self._lock:
            item = self._items.pop(key, None)
        if item is not None:
            item["stop"].set()

    def __len__(self) -> int:
        return len(self._items)


SESSIONS = Sessions()

try:
    import spaces  # present on Hugging Face Spaces (ZeroGPU); absent elsewhere, and then nothing changes

    on_gpu = spaces.GPU
except ImportError:
    def on_gpu(fn):
        return fn


def get_engine():
    """Load the pair once per process, on first use (never at import)."""
    global _engine
    with _engine_lock:
        if _engine is None:
            from ouroboros_core import load_engine

            # Settings come from the environment of the host (a Space's variables), never from the page.
            _engine = load_engine(os.environ.get("OUROBOROS_TARGET") or os.environ.get("OUROBOROS_PRESET"),
                                  os.environ.get("OUROBOROS_DRAFT"), os.environ.get("OUROBOROS_DEVICE"))
            _engine.generate("def warm_up():\n", "ouroboros", 8)  # first-call allocations, kernels
        return _engine


def check_request(prompt, max_new_tokens) -> int:
    if not isinstance(prompt, str) or not prompt.strip():
        raise gr.Error("Prompt is empty: type some code or pick an example.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise gr.Error(f"Prompt is {len(prompt):,} characters; this demo takes at most {MAX_PROMPT_CHARS:,}.")
    try:
        value = float(max_new_tokens)
    except (TypeError, ValueError):
        raise gr.Error(f"Max new tokens must be a whole number from 1 to {MAX_NEW_TOKENS}.") from None
    if not math.isfinite(value) or value != int(value) or not 1 <= value <= MAX_NEW_TOKENS:
        raise gr.Error(f"Max new tokens must be a whole number from 1 to {MAX_NEW_TOKENS}, got {max_new_tokens}.")
    return int(value)


def ouroboros_options(gamma, window, ngram, branches) -> dict:
    options = {}
    for name, value in (("gamma", gamma), ("window", window), ("ngram", ngram), ("branches", branches)):
        if value is None:
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        options[name] = value
    return options


def run_race(prompt, max_new_tokens, options, methods, stop, pools):
    """Validate, then yield lanes; errors become messages for the visitor, never tracebacks."""
    max_new_tokens = check_request(prompt, max_new_tokens)
    engine = get_engine()
    try:
        updates = race(engine, prompt, methods, max_new_tokens, {"ouroboros": options}, stop, pools)
        # race() is a generator: the engine validates the request on its first step, so take it here.
        first = next(updates)
    except ConfigError as err:
        raise gr.Error(str(err)) from None
    return itertools.chain([first], updates)


# ----------------------------------------------------------------------------------------------- rendering

def token_spans(tokens, colour: bool) -> str:
    if not colour:
        return html.escape("".join(t.text for t in tokens))
    return "".join(f'<span class="tok tok-{t.source.value}">{html.escape(t.text)}</span>' for t in tokens)


def lane_html(lane: Lane, colour: bool) -> str:
    body = token_spans(lane.committed, colour)
    if lane.rejected and colour:
        rejected = html.escape("".join(t.text for t in lane.rejected))
        body += f'<s class="tok-rejected" title="drafted, rejected by the target">{rejected}</s>'
    if lane.done is None:
        body += '<span class="cursor">▌</span>'
    return f'<pre class="lane-text">{body}</pre>'


def lane_stats(lane: Lane, vanilla: Lane | None) -> str:
    parts = [f"<b>{lane.clock_s:.2f} s</b>", f"{lane.tokens} tokens", f"<b>{lane.tokens_per_second:.1f} tok/s</b>"]
    if lane.method != "vanilla":
        if vanilla is not None and vanilla.tokens_per_second > 0 and lane.tokens:
            parts.append(f"<b>{lane.tokens_per_second / vanilla.tokens_per_second:.2f}x</b> vanilla")
        if lane.steps:
            parts.append(f"{lane.tokens / lane.steps:.2f} tokens/forward")
        if lane.drafted:
            parts.append(f"{lane.accepted / lane.drafted:.0%} accepted")
    state = "done" if lane.done else "running"
    return f'<div class="lane-stats {state}">' + " · ".join(parts) + "</div>"


def badge_html(lanes: dict[str, Lane]) -> str:
    if any(lane.done is None for lane in lanes.values()):
        return ""
    reasons = {lane.done.stop_reason for lane in lanes.values()}
    if "cancelled" in reasons:
        return '<div class="badge stopped">Stopped.</div>'
    outputs = {m: lane.done.token_ids for m, lane in lanes.items()}
    reference = outputs["vanilla"]
    for method, ids in outputs.items():
        if ids != reference:
            at = next((i for i, (a, b) in enumerate(zip(ids, reference)) if a != b), min(len(ids), len(reference)))
            return (f'<div class="badge differ">Outputs differ: {html.escape(method)} departs from vanilla at '
                    f"token {at}. This is a bug.</div>")
    return f'<div class="badge same">Identical outputs: {len(reference)} tokens, token for token.</div>'


def summary_markdown(lanes: dict[str, Lane]) -> str:
    if any(lane.done is None for lane in lanes.values()):
        return ""
    vanilla = lanes["vanilla"].done.stats
    rows = ["| lane | seconds | tokens | tok/s | speedup | tokens/forward | acceptance |", "|---|---|---|---|---|---|---|"]
    for method, lane in lanes.items():
        s = lane.done.stats
        speedup = s.tokens_per_second / vanilla.tokens_per_second if vanilla.tokens_per_second else 0
        accept = f"{s.acceptance_rate:.0%}" if method != "vanilla" else "-"
        rows.append(f"| {LANE_TITLES[method]} | {s.seconds:.2f} | {s.new_tokens} | {s.tokens_per_second:.1f} | "
                    f"{speedup:.2f}x | {s.tokens_per_forward:.2f} | {accept} |")
    return "\n".join(rows)


def chart_frame(lanes: dict[str, Lane]):
    import pandas as pd

    rows = [(t, n, LANE_TITLES[m]) for m, lane in lanes.items() for t, n in lane.trace]
    return pd.DataFrame(rows, columns=["seconds", "tokens", "lane"])


def render(lanes: dict[str, Lane], colour: bool):
    vanilla = lanes.get("vanilla")
    out = []
    for method in ("vanilla", "ouroboros", "speculative"):
        lane = lanes.get(method)
        if lane is None:
            out += ["", ""]
        else:
            title = f"<h3>{LANE_TITLES[method]}</h3>" if method == "speculative" else ""
            out += [title + lane_html(lane, colour and method != "vanilla"), lane_stats(lane, vanilla)]
    return out + [chart_frame(lanes), badge_html(lanes), summary_markdown(lanes)]


# ----------------------------------------------------------------------------------------------- handlers

@on_gpu
def race_ui(prompt, max_new_tokens, gamma, window, ngram, branches, with_speculative, colour, warm_pool,
            request: gr.Request):
    session = SESSIONS.get(request.session_hash or "anonymous")
    stop = session["stop"]  # cleared by arm_stop when Run was pressed; a Stop while queued stays set
    methods = ["vanilla", "ouroboros"] + (["speculative"] if with_speculative else [])
    pools = {}
    if warm_pool:
        if session.get("pool") is None:
            session["pool"] = get_engine().new_pool()
        pools["ouroboros"] = session["pool"]
    options = ouroboros_options(gamma, window, ngram, branches)
    updates = run_race(prompt, max_new_tokens, options, methods, stop, pools)
    last_yield = 0.0
    lanes = None
    for lanes in updates:
        now = time.perf_counter()
        if now - last_yield >= 0.06:
            last_yield = now
            yield render(lanes, colour)
    if lanes is not None:
        yield render(lanes, colour)


@on_gpu
def race_api(prompt: str, max_new_tokens: int = 128) -> dict:
    """Race vanilla and Ouroboros on one prompt; returns {method: {text, token_ids, stats}}."""
    lanes = None
    for lanes in run_race(prompt, max_new_tokens, {}, ["vanilla", "ouroboros"], None, {}):
        pass
    return {method: {"text": lane.done.text, "token_ids": list(lane.done.token_ids),
                     "stop_reason": lane.done.stop_reason, "stats": lane.done.stats.to_dict()}
            for method, lane in lanes.items()}


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

def examples() -> list[list]:
    data = json.loads((ASSETS / "examples.json").read_text())
    return [[item["prompt"], item.get("max_new_tokens", 128)] for item in data]


def pair_description() -> str:
    from ouroboros_core.models import presets

    if os.environ.get("OUROBOROS_TARGET"):
        return f"Pair: target `{os.environ['OUROBOROS_TARGET']}`, draft `{os.environ.get('OUROBOROS_DRAFT')}`."
    name = os.environ.get("OUROBOROS_PRESET", "demo")
    preset = presets().get(name)
    if preset is None:
        return f"Pair: `{html.escape(name)}` (unknown preset)"
    return f"Pair **{name}**: target `{preset.target}`, draft `{preset.draft}`: {preset.description}."


LEGEND = ('<div class="legend">'
          '<span class="tok tok-draft">accepted from the draft model</span>'
          '<span class="tok tok-pool">accepted from a pool phrase</span>'
          '<span class="tok tok-prompt">accepted by prompt lookup</span>'
          '<span class="tok tok-target">the target\'s own token</span>'
          '<s class="tok-rejected">drafted, rejected</s></div>')

with gr.Blocks(title="Ouroboros race") as demo:
    gr.Markdown("# Ouroboros race\nThe same prompt through plain greedy decoding and through Ouroboros "
                "speculative decoding, side by side. Both produce exactly the target model's greedy output; "
                "Ouroboros gets there in fewer target forwards.")
    gr.Markdown(pair_description())
    with gr.Row():
        prompt = gr.Textbox(label="Prompt", lines=8, max_lines=30, scale=3, elem_id="prompt",
                            placeholder="def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n")
        with gr.Column(scale=1):
            max_new = gr.Slider(1, MAX_NEW_TOKENS, value=min(128, MAX_NEW_TOKENS), step=1, label="Max new tokens")
            speculative_lane = gr.Checkbox(False, label="Add a classic speculative decoding lane")
            colour = gr.Checkbox(True, label="Colour tokens by how they came")
            warm = gr.Checkbox(True, label="Keep my phrase pool warm (this session only)")
            with gr.Row():
                run = gr.Button("Run", variant="primary", elem_id="run")
                stop_button = gr.Button("Stop", elem_id="stop")
                clear_button = gr.Button("Clear")
    with gr.Accordion("Ouroboros parameters", open=False):
        with gr.Row():
            gamma = gr.Slider(1, 16, value=DEFAULTS.gamma, step=1, label="gamma (minimum draft length)")
            window = gr.Slider(0, 32, value=DEFAULTS.window, step=1, label="window W (lookahead columns)")
            ngram = gr.Slider(2, 8, value=DEFAULTS.ngram, step=1, label="n-gram size N")
            branches = gr.Slider(0, 8, value=DEFAULTS.branches, step=1, label="branches k")
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
    gr.Examples(examples(), inputs=[prompt, max_new], label="Examples (HumanEval-style function stubs)")

    outputs = [vanilla_text, vanilla_stats, ouroboros_text, ouroboros_stats, speculative_text, speculative_stats,
               chart, badge, summary]
    run_event = run.click(arm_stop, None, None, concurrency_limit=None, api_visibility="private").then(
                          race_ui, [prompt, max_new, gamma, window, ngram, branches, speculative_lane, colour,
                                    warm], outputs,
                          concurrency_id="device", concurrency_limit=1, api_visibility="private")
    stop_button.click(request_stop, None, None, concurrency_limit=None, api_visibility="private")
    clear_button.click(clear, None, outputs, api_visibility="private").then(
        lambda: "", None, prompt, api_visibility="private")
    demo.unload(forget_session)
    gr.api(race_api, api_name="race", concurrency_id="device", concurrency_limit=1)

def main() -> None:
    print("Loading and warming up the model pair...", flush=True)
    try:
        engine = get_engine()
    except LoadError as err:
        raise SystemExit(f"error: {err}") from None
    print(f"Ready: pair {engine.name} on {engine.target.device}.", flush=True)
    demo.queue(max_size=QUEUE_SIZE, default_concurrency_limit=1)
    # None lets Gradio read GRADIO_SERVER_NAME / GRADIO_SERVER_PORT (Spaces sets them), else localhost:7860.
    port = os.environ.get("PORT")
    demo.launch(server_name=os.environ.get("OUROBOROS_HOST"), server_port=int(port) if port else None,
                css=(ASSETS / "style.css").read_text(), show_error=True)


if __name__ == "__main__":
    main()
