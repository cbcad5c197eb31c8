"""The page's rendering as pure functions of race lanes: escaping, colouring, the cursor, stats, the badge,
the summary and the chart's data. No server, no model: lanes are built from hand-made events."""

from __future__ import annotations

import re

from ouroboros_core.events import DoneEvent, Source, Stats, StepEvent, Token
from ouroboros_core.race import Lane
from ui.chart import chart_svg, nice_ticks
from ui.render import badge_html, lane_html, lane_parts, lane_stats, race_log_line, summary_html


def step(index, accepted, target, rejected=(), elapsed=0.1):
    return StepEvent(index=index, drafted=tuple(accepted) + tuple(rejected), branches=(), accepted=tuple(accepted),
                     rejected=tuple(rejected), target_token=target, draft_ms=1.0, verify_ms=2.0, elapsed_s=elapsed)


def done(ids, text, seconds, forwards, drafted=0, accepted=0, reason="max_new_tokens"):
    stats = Stats(new_tokens=len(ids), target_forwards=forwards, drafted_tokens=drafted, accepted_tokens=accepted,
                  seconds=seconds, draft_seconds=0.0, verify_seconds=seconds)
    return DoneEvent(tuple(ids), text, stats, reason)


def tok(i, text, source=Source.TARGET):
    return Token(i, text, source)


def race_lanes(ouroboros_ids=(1, 2, 3), reason="max_new_tokens"):
    vanilla, ouroboros = Lane("vanilla"), Lane("ouroboros")
    for i, (n, text) in enumerate(((1, "<b>"), (2, " x"), (3, "\n"))):
        vanilla.apply(step(i, (), tok(n, text), elapsed=0.1 * (i + 1)))
    vanilla.apply(done((1, 2, 3), "<b> x\n", 0.3, 3, reason=reason))
    ouroboros.apply(step(0, (tok(1, "<b>", Source.PROMPT), tok(2, " x", Source.DRAFT)), tok(3, "\n"),
                         rejected=(tok(9, "y", Source.DRAFT),), elapsed=0.1))
    ouroboros.apply(done(ouroboros_ids, "<b> x\n", 0.1, 1, drafted=3, accepted=2, reason=reason))
    return {"vanilla": vanilla, "ouroboros": ouroboros}


def test_lane_text_is_escaped_and_coloured_by_source():
    lane = Lane("ouroboros")
    lane.apply(step(0, (tok(1, "<b>", Source.PROMPT),), tok(2, " & y"), rejected=(tok(9, "<i>", Source.DRAFT),)))
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
    assert "<b>3.00x</b> vanilla" in text and "3.00 tokens/forward" in text and "67% accepted" in text
    assert "vanilla" not in lane_stats(lanes["vanilla"], lanes["vanilla"]).replace("lane-stats", "")


def test_lane_parts_of_a_missing_lane_are_empty_and_vanilla_is_never_coloured():
    lanes = race_lanes()
    assert lane_parts(lanes, "speculative", True) == ["", ""]
    lanes["speculative"] = lanes.pop("ouroboros")
    lanes["speculative"].method = "speculative"
    html, _ = lane_parts(lanes, "speculative", True)
    assert html.startswith('<pre class="lane-text">') and "tok-draft" in html  # its title is in its own column
    assert "tok-" not in lane_parts(lanes, "vanilla", True)[0], "the vanilla lane is never coloured"


def test_badge_names_identical_differing_and_stopped_races():
    assert "Identical outputs: 3 tokens" in badge_html(race_lanes())
    one = race_lanes()
    for lane in one.values():
        lane.committed = lane.committed[:1]
        lane.done = DoneEvent(lane.done.token_ids[:1], "", lane.done.stats, "max_new_tokens")
    assert "Identical outputs: 1 token," in badge_html(one) and "· 1 token ·" in lane_stats(one["vanilla"], None)
    assert badge_html(race_lanes(ouroboros_ids=(1, 5, 3))) == "", "a difference waits for its measured verdict"
    differ = badge_html(race_lanes(ouroboros_ids=(1, 5, 3)), {})
    assert "Outputs differ" in differ and "at token 1" in differ and "This is a bug." in differ
    assert "Stopped." in badge_html(race_lanes(reason="cancelled"))
    running = race_lanes()
    running["ouroboros"].done = None
    assert badge_html(running) == "" and summary_html(running) == ""


