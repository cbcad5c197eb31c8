"""The decode loop end to end on tiny models: lossless greedy output, event invariants, stopping,
cancellation, warm pools, and sampling that keeps the target's own distribution."""

from __future__ import annotations

import math
import threading

import pytest
import torch

import ouroboros_core.engine as engine_module
from conftest import ARCHITECTURES, build_model, noisy_copy, reference_ids
from ouroboros_core import DoneEvent, Engine, Source, StepEvent
from ouroboros_core.engine import TextPieces

PROMPTS = [
    "def add(a, b):\n    return a + b\n",
    "import os\nimport sys\n\nclass Config:\n",
    "# 日本語のコメント 😀 émoji\nvalue = '中文'\n",
]
REPETITIVE_PROMPTS = [
    "x = 1\nx = 1\nx = 1\nx = 1\n",
    "self.a = a\nself.b = b\nself.a = a\nself.b = b\n",
    "for i in range(3):\n    print(i)\nfor i in range(3):\n    print(i)\n",
]
N = 16


@pytest.fixture(scope="module")
def reference(tokenizer):
    """The target's own generate() output, memoised per (model, prompt, max_new_tokens, eos).

    Keyed by the model object (modules hash by identity), not its id(): a model freed by its test could
    hand its id() to the next test's model, which would then be compared with the first one's output.
    """
    memo = {}

    def get(model, prompt, max_new_tokens, eos_token_id=None):
        key = (model, prompt, max_new_tokens, eos_token_id)
        if key not in memo:
            memo[key] = reference_ids(model, tokenizer, prompt, max_new_tokens, eos_token_id)
        return memo[key]

    return get


@pytest.fixture
def verdicts(monkeypatch):
    """Every (trunk, branches, verdict) the loop's acceptance walk produces during the test."""
    seen = []
    original = engine_module.walk_tree

    def recording(trunk, branches, trunk_tokens, branch_tokens, attach=None):
        verdict = original(trunk, branches, trunk_tokens, branch_tokens, attach)
        seen.append((list(trunk), [list(b) for b in branches], verdict))
        return verdict

    monkeypatch.setattr(engine_module, "walk_tree", recording)
    return seen


def ids(tokens):
    return [t.id for t in tokens]


def ids_and_sources(tokens):
    # Drafted tokens carry display text; committed ones carry output pieces, so compare ids and sources.
    return [(t.id, t.source) for t in tokens]


def check_events(result, tokenizer, method: str, max_new_tokens: int) -> None:
    """The invariants every finished stream must satisfy."""
    steps = result.events
    assert all(isinstance(step, StepEvent) for step in steps)
    assert [step.index for step in steps] == list(range(len(steps)))
    output = result.token_ids
    position = 0
    for number, step in enumerate(steps):
        last = number == len(steps) - 1
        committed = step.committed
        assert committed[: len(step.accepted)] == step.accepted
        if step.target_token is not None:
            assert committed[-1] == step.target_token and len(committed) == len(step.accepted) + 1
            assert step.target_token.source == Source.TARGET
        else:
            assert last, "only a step cut short by a limit lacks the target's token"
        # Accepted tokens are the head of the walked path, rejected ones its tail.
        assert ids_and_sources(step.accepted) == ids_and_sources(step.drafted[: len(step.accepted)])
        assert all(t.source != Source.TARGET for t in step.drafted)
        if step.rejected:
            assert step.rejected == step.drafted[len(step.drafted) - len(step.rejected) :]
            assert all(t.text == tokenizer.decode([t.id]) for t in step.drafted)
        if not last:
            assert len(step.accepted) + len(step.rejected) == len(step.drafted)
        assert ids(committed) == output[position : position + len(committed)]
        # A rejected token never appears at its position in the output.
        if step.rejected and position + len(step.accepted) < len(output):
            assert step.rejected[0].id != output[position + len(step.accepted)]
        if method == "vanilla":
            assert step.drafted == () and step.branches == () and len(committed) == 1
        position += len(committed)
        assert step.elapsed_s >= 0 and step.draft_ms >= 0 and step.verify_ms >= 0
    assert position == len(output)
    assert [i for step in steps for i in ids(step.committed)] == output

    pieces = "".join(t.text for step in steps for t in step.committed)
    assert pieces == result.text
    if result.stop_reason != "cancelled":
        assert result.text == tokenizer.decode(output, skip_special_tokens=True)

    stats = result.stats
    assert stats.new_tokens == len(output)
    assert stats.target_forwards == len(steps)
    assert stats.tokens_per_forward == pytest.approx(len(output) / len(steps))
    assert stats.drafted_tokens == sum(len(step.drafted) for step in steps)
    assert stats.accepted_tokens == sum(len(step.accepted) for step in steps)
    # Drafting and verifying are parts of the request's compute time, which may also count loop overhead.
    assert stats.seconds >= stats.draft_seconds + stats.verify_seconds - 1e-9
    assert steps[-1].elapsed_s == pytest.approx(stats.seconds)
    assert [s.elapsed_s for s in steps] == sorted(s.elapsed_s for s in steps)
    if result.stop_reason == "max_new_tokens":
        assert len(output) == max_new_tokens
    else:
        assert len(output) <= max_new_tokens


