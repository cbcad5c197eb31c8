"""The decode loop at its own boundary, with a stub drafter instead of a real one: what it commits,
the cache it keeps after a walked branch, and the step events it yields."""

from __future__ import annotations

import pytest

from ouroboros_core import load_engine
from ouroboros_core.decode import DecodeLoop
from ouroboros_core.events import DoneEvent, Source, StepEvent
from ouroboros_core.proposal import Branches, Proposal
from ouroboros_core.sampling import Sampler

PROMPT = 'def count_words(text):\n    """Count the words in text."""\n'


@pytest.fixture(scope="module")
def engine():
    return load_engine("demo", device="cpu", dtype="float32")


class Oracle:
    """Knows the target's own answer: proposes a trunk of its next token and a wrong one, and a
    branch after the first that holds the next two right ones (walked in place of the wrong)."""

    def __init__(self, answer: list[int], prompt_length: int, vocab: int):
        self.answer, self.prompt_length, self.vocab = answer, prompt_length, vocab
        self.observed = 0

    def start(self, prompt_ids: list[int]) -> None:
        pass

    def propose(self, committed: list[int], limit: int) -> Proposal:
        done = len(committed) - self.prompt_length
        right = self.answer[done : done + 3][:limit]
        if len(right) < 3:
            return Proposal()
        wrong = (right[1] + 1) % self.vocab
        proposal = Proposal(right[:1] + [wrong], [Source.DRAFT] * 2)
        proposal.add(Branches("oracle", [right[1:]], [Source.PROMPT], [1]))
        return proposal

    def observe(self, outcome) -> None:
        self.observed += 1


def test_a_walked_branch_moves_into_the_cache_and_every_token_is_the_targets(engine):
    answer = engine.generate(PROMPT, "vanilla", 40).token_ids
    ids = engine.encode(PROMPT)
    oracle = Oracle(answer, len(ids), engine.target.config.vocab_size)
    events = list(DecodeLoop(engine, oracle, Sampler()).run(ids, 40, None))
    steps, done = events[:-1], events[-1]
    assert isinstance(done, DoneEvent) and all(isinstance(e, StepEvent) for e in steps)
    # Wrong KV rows after the branch moved (or a branch token credited to the trunk) would send
    # the target elsewhere within a few steps.
    assert list(done.token_ids) == list(answer)
    full = [s for s in steps if s.drafted]
    # every step but the one that ends the request is observed
    assert len(full) >= 8 and oracle.observed == len(steps) - 1
    for step in full:
        # the trunk's first token, then the branch's two, then the target's own
        assert step.trunk_accepted == 1 and step.branch == 0
        assert [t.source for t in step.accepted] == [Source.DRAFT, Source.PROMPT, Source.PROMPT]
        assert len(step.rejected) == 0 and step.target_token is not None
        assert step.attach == (1,) and len(step.trunk) == 2
    assert done.stats.target_forwards == len(steps) < len(answer) / 3
