"""The page's rendering as pure functions of race lanes: escaping, colouring, the cursor, stats,
the badge, the summary and the chart's data. No server, no model: lanes are built from hand-made
events."""

from __future__ import annotations

import re
from dataclasses import asdict

from ouroboros_core import OuroborosConfig
from ouroboros_core.events import DoneEvent, Source, Stats, StepEvent, Token
from ouroboros_core.race import Lane
from ui.chart import chart_svg, nice_ticks
from ui.calibration import StepCosts
from ui.page import pair_settings
from ui.render import (
    LIVE_MIN_TOKENS,
    badge_html,
    lane_html,
    lane_parts,
    lane_stats,
    legend_html,
    prompt_tail,
    race_log_line,
    sampling_line,
    summary_html,
)


def step(index, accepted, target, rejected=(), elapsed=0.1):
    return StepEvent(
        index=index,
        drafted=tuple(accepted) + tuple(rejected),
        branches=(),
        accepted=tuple(accepted),
        rejected=tuple(rejected),
        target_token=target,
        draft_ms=0.0,
        verify_ms=100.0,  # as done()'s stats count it: 0.1 s a step, all verifying
        elapsed_s=elapsed,
    )


def done(ids, text, seconds, forwards, drafted=0, accepted=0, reason="max_new_tokens"):
    stats = Stats(
        new_tokens=len(ids),
        target_forwards=forwards,
        drafted_tokens=drafted,
        accepted_tokens=accepted,
        seconds=seconds,
        draft_seconds=0.0,
        verify_seconds=seconds,
    )
    return DoneEvent(tuple(ids), text, stats, reason)


def tok(i, text, source=Source.TARGET):
    return Token(i, text, source)


def race_lanes(ouroboros_ids=(1, 2, 3), reason="max_new_tokens"):
    vanilla, ouroboros = Lane("vanilla"), Lane("ouroboros")
    for i, (n, text) in enumerate(((1, "<b>"), (2, " x"), (3, "\n"))):
        vanilla.apply(step(i, (), tok(n, text), elapsed=0.1 * (i + 1)))
    vanilla.apply(done((1, 2, 3), "<b> x\n", 0.3, 3, reason=reason))
    ouroboros.apply(
        step(
            0,
            (tok(1, "<b>", Source.PROMPT), tok(2, " x", Source.DRAFT)),
            tok(3, "\n"),
            rejected=(tok(9, "y", Source.DRAFT),),
            elapsed=0.1,
        )
    )
    ouroboros.apply(done(ouroboros_ids, "<b> x\n", 0.1, 1, drafted=3, accepted=2, reason=reason))
    return {"vanilla": vanilla, "ouroboros": ouroboros}


def test_lane_text_is_escaped_and_coloured_by_source():
    lane = Lane("ouroboros")
    lane.apply(
        step(
            0,
            (tok(1, "<b>", Source.PROMPT),),
            tok(2, " & y"),
            rejected=(tok(9, "<i>", Source.DRAFT),),
        )
    )
    html = lane_html(lane, colour=True)
    assert '<span class="tok tok-prompt">&lt;b&gt;</span>' in html
    assert '<span class="tok tok-target"> &amp; y</span>' in html
    assert '<s class="tok-rejected" title="drafted, rejected by the target">&lt;i&gt;</s>' in html
    assert html.endswith('<span class="cursor">▌</span></pre>'), "a running lane shows its cursor"
    plain = lane_html(lane, colour=False)
    assert "tok-" not in plain and "&lt;b&gt; &amp; y" in plain


def test_a_finished_lane_has_no_cursor_and_no_rejected_tail():
    lanes = race_lanes()
    html = lane_html(lanes["ouroboros"], colour=True)
    assert "cursor" not in html and "tok-rejected" not in html


def test_stats_give_speedup_tokens_per_forward_and_acceptance():
    lanes = race_lanes()
    text = lane_stats(lanes["ouroboros"], lanes["vanilla"])
    assert (
        "3.00x vanilla by the clock" in text
        and "<b>3.00 tokens/forward</b>" in text
        and "67% accepted" in text
    )
    assert text.index("tokens/forward") < text.index("by the clock")  # the steady figure leads
    assert "vanilla" not in lane_stats(lanes["vanilla"], lanes["vanilla"]).replace("lane-stats", "")


