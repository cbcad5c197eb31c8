"""Rendering: pure functions from race lanes (ouroboros_core.race.Lane) to the page's HTML, Markdown and chart
data. No Gradio here, so each piece is tested on its own and the handlers only choose what to redraw."""

from __future__ import annotations

import html

from ouroboros_core.race import Lane
from ouroboros_core.theory import draft_cost_ratio, expected_speedup, expected_step_speedup, expected_tokens_per_forward
from ouroboros_core.verdict import CALM, OutputVerdict, explain, first_difference

LANE_TITLES = {"vanilla": "Vanilla (target alone)", "speculative": "Speculative (draft model)",
               "ouroboros": "Ouroboros"}
TIMING_NOTE = ("Each lane's clock counts only its own compute: the lanes take turns on the one device, the "
               "lane that is behind on its own clock always goes next, and every clock reads "
               "time.perf_counter (device synchronised) around its own steps, as if it ran alone.")
LEGEND = ('<div class="legend">'
          '<span class="tok tok-draft">accepted from the draft model</span>'
          '<span class="tok tok-pool">accepted from a pool phrase</span>'
          '<span class="tok tok-prompt">accepted by prompt lookup</span>'
          '<span class="tok tok-target">the target\'s own token</span>'
          '<s class="tok-rejected">drafted, rejected</s></div>')


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


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
    # HTML drops one newline right after <pre>: give it one, so a text that starts with a newline keeps it.
    return f'<pre class="lane-text">\n{body}</pre>'


def lane_stats(lane: Lane, vanilla: Lane | None) -> str:
    parts = [f"<b>{lane.clock_s:.2f} s</b>", count(lane.tokens, "token"), f"<b>{lane.tokens_per_second:.1f} tok/s</b>"]
    if lane.method != "vanilla":
        if vanilla is not None and vanilla.tokens_per_second > 0 and lane.tokens:
            parts.append(f"<b>{lane.tokens_per_second / vanilla.tokens_per_second:.2f}x</b> vanilla")
        if lane.steps:
            parts.append(f"{lane.tokens / lane.steps:.2f} tokens/forward")
        if lane.drafted:
            parts.append(f"{lane.accepted / lane.drafted:.0%} accepted")
    state = "done" if lane.done else "running"
    return f'<div class="lane-stats {state}">' + " · ".join(parts) + "</div>"


def lane_parts(lanes: dict[str, Lane], method: str, colour: bool) -> list[str]:
    """A lane's text box and its stats line ("" and "" for a lane not in this race)."""
    lane = lanes.get(method)
    if lane is None:
        return ["", ""]
    return [lane_html(lane, colour and method != "vanilla"), lane_stats(lane, lanes.get("vanilla"))]


def badge_html(lanes: dict[str, Lane], verdicts: dict[str, OutputVerdict] | None = None) -> str:
    """The race's verdict: identical, a float tie or a rounding boundary (calm: either token is the target's own
    choice, greedy or sampled), or a mismatch (a bug). Differing outputs wait for their measured verdicts (None: not measured yet); a differing
    lane without one counts as a mismatch."""
    if any(lane.done is None for lane in lanes.values()):
        return ""
    if "cancelled" in {lane.done.stop_reason for lane in lanes.values()}:
        return '<div class="badge stopped">Stopped.</div>'
    reference = lanes["vanilla"].done.token_ids
    differing = [method for method, lane in lanes.items() if lane.done.token_ids != reference]
    if not differing:
        return f'<div class="badge same">Identical outputs: {count(len(reference), "token")}, token for token.</div>'
    if verdicts is None:
        return ""
    ties = []
    for method in differing:
        verdict = verdicts.get(method)
        if verdict is None:
            at = first_difference(list(lanes[method].done.token_ids), list(reference))
            return (f'<div class="badge differ">Outputs differ: {html.escape(LANE_TITLES[method])} departs from '
                    f"vanilla at token {at}. This is a bug.</div>")
        if verdict.kind not in CALM:
            return (f'<div class="badge differ">Outputs differ: {html.escape(explain(verdict, LANE_TITLES[method]))}'
                    ". This is a bug.</div>")
        ties.append(f"{LANE_TITLES[method]}: {explain(verdict)}.")
    own = "sample" if verdicts[differing[0]].sampled else "greedy output"
    return (f'<div class="badge tie">Each lane is the target\'s own {own}. ' + html.escape(" ".join(ties))
            + "</div>")