def run(engine, prompt, method, max_new_tokens=N, **options):
    result = engine.generate(prompt, method, max_new_tokens, **options)
    check_events(result, engine.tokenizer, method, max_new_tokens)
    return result


# --- lossless greedy decoding ----------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_vanilla_equals_generate(make_engine, models, reference, arch):
    engine = make_engine(arch, "noisy")
    for prompt in PROMPTS:
        result = run(engine, prompt, "vanilla")
        assert result.token_ids == reference(models.target(arch), prompt, N)
        assert result.stats.target_forwards == len(result.token_ids)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_whole_draft_accepted_when_draft_is_target(make_engine, models, reference, verdicts, arch):
    engine = make_engine(arch, "same")
    for method in ("speculative", "ouroboros"):
        for prompt in PROMPTS:
            verdicts.clear()
            result = run(engine, prompt, method, gamma=4)
            assert result.token_ids == reference(models.target(arch), prompt, N)
            # The trunk is the target's own greedy text, so it always stands in full.
            assert all(v.trunk_accepted == len(trunk) for trunk, _, v in verdicts)
            # Every step commits at least gamma drafts plus the target's token (fewer only at the end).
            assert result.stats.target_forwards <= math.ceil(len(result.token_ids) / 5)
            if method == "speculative" and result.stop_reason == "max_new_tokens":
                assert result.stats.acceptance_rate == 1.0
                assert all(len(step.drafted) == min(4, N - 1 - sum(len(s.committed) for s in result.events[:i]))
                           for i, step in enumerate(result.events))


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_partial_acceptance_with_a_noisy_draft(make_engine, models, reference, arch):
    engine = make_engine(arch, "noisy")
    for method in ("speculative", "ouroboros"):
        accepted = drafted = 0
        for prompt in PROMPTS:
            result = run(engine, prompt, method)
            assert result.token_ids == reference(models.target(arch), prompt, N)
            accepted += result.stats.accepted_tokens
            drafted += result.stats.drafted_tokens
        assert 0 < accepted < drafted, "the noisy draft should be partly right, partly wrong"


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_rejection_at_the_first_token_with_an_unrelated_draft(make_engine, models, reference, verdicts, arch):
    engine = make_engine(arch, "random")
    for method in ("speculative", "ouroboros"):
        for prompt in PROMPTS[:2]:
            verdicts.clear()
            result = run(engine, prompt, method, 10, gamma=3)
            assert result.token_ids == reference(models.target(arch), prompt, 10)
            trunk, _, first = verdicts[0]
            assert trunk and first.trunk_accepted == 0
            assert result.events[0].accepted == () and len(result.events[0].committed) == 1
            assert result.events[0].rejected[0].id == trunk[0] != result.token_ids[0]


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_max_new_tokens_reached_mid_phrase(make_engine, models, reference, arch):
    engine = make_engine(arch, "same")
    # Greedy output for n tokens is the first n of a longer run (no EOS occurs in these references).
    full = reference(models.target(arch), PROMPTS[0], 10)
    assert models.eos_id not in full
    for method, options in (("speculative", {"gamma": 4}), ("ouroboros", {"gamma": 3})):
        for max_new_tokens in range(1, 11):
            result = run(engine, PROMPTS[0], method, max_new_tokens, **options)
            assert result.token_ids == full[:max_new_tokens]
            assert result.stop_reason == "max_new_tokens"
        assert run(engine, PROMPTS[0], method, 1, **options).events[0].drafted == ()


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_eos_inside_an_accepted_phrase(make_engine, models, reference, arch):
    target = models.target(arch)
    engine = make_engine(arch, "same")
    for method in ("speculative", "ouroboros"):
        plain = run(engine, PROMPTS[1], method, 16, gamma=5)
        # Pick a token the target commits as an accepted draft (not as its own token), first time seen.
        position, eos = None, None
        for step in plain.events:
            start = sum(len(s.committed) for s in plain.events[: step.index])
            for offset, token in enumerate(step.accepted[1:], start=1):
                if token.id not in plain.token_ids[: start + offset]:
                    position, eos = start + offset, token.id
                    break
            if eos is not None:
                break
        assert eos is not None
        saved = target.generation_config.eos_token_id
        target.generation_config.eos_token_id = eos
        try:
            eos_engine = Engine(target, target, engine.tokenizer)
        finally:
            target.generation_config.eos_token_id = saved
        assert eos_engine.eos == {eos}
        result = run(eos_engine, PROMPTS[1], method, 16, gamma=5)
        assert result.token_ids == plain.token_ids[: position + 1]
        assert result.token_ids == reference(target, PROMPTS[1], 16, eos_token_id=eos)
        assert result.stop_reason == "eos"
        last = result.events[-1]
        assert last.target_token is None and last.accepted[-1].id == eos


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_real_eos_token_stops_and_is_left_out_of_the_text(tokenizer, models, reference, arch):
    # A target that says <|endoftext|> often: its EOS logit follows the input embedding of a token it
    # writes early on, so once that token is fed back the EOS logit is raised.
    target = build_model(arch, models.eos_id, seed=50 + ARCHITECTURES.index(arch))
    trigger = reference_ids(target, tokenizer, PROMPTS[2], 8)[3]  # not memoised: the weights change below
    with torch.no_grad():
        target.get_output_embeddings().weight[models.eos_id] *= 0
        target.get_output_embeddings().weight[models.eos_id] += target.get_input_embeddings().weight[trigger] * 3
    engine = Engine(target, noisy_copy(target, 0.015, seed=1), tokenizer)
    stopped = 0
    for prompt in (PROMPTS[2], REPETITIVE_PROMPTS[0], REPETITIVE_PROMPTS[1]):
        expected = reference(target, prompt, 32)
        for method in ("vanilla", "speculative", "ouroboros"):
            result = run(engine, prompt, method, 32)
            assert result.token_ids == expected
            if models.eos_id in expected:
                assert result.stop_reason == "eos" and result.token_ids[-1] == models.eos_id
                assert "<|endoftext|>" not in result.text
                stopped += 1
    assert stopped, "no prompt reached EOS: the test did not test it"