def test_lane_parts_of_a_missing_lane_are_empty_and_vanilla_is_never_coloured():
    lanes = race_lanes()
    assert lane_parts(lanes, "speculative", True) == ["", ""]
    lanes["speculative"] = lanes.pop("ouroboros")
    lanes["speculative"].method = "speculative"
    html, _ = lane_parts(lanes, "speculative", True)
    # its title is in its own column
    assert html.startswith('<pre class="lane-text">') and "tok-draft" in html
    assert "tok-" not in lane_parts(lanes, "vanilla", True)[0], "the vanilla lane is never coloured"


def test_badge_names_identical_differing_and_stopped_races():
    assert "Identical outputs: 3 tokens" in badge_html(race_lanes())
    one = race_lanes()
    for lane in one.values():
        lane.committed = lane.committed[:1]
        lane.done = DoneEvent(lane.done.token_ids[:1], "", lane.done.stats, "max_new_tokens")
    assert "Identical outputs: 1 token," in badge_html(one) and "· 1 token ·" in lane_stats(
        one["vanilla"], None
    )
    assert badge_html(race_lanes(ouroboros_ids=(1, 5, 3))) == "", (
        "a difference waits for its measured verdict"
    )
    differ = badge_html(race_lanes(ouroboros_ids=(1, 5, 3)), {})
    assert "Outputs differ" in differ and "at token 1" in differ and "This is a bug." in differ
    assert "Stopped." in badge_html(race_lanes(reason="cancelled"))
    running = race_lanes()
    running["ouroboros"].done = None
    assert badge_html(running) == "" and summary_html(running) == ""


def table_cells(table: str) -> list[list[str]]:
    """The summary table's rows, each as its cells' contents."""
    rows = re.findall(r"<tr>(.*?)</tr>", table)
    return [re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row) for row in rows]


def check_chart_and_log_line(lanes) -> None:
    """The race's chart, its axis ticks and the line the server logs for it."""
    svg = chart_svg(lanes)
    assert svg.count("<svg") == 2  # the wide drawing and the phone's
    points = re.findall(r'data-lane="ouroboros" points="([^"]*)"', svg)
    # (0 s, 0 tokens) and (0.1 s, 3)
    assert len(points) == 2 and all(len(p.split()) == 2 for p in points)
    assert "<polyline" not in chart_svg({}) and "tick" in chart_svg({})
    assert nice_ticks(17.9) == [0, 5, 10, 15, 20] and nice_ticks(0.31) == [0, 0.1, 0.2, 0.3, 0.4]
    assert nice_ticks(128, 4) == [0, 50, 100, 150] and nice_ticks(0) == [0.0, 1.0]
    assert (
        race_log_line(lanes)
        == "vanilla 3 tokens max_new_tokens 0.30 s, ouroboros 3 tokens max_new_tokens 0.10 s"
    )


def test_summary_table_with_forwards_measured_and_expected_and_the_chart():
    lanes = race_lanes()
    # Step costs measured apart from this race (warm-up, earlier races): an Ouroboros step cost 3x
    # a vanilla one.
    costs = StepCosts({"vanilla": 100.0, "ouroboros": 300.0}, races=4)
    table = summary_html(lanes, costs)
    cells = table_cells(table)
    assert cells[0] == [
        "lane",
        "target forwards",
        "tokens/forward",
        "speedup (clock)",
        "expected",
        "tok/s",
        "seconds",
        "tokens",
        "accepted",
    ]
    assert cells[1] == [
        "Vanilla (target alone)",
        "3",
        "1.00",
        "1.00x",
        "-",
        "10.0",
        "0.30",
        "3",
        "-",
    ]
    # This race's own step cost the same as a vanilla step (0.1 s), so it measured 3.00x; at the
    # calibrated costs its 3 tokens per forward predict 1.00x. The two differ, and the note says
    # which step costs did it.
    assert cells[2] == ["Ouroboros", "1", "3.00", "3.00x", "1.00x", "30.0", "0.10", "3", "67%"]
    assert (
        "measured 3.00x; expected 1.00x = 3.00 tokens per target forward ÷ a step costing 3.00x "
        "a vanilla step (300.0 ms against 100.0 ms, medians over the warm-up and 3 earlier races), "
        "after the prefill (0.00 s in both lanes, 0.00 s more for the draft). "
        "In this race a step cost 1.00x a vanilla one (100.0 ms against 100.0 ms)"
    ) in table
    # The forward count, which no machine noise moves, is the lanes' own target_forwards.
    assert "Target forwards: vanilla 3, Ouroboros 1 (<b>3.00x fewer</b>)" in table
    assert '<td data-label="target forwards">1</td>' in table  # the phone's cards name each figure
    # Where the tokens came from, every source named, a zero too (the pool's colour is rare by
    # default).
    assert (
        "Ouroboros</b>'s 3 tokens: 1 by the draft model, 1 by lookup, 0 from pool phrases, 1 the "
        "target&#x27;s own."
    ) in table
    uncalibrated = summary_html(lanes, None)
    assert (
        "no earlier race of this lane on this server" in uncalibrated
        and '<td data-label="expected">-</td>' in uncalibrated
    )
    check_chart_and_log_line(lanes)