def expected(method: str, stats, vanilla, gamma: int) -> tuple[float | None, str]:
    """The speedup this race's own acceptance and step costs predict for a lane, and how it comes about."""
    vanilla_step = vanilla.verify_seconds / vanilla.target_forwards if vanilla.target_forwards else 0.0
    if method == "speculative":
        a = stats.per_token_acceptance
        c = draft_cost_ratio(stats.draft_seconds, stats.drafted_tokens, stats.verify_seconds, stats.target_forwards)
        value = expected_speedup(a, gamma, c)
        return value, (f"each drafted token stands with chance a = {a:.2f}; with gamma = {gamma} drafts per step "
                       f"and a draft forward costing c = {c:.2f} of a target forward, (1 - a^{gamma + 1}) / (1 - a) "
                       f"= {expected_tokens_per_forward(a, gamma):.2f} tokens per step ÷ (gamma·c + 1) = "
                       f"{value:.2f}x")
    if method == "ouroboros" and stats.target_forwards and vanilla_step > 0:
        step = (stats.draft_seconds + stats.verify_seconds) / stats.target_forwards
        value = expected_step_speedup(stats.tokens_per_forward, step, vanilla_step)
        return value, (f"{stats.tokens_per_forward:.2f} tokens per target forward ÷ a step costing "
                       f"{step / vanilla_step:.2f}x a vanilla step (drafting "
                       f"{stats.draft_seconds / stats.target_forwards / vanilla_step:.2f}x + verifying "
                       f"{stats.verify_seconds / stats.target_forwards / vanilla_step:.2f}x) = {value:.2f}x")
    return None, ""


def summary_html(lanes: dict[str, Lane], gamma: int = 4) -> str:
    """The finished race in a table (scrolls sideways on a phone, never wraps a number), with the speedup each
    drafting lane's own acceptance and step costs predict beside the measured one, and why.
    gamma: the speculative lane's draft length."""
    if not lanes or any(lane.done is None for lane in lanes.values()):
        return ""
    vanilla = lanes["vanilla"].done.stats
    rows, notes = [], []
    for method, lane in lanes.items():
        s = lane.done.stats
        speedup = s.tokens_per_second / vanilla.tokens_per_second if vanilla.tokens_per_second else 0
        predicted, why = expected(method, s, vanilla, gamma)
        cells = [LANE_TITLES[method], f"{speedup:.2f}x", f"{predicted:.2f}x" if predicted is not None else "-",
                 f"{s.tokens_per_second:.1f}", f"{s.seconds:.2f}", str(s.new_tokens), f"{s.tokens_per_forward:.2f}",
                 f"{s.acceptance_rate:.0%}" if method != "vanilla" else "-"]
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
        if why:
            notes.append(f"<li><b>{html.escape(LANE_TITLES[method])}</b>: {html.escape(why)}; measured "
                         f"{speedup:.2f}x.</li>")
    head = "".join(f"<th>{h}</th>" for h in ("lane", "speedup", "expected", "tok/s", "seconds", "tokens",
                                            "tokens/forward", "accepted"))
    note = (f'<ul class="why">{"".join(notes)}</ul><p class="why-note">Expected: what this race\'s own '
            "acceptance and per-step costs predict. The measured speedup also pays once per request for the "
            "prompt's prefill and the draft's set-up, and per step for the loop's own work.</p>") if notes else ""
    return (f'<div class="summary-wrap"><table class="summary"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>{note}')


def api_result(lanes: dict[str, Lane]) -> dict:
    out = {}
    for method, lane in lanes.items():
        done = lane.done
        out[method] = {"text": done.text if done else "".join(t.text for t in lane.committed),
                       "token_ids": list(done.token_ids) if done else [t.id for t in lane.committed],
                       "stop_reason": done.stop_reason if done else None,
                       "stats": done.stats.to_dict() if done else None}
    return out


def race_log_line(lanes: dict[str, Lane]) -> str:
    return ", ".join(f"{m} {lane.tokens} tokens {lane.done.stop_reason if lane.done else 'unfinished'} "
                     f"{lane.clock_s:.2f} s" for m, lane in lanes.items())