def test_summary_table_with_expected_beside_measured_and_the_chart():
    lanes = race_lanes()
    table = summary_html(lanes)
    rows = re.findall(r"<tr>(.*?)</tr>", table)
    cells = [re.findall(r"<t[dh]>(.*?)</t[dh]>", row) for row in rows]
    assert cells[0] == ["lane", "speedup", "expected", "tok/s", "seconds", "tokens", "tokens/forward", "accepted"]
    assert cells[1] == ["Vanilla (target alone)", "1.00x", "-", "10.0", "0.30", "3", "1.00", "-"]
    # Ouroboros: 3 tokens in its one forward, a step costing 0.1 s like vanilla's: 3.00x expected.
    assert cells[2] == ["Ouroboros", "3.00x", "3.00x", "30.0", "0.10", "3", "3.00", "67%"]
    assert "3.00 tokens per target forward ÷ a step costing 1.00x a vanilla step" in table
    svg = chart_svg(lanes)
    assert svg.count("<svg") == 2  # the wide drawing and the phone's
    points = re.findall(r'data-lane="ouroboros" points="([^"]*)"', svg)
    assert len(points) == 2 and all(len(p.split()) == 2 for p in points)  # (0 s, 0 tokens) and (0.1 s, 3)
    assert "<polyline" not in chart_svg({}) and "tick" in chart_svg({})
    assert nice_ticks(17.9) == [0, 5, 10, 15, 20] and nice_ticks(0.31) == [0, 0.1, 0.2, 0.3, 0.4]
    assert nice_ticks(128, 4) == [0, 50, 100, 150] and nice_ticks(0) == [0.0, 1.0]
    assert race_log_line(lanes) == "vanilla 3 tokens max_new_tokens 0.30 s, ouroboros 3 tokens max_new_tokens 0.10 s"


def test_a_float_tie_is_told_calmly_and_a_measured_mismatch_with_its_gap():
    from ouroboros_core.verdict import OutputVerdict

    lanes = race_lanes(ouroboros_ids=(1, 5, 3))
    tie = badge_html(lanes, {"ouroboros": OutputVerdict("float tie", 1, 0.03125, "bfloat16")})
    assert tie.startswith('<div class="badge tie">') and "bug" not in tie
    assert "identical up to token 1" in tie and "within bfloat16 rounding (gap 0.03125)" in tie
    mismatch = badge_html(lanes, {"ouroboros": OutputVerdict("mismatch", 1, 2.5, "float32")})
    assert 'class="badge differ"' in mismatch and "Ouroboros departs from the target&#x27;s greedy output at token 1" \
        in mismatch and "score gap 2.5, not a rounding tie" in mismatch
    assert "This is a bug." in mismatch


def test_a_text_that_starts_with_a_newline_keeps_it_in_both_lanes():
    # The HTML parser drops one newline right after <pre>: plain and coloured lanes must lose the same one.
    lane = Lane("ouroboros")
    lane.apply(step(0, (), tok(1, "\nx")))
    for colour in (False, True):
        assert lane_html(lane, colour).startswith('<pre class="lane-text">\n'), colour
    assert lane_html(lane, False).startswith('<pre class="lane-text">\n\nx')


def test_the_token_axis_covers_every_count_in_whole_steps():
    """For 11 or 12 tokens a 2.5 step left whole ticks 0, 5, 10 and the traces ran above the chart's top."""
    for count in range(1, 600):
        for most in (4, 5):
            ticks = nice_ticks(count, most, whole=True)
            assert ticks[-1] >= count and all(tick == int(tick) for tick in ticks), (count, ticks)
            assert len(ticks) <= most + 1, (count, ticks)
    assert nice_ticks(12, 5, whole=True) == [0, 5, 10, 15]
