"""The step inspector: what the target verified in one forward of the Ouroboros lane, the paper's
figure for the viewer's own prompt. The trunk and each branch with its source and where it hangs,
the path the target walked, the rejected tail and the target's own token, with the step's draft and
verify milliseconds."""

from __future__ import annotations

import html
import math

from ouroboros_core.events import Source, StepEvent, Token
from ouroboros_core.race import Lane

SOURCE_NAMES = {
    Source.DRAFT: "draft model",
    Source.POOL: "pool phrase",
    Source.PROMPT: "lookup",
    Source.TARGET: "the target",
}
CONTEXT_CHARS = 80  # how much of the text before the step is shown


def chip(token: Token, state: str) -> str:
    """One token: coloured by its source, marked by what the target made of it (kept, rejected, not
    on the walked path, the target's own)."""
    text = html.escape(token.text).replace("\n", "↵").replace(" ", "·") or "∅"
    titles = {
        "kept": "kept by the target",
        "rejected": "rejected by the target",
        "unwalked": "verified in the same forward, not on the path the target walked",
        "own": "the target's own token",
    }
    return (
        f'<span class="chip tok-{token.source.value} {state}" '
        f'title="{SOURCE_NAMES[token.source]}: {titles[state]}">{text}</span>'
    )


def sources_of(tokens) -> str:
    names = []
    for token in tokens:
        if SOURCE_NAMES[token.source] not in names:
            names.append(SOURCE_NAMES[token.source])
    return " + ".join(names) or "-"


def trunk_row(step: StepEvent) -> str:
    kept = step.trunk_accepted
    chips = [chip(t, "kept" if i < kept else "rejected") for i, t in enumerate(step.trunk)]
    return (
        f'<tr class="trunk"><th>trunk</th><td>{sources_of(step.trunk)}</td>'
        f"<td>the text so far</td><td>{''.join(chips) or '<i>nothing drafted</i>'}</td></tr>"
    )


def branch_rows(step: StepEvent) -> list[str]:
    rows = []
    for b, (branch, at) in enumerate(zip(step.branches, step.attach)):
        if b == step.branch:
            accepted = len(step.accepted) - step.trunk_accepted
            chips = [chip(t, "kept" if i < accepted else "rejected") for i, t in enumerate(branch)]
            name = f"branch {b + 1} (walked)"
        else:
            chips = [chip(t, "unwalked") for t in branch]
            name = f"branch {b + 1}"
        # An empty trunk has no "whole": a branch hanging there follows the text so far.
        where = (
            "the text so far"
            if at == 0
            else "the whole trunk"
            if at == len(step.trunk)
            else f"trunk token {at}"
        )
        rows.append(
            f'<tr class="branch{" walked" if b == step.branch else ""}"><th>{name}</th>'
            f"<td>{sources_of(branch)}</td><td>{where}</td><td>{''.join(chips)}</td></tr>"
        )
    return rows


# Why a step added no token of the target's own, by how the race ended (its last step).
ENDED_BY = {
    "eos": "none: the end-of-turn token it kept ended the answer",
    "max_new_tokens": "none: the answer reached its token limit",
}


def no_own_token(lane: Lane, number: int) -> str:
    """Why step `number` of the lane has no token of the target's own: its last step ended the
    answer, on an end token the target kept or at the token limit."""
    reason = lane.done.stop_reason if lane.done and number == len(lane.events) else None
    return f"<i>{ENDED_BY.get(reason, 'none: a limit ended the step')}</i>"


def step_html(lane: Lane, number: int) -> str:
    """Step `number` (1-based) of a finished lane's recorded events."""
    if not lane.events:
        return '<div class="inspector empty">Run a race to inspect its steps.</div>'
    number = min(max(int(number), 1), len(lane.events))
    step = lane.events[number - 1]
    before = "".join(t.text for event in lane.events[: number - 1] for t in event.committed)
    context = ("…" if len(before) > CONTEXT_CHARS else "") + html.escape(before[-CONTEXT_CHARS:])
    fed = 1 + len(step.trunk) + sum(map(len, step.branches))
    landed = len(step.committed)
    head = (
        f'<div class="step-head"><b>Step {number} of {len(lane.events)}</b> · drafted in '
        f"{step.draft_ms:.1f} ms · verified in {step.verify_ms:.1f} ms, one target forward "
        f"over {fed} token{'s' if fed > 1 else ''} · "
        f"<b>{landed} token{'s' if landed != 1 else ''} landed</b></div>"
    )
    table = (
        '<table class="tree"><thead><tr><th>candidate</th><th>from</th><th>hangs after</th>'
        "<th>tokens</th></tr></thead><tbody>"
        + trunk_row(step)
        + "".join(branch_rows(step))
        + "</tbody></table>"
    )
    own = chip(step.target_token, "own") if step.target_token else no_own_token(lane, number)
    walked = "".join(chip(t, "kept") for t in step.accepted) + own
    rejected = "".join(chip(t, "rejected") for t in step.rejected) or "<i>nothing</i>"
    path = (
        f'<div class="walk"><span class="what">The target walked:</span> {walked}</div>'
        f'<div class="walk"><span class="what">Rejected on that path:</span> {rejected}</div>'
    )
    return (
        f'<div class="inspector">{head}<pre class="step-context">{context}'
        f'<span class="here">▌</span></pre>{table}{path}</div>'
    )


def step_view(lane: Lane, number) -> str:
    """step_html for a number from the page as it came (the slider's box takes anything typed): one
    outside the race's steps gets a sentence in the inspector instead of Gradio's toast and a
    traceback in the log."""
    if not lane.events:
        return step_html(lane, 1)
    whole = (
        not isinstance(number, bool)
        and isinstance(number, (int, float))
        and math.isfinite(number)
        and number == int(number)
    )
    if not whole or not 1 <= number <= len(lane.events):
        return (
            f'<div class="inspector refused">Step must be a whole number from 1 to '
            f"{len(lane.events)} (this race's Ouroboros steps), got "
            f"{html.escape(repr(number))}.</div>"
        )
    return step_html(lane, int(number))


def best_step(lane: Lane) -> int:
    """The step to open first: the one that landed the most tokens (the first of them)."""
    if not lane.events:
        return 1
    return max(range(len(lane.events)), key=lambda i: (len(lane.events[i].committed), -i)) + 1


def replayable(lanes: dict[str, Lane] | None) -> bool:
    """Whether Replay has something to show: a race whose Ouroboros lane took a step."""
    lane = lanes.get("ouroboros") if lanes else None
    return lane is not None and bool(lane.events)