def test_a_float_tie_is_told_calmly_and_a_measured_mismatch_with_its_gap():
    from ouroboros_core.verdict import OutputVerdict

    lanes = race_lanes(ouroboros_ids=(1, 5, 3))
    tie = badge_html(lanes, {"ouroboros": OutputVerdict("float tie", 1, 0.03125, "bfloat16")})
    assert tie.startswith('<div class="badge tie">') and "bug" not in tie
    assert "identical up to token 1" in tie and "within bfloat16 rounding (gap 0.03125)" in tie
    mismatch = badge_html(lanes, {"ouroboros": OutputVerdict("mismatch", 1, 2.5, "float32")})
    assert (
        'class="badge differ"' in mismatch
        and "Ouroboros departs from the target&#x27;s greedy output at token 1" in mismatch
        and "score gap 2.5, not a rounding tie" in mismatch
    )
    assert "This is a bug." in mismatch


def test_a_text_that_starts_with_a_newline_keeps_it_in_both_lanes():
    # The HTML parser drops one newline right after <pre>: plain and coloured lanes must lose the
    # same one.
    lane = Lane("ouroboros")
    lane.apply(step(0, (), tok(1, "\nx")))
    for colour in (False, True):
        assert lane_html(lane, colour).startswith('<pre class="lane-text">\n'), colour
    assert lane_html(lane, False).startswith('<pre class="lane-text">\n\nx')


def test_the_token_axis_covers_every_count_in_whole_steps():
    """For 11 or 12 tokens a 2.5 step left whole ticks 0, 5, 10 and the traces ran above the
    chart's top."""
    for count in range(1, 600):
        for most in (4, 5):
            ticks = nice_ticks(count, most, whole=True)
            assert ticks[-1] >= count and all(tick == int(tick) for tick in ticks), (count, ticks)
            assert len(ticks) <= most + 1, (count, ticks)
    assert nice_ticks(12, 5, whole=True) == [0, 5, 10, 15]


def streaming_lanes(ouroboros_tokens: int, vanilla_tokens: int, ouroboros_done: bool = False):
    """A race in progress: each lane one token a step, Ouroboros 0.01 s a step and
    vanilla 0.03 s."""
    lanes = {"vanilla": Lane("vanilla"), "ouroboros": Lane("ouroboros")}
    for method, n, dt in (("vanilla", vanilla_tokens, 0.03), ("ouroboros", ouroboros_tokens, 0.01)):
        for i in range(n):
            lanes[method].apply(step(i, (), tok(i, "x"), elapsed=dt * (i + 1)))
    if ouroboros_done:
        lanes["ouroboros"].apply(
            done(
                tuple(range(ouroboros_tokens)),
                "x" * ouroboros_tokens,
                0.01 * ouroboros_tokens,
                ouroboros_tokens,
            )
        )
    return lanes