@pytest.fixture(scope="module")
def looping_targets(models):
    # A small initializer range makes an untrained model fall into loops, the way real models repeat
    # code: then phrases seen earlier in the output (prompt lookup, lookahead n-grams) match as branches.
    return {arch: build_model(arch, models.eos_id, seed=20 + ARCHITECTURES.index(arch), init=0.1)
            for arch in ARCHITECTURES}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_branch_fully_matched_keeps_its_bonus_token(tokenizer, looping_targets, reference, verdicts, arch):
    target = looping_targets[arch]
    engine = Engine(target, target, tokenizer)
    full_matches = 0
    for prompt in (PROMPTS[1], PROMPTS[2], REPETITIVE_PROMPTS[1]):
        verdicts.clear()
        # Pinned settings (not the defaults, which follow the embedded pair's sweep): 3-token phrases
        # from a lookahead window and prompt lookup, several branches.
        result = run(engine, prompt, "ouroboros", 32, gamma=4, window=8, ngram=4, branches=3)
        assert result.token_ids == reference(target, prompt, 32)
        assert len(verdicts) == len(result.events)
        for (trunk, branches, verdict), step in zip(verdicts, result.events):
            assert [list(ids(b)) for b in step.branches] == branches
            if verdict.branch is None:
                assert ids(step.drafted) == trunk
                continue
            branch = branches[verdict.branch]
            assert ids(step.drafted) == trunk + branch
            assert all(t.source in (Source.POOL, Source.PROMPT) for t in step.drafted[len(trunk) :])
            if verdict.branch_accepted == len(branch) and step.target_token is not None:
                full_matches += 1
                assert ids(step.accepted) == trunk + branch and step.rejected == ()
                assert step.target_token.id == verdict.next_token
    assert full_matches > 0


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_context_lookup_branch_takes_over_from_a_rejected_draft(tokenizer, models, looping_targets, reference,
                                                                 verdicts, arch):
    target = looping_targets[arch]
    engine = Engine(target, models.draft(arch, "noisy"), tokenizer)  # a draft that is often wrong
    from_root = 0
    for prompt in (PROMPTS[1], REPETITIVE_PROMPTS[1], REPETITIVE_PROMPTS[2]):
        verdicts.clear()
        result = run(engine, prompt, "ouroboros", 32, lookup=8, branches=1)
        assert result.token_ids == reference(target, prompt, 32)
        for (trunk, branches, verdict), step in zip(verdicts, result.events):
            if verdict.branch is not None and verdict.trunk_accepted < len(trunk):
                from_root += 1  # the target rejected the draft's token and walked the lookup branch instead
                branch = branches[verdict.branch]
                assert ids(step.drafted) == trunk[: verdict.trunk_accepted] + branch
                assert step.drafted[verdict.trunk_accepted].source == Source.PROMPT
                assert ids(step.accepted) == (trunk[: verdict.trunk_accepted] + branch)[: len(step.accepted)]
    assert from_root > 0, "no step walked a lookup branch past a rejected draft token"


