"""Ouroboros race: vanilla decoding and Ouroboros side by side, from one engine on one device."""

from __future__ import annotations

import functools
import html
import itertools
import json
import logging
import math
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import gradio as gr

from ouroboros_core import ConfigError, LoadError, OuroborosConfig
from ouroboros_core.race import Lane, race

ASSETS = Path(__file__).resolve().parent / "assets"
MAX_NEW_TOKENS = int(os.environ.get("OUROBOROS_MAX_NEW_TOKENS", "512"))  # cap visitors cannot exceed
MAX_PROMPT_CHARS = int(os.environ.get("OUROBOROS_MAX_PROMPT_CHARS", "8000"))
QUEUE_SIZE = int(os.environ.get("OUROBOROS_QUEUE_SIZE", "16"))
# Phrases one visitor's warm pool may hold (~0.4 kB each): with at most 256 sessions, pools stay under ~0.5 GB.
SESSION_POOL_SIZE = int(os.environ.get("OUROBOROS_SESSION_POOL_SIZE", "4096"))
DEFAULTS = OuroborosConfig()
# The Ouroboros knobs a visitor may set and their bounds: the sliders' ranges, checked again on the server.
KNOBS = {"gamma": (1, 16, "gamma (minimum draft length)"), "window": (0, 32, "window W (lookahead columns)"),
         "ngram": (2, 8, "n-gram size N"), "branches": (0, 8, "branches k")}
CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")  # C0/C1 controls, except tab, newlines, form feed
UNEXPECTED = "Something went wrong on the server; it has been logged. Please try again."
log = logging.getLogger("ouroboros.app")
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


def check_prompt(prompt) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise gr.Error("Prompt is empty: type some code or pick an example.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise gr.Error(f"Prompt is {len(prompt):,} characters; this demo takes at most {MAX_PROMPT_CHARS:,}.")
    found = CONTROL.search(prompt)  # lone surrogates are the engine's to refuse, for every caller
    if found:
        raise gr.Error(f"Prompt has a control character (U+{ord(found.group()):04X}) at character "
                       f"{found.start()}; only printable text, tabs and newlines are accepted.")
    return prompt


def check_whole(label: str, value, low: int, high: int) -> int:
    """A whole number in [low, high] from the page or the API (sliders send floats like 3.0)."""
    ok = (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
          and value == int(value) and low <= value <= high)
    if not ok:
        raise gr.Error(f"{label} must be a whole number from {low} to {high}, got {value!r}.")
    return int(value)


def check_request(prompt, max_new_tokens, knobs: dict | None = None) -> tuple[str, int, dict]:
    """Everything a visitor sends, checked before the request touches the device."""
    prompt = check_prompt(prompt)
    max_new_tokens = check_whole("Max new tokens", max_new_tokens, 1, MAX_NEW_TOKENS)
    options = {}
    for name, value in (knobs or {}).items():
        if value is not None:  # None: the engine's default
            low, high, label = KNOBS[name]
            options[name] = check_whole(label, value, low, high)
    return prompt, max_new_tokens, options


def shielded(handler):
    """Visitors see our own messages (gr.Error) and never a traceback; anything else is logged here."""
    @functools.wraps(handler)
    def wrapper(*args, **kwargs):
        try:
            yield from handler(*args, **kwargs)
        except gr.Error:
            raise
        except Exception:
            log.exception("request failed")
            raise gr.Error(UNEXPECTED) from None
    return wrapper


def run_race(prompt, max_new_tokens, options, methods, stop, pools):
    """Yield lanes of a checked request; request errors the engine finds become messages for the visitor."""
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


def render(lanes: dict[str, Lane], colour: bool, chart: bool = True):
    """The outputs' new values; chart=False leaves the chart as it is (it is the costly one to redraw)."""
    vanilla = lanes.get("vanilla")
    out = []
    for method in ("vanilla", "ouroboros", "speculative"):
        lane = lanes.get(method)
        if lane is None:
            out += ["", ""]
        else:
            title = f"<h3>{LANE_TITLES[method]}</h3>" if method == "speculative" else ""
            out += [title + lane_html(lane, colour and method != "vanilla"), lane_stats(lane, vanilla)]
    return out + [chart_frame(lanes) if chart else gr.skip(), badge_html(lanes), summary_markdown(lanes)]


def log_race(who: str, lanes: dict[str, Lane] | None) -> None:
    if lanes:
        log.info("race %s: %s", who[:8], ", ".join(
            f"{m} {lane.tokens} tokens {lane.done.stop_reason if lane.done else 'unfinished'} {lane.clock_s:.2f} s"
            for m, lane in lanes.items()))


# ----------------------------------------------------------------------------------------------- handlers

TEXT_EVERY_S = 0.06  # streamed text ~16 times a second
CHART_EVERY_S = 0.5  # the chart ~2 times a second: a slow browser keeps up


@on_gpu
@shielded
def race_ui(prompt, max_new_tokens, gamma, window, ngram, branches, with_speculative, colour, warm_pool,
            request: gr.Request):
    prompt, max_new_tokens, options = check_request(
        prompt, max_new_tokens, {"gamma": gamma, "window": window, "ngram": ngram, "branches": branches})
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
            yield render(lanes, colour)
    finally:
        log_race(who, lanes)


API_EVERY_S = 0.25


@on_gpu
@shielded
def race_api(prompt: str, max_new_tokens: int = 128, gamma: int | None = None, window: int | None = None,
             ngram: int | None = None, branches: int | None = None) -> Iterator[dict]:
    """Race vanilla and Ouroboros on one prompt. Streams {method: {text, token_ids, stop_reason, stats}}
    (stop_reason and stats are None until a lane is done); the last message is the finished race.
    gamma, window, ngram, branches: Ouroboros settings, None for the defaults."""
    prompt, max_new_tokens, options = check_request(
        prompt, max_new_tokens, {"gamma": gamma, "window": window, "ngram": ngram, "branches": branches})
    lanes = None
    last = 0.0
    try:
        for lanes in run_race(prompt, max_new_tokens, options, ["vanilla", "ouroboros"], None, {}):
            now = time.perf_counter()
            if now - last >= API_EVERY_S:
                last = now
                yield api_result(lanes)
        yield api_result(lanes)
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
            gamma, window, ngram, branches = (
                gr.Slider(low, high, value=getattr(DEFAULTS, name), step=1, label=label)
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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
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
                css=(ASSETS / "style.css").read_text(), show_error=False)


if __name__ == "__main__":
    main()