def test_the_live_speedup_waits_for_enough_tokens_and_a_finished_lane_figure_holds_still():
    early = streaming_lanes(LIVE_MIN_TOKENS - 1, LIVE_MIN_TOKENS + 5)
    assert f"speedup after {LIVE_MIN_TOKENS} tokens" in lane_stats(
        early["ouroboros"], early["vanilla"]
    )
    assert "by the clock" not in lane_stats(early["ouroboros"], early["vanilla"])
    running = streaming_lanes(LIVE_MIN_TOKENS, LIVE_MIN_TOKENS)
    assert "3.00x vanilla by the clock" in lane_stats(running["ouroboros"], running["vanilla"])
    # Ouroboros finished while vanilla runs on: its line stays the same whatever vanilla does
    # meanwhile.
    lines = {
        lane_stats(
            streaming_lanes(40, n, ouroboros_done=True)["ouroboros"],
            streaming_lanes(40, n, ouroboros_done=True)["vanilla"],
        )
        for n in (20, 25, 33)
    }
    assert len(lines) == 1 and "speedup when vanilla finishes" in lines.pop()
    # The forward count is on every lane, vanilla's too.
    assert f"· {LIVE_MIN_TOKENS} target forwards</div>" in lane_stats(running["vanilla"], None)


def test_each_lane_starts_with_the_prompt_last_line_dimmed():
    assert prompt_tail("import os\n\ndef f(x):\n    ") == "def f(x):\n    "
    assert prompt_tail("def f():\n    return 1\n") == "    return 1\n"
    assert prompt_tail("x") == "x"
    lane = race_lanes()["ouroboros"]
    text = lane_html(lane, True, "def <f>():\n")
    assert text.startswith(
        '<pre class="lane-text">\n<span class="prompt-tail" title="the end of the prompt">def '
        '&lt;f&gt;():\n</span><span class="tok tok-prompt">'
    )


def test_a_sampled_race_names_its_seed_and_says_when_it_was_drawn():
    sampling = {"temperature": 0.8, "top_p": 0.95, "seed": 1234}
    assert "temperature 0.8, top-p 0.95, seed 1234." in sampling_line(sampling)
    drawn = sampling_line(sampling, drawn=True)
    assert "seed 1234 (drawn for this race: type it in Seed to run it again)" in drawn
    assert sampling_line({}) == "" and sampling_line(None) == ""


def test_a_race_that_met_a_busy_machine_says_so_and_its_forwards_lead_either_way():
    lanes = race_lanes()
    costs = StepCosts({"vanilla": 100.0, "ouroboros": 300.0}, races=4)
    quiet, busy = summary_html(lanes, costs), summary_html(lanes, costs, busy_share=0.55)
    assert "busy" not in quiet
    assert "The machine was busy during this race: its steps got 55% of the CPU time" in busy
    assert "measured 3.00x; expected 1.00x" in busy and "this race met a busy machine." in busy
    # The same leading figure, first, whether the machine was busy or not.
    for table in (quiet, busy):
        assert table.startswith(
            '<p class="forwards">Target forwards: vanilla 3, Ouroboros 1 (<b>3.00x fewer</b>)'
        )


def pair_legend(preset: str, **knobs) -> str:
    """The legend for a race on a preset's CPU settings (what its page starts with), some knobs
    moved."""
    from ouroboros_core.models import presets

    pair = type("Pair", (), {"defaults": presets()[preset].settings["cpu"]})()
    return legend_html({**pair_settings(pair), **knobs})


def test_the_legend_names_only_the_sources_a_race_can_show():
    # The default pair reads no pool (no branches, no draft candidates): no pool colour to explain.
    default = pair_legend("smollm2")
    assert "tok-pool" not in default and "pool phrase" not in default
    assert all(f"tok-{kind}" in default for kind in ("draft", "prompt", "target"))
    # one branch, no lookahead window
    assert "pool phrase (rare with window W at 0)" in pair_legend("demo")
    assert ">accepted from a pool phrase</span>" in pair_legend("demo", window=4)
    assert "tok-pool" in pair_legend("smollm2", branches=1) and "tok-pool" not in pair_legend(
        "demo", branches=0
    )
    # the engine's own defaults' draft candidates read it
    engine_defaults = asdict(OuroborosConfig())
    assert engine_defaults["draft_candidates"] > 0
    assert "tok-pool" in legend_html({**engine_defaults, "branches": 0})
    assert "tok-prompt" not in pair_legend("smollm2", lookup=0)  # nothing looked up, nothing pooled
    # as a refused page sends it: nothing in play
    assert "tok-pool" not in pair_legend("smollm2", branches=-1)