OUROBOROS_OPTIONS = [
    {"window": 0}, {"lookup": 0}, {"lookup": 1}, {"lookup": 64, "branches": 0}, {"branches": 0}, {"window": 0, "branches": 0, "draft_candidates": 0, "prompt_lookup": False},
    {"ngram": 2}, {"ngram": 3}, {"ngram": 5}, {"ngram": 6}, {"gamma": 1}, {"gamma": 2}, {"gamma": 3},
    {"gamma": 8}, {"guess_set": 1}, {"draft_candidates": 0}, {"window": 1, "ngram": 2, "branches": 1},
    {"pool_size": 1}, {"window": 16, "branches": 8, "draft_candidates": 6},
]


@pytest.mark.parametrize("options", OUROBOROS_OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_ouroboros_options_stay_lossless(make_engine, models, reference, options):
    index = OUROBOROS_OPTIONS.index(options)
    arch = ARCHITECTURES[index % len(ARCHITECTURES)]
    prompt = (PROMPTS[0], REPETITIVE_PROMPTS[0])[index // len(ARCHITECTURES) % 2]
    result = run(make_engine(arch, "noisy"), prompt, "ouroboros", **options)
    assert result.token_ids == reference(models.target(arch), prompt, N)


@pytest.mark.parametrize("gamma", [1, 2, 5, 8])
def test_speculative_gamma_stays_lossless(make_engine, models, reference, gamma):
    arch = ARCHITECTURES[gamma % len(ARCHITECTURES)]
    engine = make_engine(arch, "noisy")
    result = run(engine, PROMPTS[1], "speculative", gamma=gamma)
    assert result.token_ids == reference(models.target(arch), PROMPTS[1], N)
    assert all(len(step.drafted) <= gamma for step in result.events)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_lossless_up_to_the_end_of_the_context(tokenizer, make_engine, models, reference, arch):
    # The prompt fills the context but for max_new_tokens: drafts, lookahead columns and branches must
    # not run past the models' positions (GPT-2's position table ends there).
    engine = make_engine(arch, "noisy")
    prompt = "import os\n" * 33
    max_new_tokens = engine.max_context - len(engine.encode(prompt))
    assert 0 < max_new_tokens <= 30
    for method in ("speculative", "ouroboros"):
        result = run(engine, prompt, method, max_new_tokens, gamma=8)
        assert result.token_ids == reference(models.target(arch), prompt, max_new_tokens)


# --- text pieces -----------------------------------------------------------------------------------------

def test_text_pieces_split_multibyte_characters(tokenizer):
    text = "x = '中文' # 😀 naïve"
    token_ids = tokenizer(text)["input_ids"]
    pieces = TextPieces(tokenizer)
    out = [pieces.push(i) for i in token_ids]
    assert "".join(out) == text == pieces.finish()
    assert "" in out, "a character spread over several tokens hands its earlier tokens an empty piece"
    assert all("\ufffd" not in piece for piece in out)
    assert "😀" in out or any(piece.startswith("😀") or piece.endswith("😀") for piece in out)


def test_multibyte_prompt_keeps_the_piece_invariant(make_engine, models, reference):
    engine = make_engine("qwen2", "noisy")
    prompt = "emoji 😀🐍🎉 and CJK 日本語 中文 한국어\n"
    for method in ("vanilla", "speculative", "ouroboros"):
        result = run(engine, prompt, method, 30)
        assert result.token_ids == reference(models.target("qwen2"), prompt, 30)


# --- streaming, cancellation, warm pools -----------------------------------------------------------------

@pytest.mark.parametrize("method", ["vanilla", "speculative", "ouroboros"])
def test_stop_event_cancels_within_one_step(make_engine, method):
    engine = make_engine("llama", "noisy")
    stop = threading.Event()
    stream = engine.stream(PROMPTS[0], method, 50, stop=stop)
    first = next(stream)
    assert isinstance(first, StepEvent)
    stop.set()
    rest = list(stream)
    # The loop checks the flag before every step: the stream ends with no further step.
    assert len(rest) == 1 and isinstance(rest[0], DoneEvent)
    done = rest[0]
    assert done.stop_reason == "cancelled"
    assert list(done.token_ids) == ids(first.committed)
    assert done.text == "".join(t.text for t in first.committed)
    assert done.stats.target_forwards == 1 and done.stats.new_tokens == len(first.committed)


def test_stop_set_before_the_start_gives_an_empty_result(make_engine):
    engine = make_engine("gpt2", "noisy")
    stop = threading.Event()
    stop.set()
    result = engine.generate(PROMPTS[0], "ouroboros", 10, stop=stop)
    assert result.stop_reason == "cancelled"
    assert result.token_ids == [] and result.text == "" and result.events == []
    assert result.stats.new_tokens == 0 and result.stats.target_forwards == 0


def test_closing_the_generator_midway_leaves_the_engine_usable(make_engine, models, reference):
    engine = make_engine("mistral", "noisy")
    stream = engine.stream(PROMPTS[0], "ouroboros", N)
    next(stream)
    next(stream)
    stream.close()
    with pytest.raises(StopIteration):
        next(stream)
    # Two interleaved streams do not share request state.
    a = engine.stream(PROMPTS[0], "ouroboros", N)
    b = engine.stream(PROMPTS[1], "speculative", N)
    events_a, events_b = [next(a)], [next(b)]
    events_a += list(a)
    events_b += list(b)
    assert list(events_a[-1].token_ids) == reference(models.target("mistral"), PROMPTS[0], N)
    assert list(events_b[-1].token_ids) == reference(models.target("mistral"), PROMPTS[1], N)


def test_warm_pool_across_requests_stays_lossless(make_engine, models, reference):
    engine = make_engine("llama", "noisy")
    pool = engine.new_pool()
    assert len(pool) == 0
    first = run(engine, REPETITIVE_PROMPTS[1], "ouroboros", pool=pool)
    assert first.token_ids == reference(models.target("llama"), REPETITIVE_PROMPTS[1], N)
    assert len(pool) > 0
    size = len(pool)
    for prompt in (REPETITIVE_PROMPTS[1], PROMPTS[0]):
        result = run(engine, prompt, "ouroboros", pool=pool)
        assert result.token_ids == reference(models.target("llama"), prompt, N)
    assert len(pool) >= size
    # A bounded warm pool stays within its bounds.
    small = engine.new_pool(guess_set=2, pool_size=10)
    for prompt in PROMPTS:
        result = run(engine, prompt, "ouroboros", pool=small)
        assert result.token_ids == reference(models.target("llama"), prompt, N)
    assert 0 < len(small) <= 10


# --- sampling --------------------------------------------------------------------------------------------

def test_sampling_with_a_seed_is_reproducible(make_engine):
    engine = make_engine("gpt2", "noisy")
    for method in ("vanilla", "speculative", "ouroboros"):
        a = run(engine, PROMPTS[0], method, 8, temperature=0.9, seed=7)
        b = run(engine, PROMPTS[0], method, 8, temperature=0.9, seed=7)
        c = run(engine, PROMPTS[0], method, 8, temperature=0.9, seed=8)
        assert a.token_ids == b.token_ids and a.text == b.text
        assert a.token_ids != c.token_ids
    top_p = [run(engine, PROMPTS[0], "ouroboros", 8, temperature=0.9, top_p=0.5, seed=3).token_ids for _ in range(2)]
    assert top_p[0] == top_p[1]


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The smallest set of most likely tokens whose mass reaches top_p, renormalised (rows of (n, V))."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = torch.where(before < top_p, sorted_probs, torch.zeros_like(sorted_probs))
    out = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return out / out.sum(dim=-1, keepdim=True)


def first_two_token_distribution(model, prompt_ids: list[int], temperature: float, top_p: float) -> torch.Tensor:
    """P(t1, t2 | prompt) under the target itself: (V, V), in float64."""
    vocab = model.config.vocab_size
    with torch.no_grad():
        first = model(input_ids=torch.tensor([prompt_ids])).logits[0, -1].double()
        p1 = nucleus(torch.softmax(first / temperature, dim=-1)[None], top_p)[0]
        batch = torch.cat([torch.tensor([prompt_ids]).repeat(vocab, 1), torch.arange(vocab)[:, None]], dim=1)
        second = model(input_ids=batch).logits[:, -1].double()
        p2 = nucleus(torch.softmax(second / temperature, dim=-1), top_p)
    return p1[:, None] * p2


def chi_square_critical(df: int, z: float = 3.0902) -> float:
    """Upper critical value of chi-square (Wilson-Hilferty); z = 3.0902 is the normal's 0.999 quantile."""
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + z * math.sqrt(h)) ** 3


def test_chi_square_critical_value_matches_tables():
    # Tabulated 0.999 quantiles: df 5 -> 20.515, df 10 -> 29.588, df 20 -> 45.315.
    for df, table in ((5, 20.515), (10, 29.588), (20, 45.315)):
        assert chi_square_critical(df) == pytest.approx(table, rel=0.02)


@pytest.fixture(scope="module")
def sampling_pair(tokenizer, models):
    # A sharper target (larger initializer range) puts most mass on a few pairs, so a few hundred
    # samples fill the chi-square cells; its noisy copy drafts, agreeing often but not always.
    target = build_model("llama", models.eos_id, seed=2, layers=1, hidden=32, init=0.6)
    return Engine(target, noisy_copy(target, 0.015, seed=4), tokenizer)


@pytest.mark.parametrize("method,temperature,top_p", [
    ("speculative", 0.8, 1.0), ("ouroboros", 0.8, 1.0), ("ouroboros", 0.8, 0.8),
])
def test_sampled_first_two_tokens_follow_the_targets_distribution(sampling_pair, method, temperature, top_p):
    engine = sampling_pair
    prompt = "def f(x):\n    return"
    samples = 200
    joint = first_two_token_distribution(engine.target, engine.encode(prompt), temperature, top_p)
    counts = torch.zeros_like(joint)
    accepted = 0
    for seed in range(samples):
        result = engine.generate(prompt, method, 2, temperature=temperature, top_p=top_p, seed=seed, gamma=1)
        first, second = result.token_ids
        counts[first, second] += 1
        accepted += result.stats.accepted_tokens
    # Both acceptance and rejection happen, so both paths feed the distribution.
    assert 0 < accepted < samples
    assert counts[joint == 0].sum() == 0, "a pair the target can never produce was sampled"
    # Cells: every pair expected at least 5 times; the rest lumped into one cell (if it is big enough).
    expected = joint * samples
    cells = expected >= 5
    observed_cells = counts[cells].tolist()
    expected_cells = expected[cells].tolist()
    rest_expected = float(expected[~cells].sum())
    if rest_expected >= 5:
        observed_cells.append(float(counts[~cells].sum()))
        expected_cells.append(rest_expected)
    assert len(expected_cells) >= 5
    statistic = sum((o - e) ** 2 / e for o, e in zip(observed_cells, expected_cells))
    assert statistic < chi_square_critical(len(expected_cells) - 1), (statistic, len(expected_cells))
