"""Rendering: pure functions from race lanes (ouroboros_core.race.Lane) to the page's HTML, Markdown
and chart data. No Gradio here, so each piece is tested on its own and the handlers only choose what
to redraw."""

from __future__ import annotations

import html

from ouroboros_core.race import Lane
from ouroboros_core.verdict import CALM, OutputVerdict, explain, first_difference
from ui.calibration import StepCosts, first_step_ms, step_ms

LANE_TITLES = {
    "vanilla": "Vanilla (target alone)",
    "speculative": "Speculative (draft model)",
    "ouroboros": "Ouroboros",
}
TIMING_NOTE = (
    "Each lane's clock counts only its own compute: the lanes take turns on the one device, the "
    "lane that is behind on its own clock always goes next, and every clock reads "
    "time.perf_counter (device synchronised) around its own steps, as if it ran alone."
)
POOL_TITLE = (
    "phrases the lookahead window guessed, and the target's own tokens over a rejected draft, "
    "reused where they come back"
)


def legend_html(settings: dict, stored: bool = False) -> str:
    """The legend for an Ouroboros race with these settings (OuroborosConfig's fields, as sent):
    only the sources it can show. The pool is read only as branches (k) or inside the draft's
    forward (draft candidates); without the lookahead window (W) it holds little but the target's
    tokens over rejected drafts, and seldom pays. stored: the pair's draft carries the target's
    answers (lookup.AnswerStore), which lookup walks too."""

    def positive(name: str) -> bool:
        value = settings.get(name)
        return isinstance(value, (int, float)) and value > 0

    pool = positive("branches") or positive("draft_candidates")
    stored = stored and settings.get("prompt_lookup", True) and positive("stored_answers")
    lookup = stored or settings.get("prompt_lookup", True) and (positive("lookup") or pool)
    entries = ['<span class="tok tok-draft">accepted from the draft model</span>']
    if pool:
        rare = "" if positive("window") else " (rare with window W at 0)"
        entries.append(
            f'<span class="tok tok-pool" title="{html.escape(POOL_TITLE)}">accepted from a pool '
            f"phrase{rare}</span>"
        )
    if lookup:
        where = "the prompt or the text so far"
        if stored:
            where = "the prompt, the text so far or the target's stored answers"
        entries.append(f'<span class="tok tok-prompt">accepted by lookup ({where})</span>')
    entries += [
        '<span class="tok tok-target">the target\'s own token</span>',
        '<s class="tok-rejected">drafted, rejected</s>',
    ]
    return f'<div class="legend">{"".join(entries)}</div>'


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def token_spans(tokens, colour: bool) -> str:
    if not colour:
        return html.escape("".join(t.text for t in tokens))
    return "".join(
        f'<span class="tok tok-{t.source.value}">{html.escape(t.text)}</span>' for t in tokens
    )


