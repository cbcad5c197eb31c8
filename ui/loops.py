"""Whether an answer repeats itself. A small model loops ("a leaf's fate is determined" sixteen
times), and lookup copies a loop at almost no cost, so such a race's speedup says more about the
loop than about the method: the page says so under the verdict."""

from __future__ import annotations

from ouroboros_core.race import Lane

# A run of this many tokens written earlier in the same answer is a repeat, not a common phrase.
LOOP_RUN = 8
# The share of the answer's tokens that repeat its own earlier text above which the page says so.
LOOP_SHARE = 0.3


def repeated_share(token_ids: list[int], run: int = LOOP_RUN) -> float:
    """The share of the tokens that end a run of `run` tokens the text already held earlier."""
    seen: set[tuple[int, ...]] = set()
    repeated = 0
    for end in range(run, len(token_ids) + 1):
        window = tuple(token_ids[end - run : end])
        repeated += window in seen
        seen.add(window)
    return repeated / len(token_ids) if token_ids else 0.0


def loop_note(lanes: dict[str, Lane]) -> str:
    """A note under a finished race whose answer repeats itself (LOOP_SHARE of its tokens or more),
    with the share of Ouroboros's tokens lookup copied; nothing for a normal answer."""
    lane = lanes.get("ouroboros")
    if lane is None or lane.done is None or not lane.committed:
        return ""
    share = repeated_share(list(lane.done.token_ids))
    if share < LOOP_SHARE:
        return ""
    copied = sum(token.source.value == "prompt" for token in lane.committed) / lane.tokens
    return (
        f'<p class="loop-note">The answer repeats itself: {share:.0%} of its tokens '
        f"repeat its own earlier text, and lookup copied {copied:.0%} of Ouroboros's tokens. A "
        "loop is cheap to copy, so this speedup says more about the loop than about the method."
        "</p>"
    )