def prompt_tail(prompt: str) -> str:
    """The end of the prompt that each lane's output continues: from its last line with anything on
    it, so an output that starts mid-function reads as the function's next line."""
    lines = prompt.split("\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=len(lines) - 1)
    return "\n".join(lines[last:])


def lane_html(lane: Lane, colour: bool, context: str = "") -> str:
    """A lane's text: `context` (the prompt's last line, dimmed), then the output so far, coloured
    by source."""
    body = token_spans(lane.committed, colour)
    if lane.rejected and colour:
        rejected = html.escape("".join(t.text for t in lane.rejected))
        body += f'<s class="tok-rejected" title="drafted, rejected by the target">{rejected}</s>'
    if lane.done is None:
        body += '<span class="cursor">▌</span>'
    if context:
        body = (
            f'<span class="prompt-tail" title="the end of the prompt">{html.escape(context)}</span>'
            + body
        )
    # HTML drops one newline right after <pre>: give it one, so a text that starts with a newline
    # keeps it.
    return f'<pre class="lane-text">\n{body}</pre>'


LIVE_MIN_TOKENS = (
    16  # the live speedup waits until both lanes have this many tokens: before, it is noise
)


def live_speedup(lane: Lane, vanilla: Lane | None) -> str:
    """A drafting lane's speedup over vanilla as it streams: once both have enough tokens to mean
    something, and for a lane that finished first, nothing until vanilla finishes too (its figure
    would drift while it waits)."""
    if vanilla is None or not lane.tokens:
        return ""
    if lane.done is not None and vanilla.done is None:
        return "speedup when vanilla finishes"
    if lane.done is None and min(lane.tokens, vanilla.tokens) < LIVE_MIN_TOKENS:
        return f"speedup after {LIVE_MIN_TOKENS} tokens"
    if vanilla.tokens_per_second <= 0:
        return ""
    return f"{lane.tokens_per_second / vanilla.tokens_per_second:.2f}x vanilla by the clock"


def lane_stats(lane: Lane, vanilla: Lane | None) -> str:
    forwards = lane.stats.target_forwards if lane.done else lane.steps
    parts = [
        f"<b>{lane.clock_s:.2f} s</b>",
        count(lane.tokens, "token"),
        f"<b>{lane.tokens_per_second:.1f} tok/s</b>",
        count(forwards, "target forward"),
    ]
    if lane.method != "vanilla":
        # The figure no other job on the machine moves leads (vanilla's is 1); the clock's follows
        # it.
        if forwards:
            parts.append(f"<b>{lane.tokens / forwards:.2f} tokens/forward</b>")
        parts.append(live_speedup(lane, vanilla))
        if lane.drafted:
            parts.append(f"{lane.accepted / lane.drafted:.0%} accepted")
    state = "done" if lane.done else "running"
    return (
        f'<div class="lane-stats {state}">' + " · ".join(part for part in parts if part) + "</div>"
    )


def lane_parts(lanes: dict[str, Lane], method: str, colour: bool, context: str = "") -> list[str]:
    """A lane's text box and its stats line ("" and "" for a lane not in this race)."""
    lane = lanes.get(method)
    if lane is None:
        return ["", ""]
    return [
        lane_html(lane, colour and method != "vanilla", context),
        lane_stats(lane, lanes.get("vanilla")),
    ]


def badge_html(lanes: dict[str, Lane], verdicts: dict[str, OutputVerdict] | None = None) -> str:
    """The race's verdict: identical, a float tie or a rounding boundary (calm: either token is
    the target's own choice, greedy or sampled), or a mismatch (a bug). Differing outputs wait
    for their measured verdicts (None: not measured yet); a differing lane without one counts as
    a mismatch."""
    if any(lane.done is None for lane in lanes.values()):
        return ""
    if "cancelled" in {lane.done.stop_reason for lane in lanes.values()}:
        return '<div class="badge stopped">Stopped.</div>'
    reference = lanes["vanilla"].done.token_ids
    differing = [method for method, lane in lanes.items() if lane.done.token_ids != reference]
    if not differing:
        return (
            f'<div class="badge same">Identical outputs: {count(len(reference), "token")}, '
            "token for token.</div>"
        )
    if verdicts is None:
        return ""
    ties = []
    for method in differing:
        verdict = verdicts.get(method)
        if verdict is None:
            at = first_difference(list(lanes[method].done.token_ids), list(reference))
            return (
                '<div class="badge differ">Outputs differ: '
                f"{html.escape(LANE_TITLES[method])} departs from "
                f"vanilla at token {at}. This is a bug.</div>"
            )
        if verdict.kind not in CALM:
            return (
                '<div class="badge differ">Outputs differ: '
                f"{html.escape(explain(verdict, LANE_TITLES[method]))}"
                ". This is a bug.</div>"
            )
        ties.append(f"{LANE_TITLES[method]}: {explain(verdict)}.")
    own = "sample" if verdicts[differing[0]].sampled else "greedy output"
    return (
        f'<div class="badge tie">Each lane is the target\'s own {own}. '
        + html.escape(" ".join(ties))
        + "</div>"
    )


def sampling_line(sampling: dict | None, drawn: bool = False) -> str:
    """How a sampled race drew its tokens, with the seed to repeat it (`drawn`: the race picked the
    seed)."""
    if not sampling:
        return ""
    seed = f"seed {sampling['seed']}" + (
        " (drawn for this race: type it in Seed to run it again)" if drawn else ""
    )
    return (
        f'<div class="sampled-with">Sampled at temperature {sampling["temperature"]:g}, top-p '
        f"{sampling['top_p']:g}, {seed}.</div>"
    )


def expected(method: str, lane: Lane, vanilla: Lane, costs: StepCosts | None):
    """The speedup a drafting lane's own target forwards predict at step costs measured apart from
    this race (`costs`: warm-up and earlier races), after the prompt's prefill, which both lanes pay
    and which a long prompt makes most of a race; and a sentence on why the measured figure differs.
    Returns (speedup or None, sentence)."""
    ratio = costs.ratio(method) if costs else None
    stats, plain = lane.done.stats, vanilla.done.stats
    if not stats.target_forwards or not plain.target_forwards:
        return None, ""
    if ratio is None:
        return None, "no earlier race of this lane on this server to take step costs from yet"
    vanilla_step, step = step_ms(vanilla), step_ms(lane)
    if not vanilla_step or step is None:
        return None, ""  # a stopped lane measured no steps to compare
    prefill = max(0.0, first_step_ms(vanilla) - vanilla_step)
    draft_prefill = lane.events[0].draft_ms if lane.events else 0.0
    value = (prefill + plain.target_forwards * vanilla_step) / (
        prefill + draft_prefill + stats.target_forwards * ratio * vanilla_step
    )
    earlier = "the warm-up" + (
        f" and {count(costs.races - 1, 'earlier race')}" if costs.races > 1 else ""
    )
    return value, (
        f"expected {value:.2f}x = {stats.tokens_per_forward:.2f} tokens per target forward ÷ a "
        f"step costing {ratio:.2f}x a vanilla step ({costs.step_ms[method]:.1f} ms against "
        f"{costs.step_ms['vanilla']:.1f} ms, medians over {earlier}), after the prefill "
        f"({prefill / 1000:.2f} s in both lanes, {draft_prefill / 1000:.2f} s more for the draft). "
        f"In this race a step cost {step / vanilla_step:.2f}x a vanilla one "
        f"({step:.1f} ms against {vanilla_step:.1f} ms)"
    )


SOURCE_WORDS = {
    "draft": "by the draft model",
    "prompt": "by lookup",
    "pool": "from pool phrases",
    "target": "the target's own",
}


def sources_line(lane: Lane) -> str:
    """Where a drafting lane's tokens came from, every source named, none left out (a zero says so
    too)."""
    counts = {source: 0 for source in SOURCE_WORDS}
    for token in lane.committed:
        counts[token.source.value] += 1
    return ", ".join(f"{counts[source]} {words}" for source, words in SOURCE_WORDS.items())


COLUMNS = (
    "lane",
    "target forwards",
    "tokens/forward",
    "speedup (clock)",
    "expected",
    "tok/s",
    "seconds",
    "tokens",
    "accepted",
)


def busy_line(busy_share: float | None) -> str:
    """A word on a race that met a busy machine (cpu.BusyWatch's starved share), else nothing."""
    if busy_share is None:
        return ""
    return (
        '<p class="busy" role="note">The machine was busy during this race: its steps got '
        f"{busy_share:.0%} of the CPU time their threads could use (another job held cores), "
        "so every lane ran slower and the clock speedup moved with them; the target forwards did "
        "not.</p>"
    )


def summary_row(
    method: str, lane: Lane, vanilla: Lane, costs: StepCosts | None
) -> tuple[str, float, str]:
    """A lane's row of the summary table, its clock speedup over vanilla, and why its measured
    speedup differs from the expected one ("" for vanilla, or with no expected figure)."""
    stats, plain = lane.done.stats, vanilla.done.stats
    speedup = stats.tokens_per_second / plain.tokens_per_second if plain.tokens_per_second else 0
    predicted, why = expected(method, lane, vanilla, costs) if method != "vanilla" else (None, "")
    cells = [
        LANE_TITLES[method],
        str(stats.target_forwards),
        f"{stats.tokens_per_forward:.2f}",
        f"{speedup:.2f}x",
        f"{predicted:.2f}x" if predicted is not None else "-",
        f"{stats.tokens_per_second:.1f}",
        f"{stats.seconds:.2f}",
        str(stats.new_tokens),
        f"{stats.acceptance_rate:.0%}" if method != "vanilla" else "-",
    ]
    row = (
        "<tr>"
        + "".join(
            f'<td data-label="{name}">{html.escape(c)}</td>' for name, c in zip(COLUMNS, cells)
        )
        + "</tr>"
    )
    return row, speedup, why


def forwards_line(vanilla, fewer: list[str]) -> str:
    """The target forwards each lane took, beside vanilla's; nothing without a drafting lane that
    took any."""
    if not fewer:
        return ""
    return (
        f'<p class="forwards">Target forwards: vanilla {vanilla.target_forwards}, '
        f"{', '.join(fewer)}. "
        "A count no other job on the machine can change; the clock speedup also depends on what "
        "each forward costs here and on what else the machine is doing.</p>"
    )


def summary_html(
    lanes: dict[str, Lane], costs: StepCosts | None = None, busy_share: float | None = None
) -> str:
    """The finished race in a table: the forward count, which no load on the machine changes, beside
    the clock speedup, which it does, and the speedup predicted from this race's acceptance at step
    costs measured apart from it (`costs`), with why the measured one differs; busy_share: the race
    met a busy machine."""
    if not lanes or any(lane.done is None for lane in lanes.values()):
        return ""
    vanilla = lanes["vanilla"].done.stats
    rows, notes, fewer = [], [], []
    for method, lane in lanes.items():
        s = lane.done.stats
        row, speedup, why = summary_row(method, lane, lanes["vanilla"], costs)
        rows.append(row)
        if method != "vanilla" and s.target_forwards:
            fewer.append(
                f"{html.escape(LANE_TITLES[method])} {s.target_forwards} "
                f"(<b>{vanilla.target_forwards / s.target_forwards:.2f}x fewer</b>)"
            )
        if method != "vanilla":
            notes.append(
                f"<li><b>{html.escape(LANE_TITLES[method])}</b>'s {count(s.new_tokens, 'token')}: "
                f"{html.escape(sources_line(lane))}.</li>"
            )
        if why:
            busy = "; this race met a busy machine" if busy_share is not None else ""
            notes.append(
                f"<li><b>{html.escape(LANE_TITLES[method])}</b>: measured {speedup:.2f}x; "
                f"{html.escape(why)}{busy}.</li>"
            )
    head = "".join(f"<th>{h}</th>" for h in COLUMNS)
    note = f'<ul class="why">{"".join(notes)}</ul>' if notes else ""
    return (
        f"{forwards_line(vanilla, fewer)}{busy_line(busy_share)}"
        f'<div class="summary-wrap"><table class="summary"><thead><tr>{head}'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>{note}"
    )


def api_result(lanes: dict[str, Lane]) -> dict:
    out = {}
    for method, lane in lanes.items():
        done = lane.done
        out[method] = {
            "text": done.text if done else "".join(t.text for t in lane.committed),
            "token_ids": list(done.token_ids) if done else [t.id for t in lane.committed],
            "stop_reason": done.stop_reason if done else None,
            "stats": done.stats.to_dict() if done else None,
        }
    return out


def race_log_line(lanes: dict[str, Lane]) -> str:
    return ", ".join(
        f"{m} {lane.tokens} tokens {lane.done.stop_reason if lane.done else 'unfinished'} "
        f"{lane.clock_s:.2f} s"
        for m, lane in lanes.items()
    )
