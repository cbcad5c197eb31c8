"""The embedded pair's figures for its model card (tools/pair_card.py): held-out loss and greedy
agreement, agreement on the target's own writing, one-token latency, and the share of HumanEval
stubs the target completes into a body that parses.

Held-out text is Python that is not in the training corpus (pip's own source, see
corpus.heldout_files).
"""

from __future__ import annotations

import ast
import math
import statistics
import time

import torch

from .corpus import EOS, heldout_files

STOPS = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\nassert ")
ON_POLICY_TEMPERATURES = (0.0, 0.3, 0.8)


def heldout_chunks(tokenizer, max_chars: int, length: int = 256) -> list[list[int]]:
    eos = tokenizer.convert_tokens_to_ids(EOS)
    ids = []
    chars = 0
    for path in heldout_files():
        text = path.read_text(encoding="utf-8")
        ids += tokenizer(text)["input_ids"] + [eos]
        chars += len(text)
        if chars >= max_chars:
            break
    return [[eos] + ids[i : i + length - 1] for i in range(0, len(ids) - length, length - 1)]


@torch.no_grad()
def heldout_figures(target, draft, tokenizer, max_chars: int) -> dict:
    bits = {"target": 0.0, "draft": 0.0}
    chars = agree = positions = 0
    for chunk in heldout_chunks(tokenizer, max_chars):
        ids = torch.tensor([chunk])
        labels = ids[0, 1:]
        greedy = {}
        for name, model in (("target", target), ("draft", draft)):
            logits = model(input_ids=ids).logits[0, :-1].float()
            bits[name] += torch.nn.functional.cross_entropy(
                logits, labels, reduction="sum"
            ).item() / math.log(2)
            greedy[name] = logits.argmax(-1)
        agree += (greedy["target"] == greedy["draft"]).sum().item()
        positions += len(labels)
        chars += len(tokenizer.decode(chunk[1:]))
    return {
        "heldout_chars": chars,
        "heldout_tokens": positions,
        "target_bits_per_char": round(bits["target"] / chars, 4),
        "draft_bits_per_char": round(bits["draft"] / chars, 4),
        "agreement": round(agree / positions, 4),
    }


def nucleus_distribution(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    from ..sampling import nucleus

    probs = nucleus(torch.softmax(logits.double() / temperature, dim=-1), top_p)
    return probs / probs.sum(dim=-1, keepdim=True)


@torch.no_grad()
def on_policy_figures(
    target, draft, tokenizer, stubs: int, new_tokens: int = 128, seed: int = 123
) -> dict:
    """How often the draft could guess the target's next token where it is asked to: teacher-forced
    on the target's own continuations of held-out (pip) stubs, greedy and sampled. Greedy: the two
    argmaxes agree; sampled (top-p 0.95): the overlap of the two nucleus distributions, 1 - total
    variation, the most often any way of coupling a draft's guess with the target's sample can be
    right."""
    from .corpus import EOS, heldout_prompts
    from .target_samples import TOP_P, sample_batch

    torch.manual_seed(seed)
    prompts = [stub["prompt"] for stub in heldout_prompts(stubs)]
    figures = {"on_policy_stubs": len(prompts), "on_policy_new_tokens": new_tokens}
    for temperature in ON_POLICY_TEMPERATURES:
        hits = positions = 0.0
        for start in range(0, len(prompts), 32):
            batch = prompts[start : start + 32]
            eos = tokenizer.convert_tokens_to_ids(EOS)
            encoded = [tokenizer(prompt)["input_ids"] for prompt in batch]
            for cut, ids in sample_batch(target, encoded, eos, eos, temperature, new_tokens):
                x = torch.tensor([ids])
                logits = [
                    model(input_ids=x).logits[0, cut - 1 : -1].float() for model in (target, draft)
                ]
                if temperature:
                    overlap = torch.minimum(
                        *(nucleus_distribution(row, temperature, TOP_P) for row in logits)
                    )
                    hits += overlap.sum().item()
                else:
                    hits += (logits[0].argmax(-1) == logits[1].argmax(-1)).sum().item()
                positions += len(logits[0])
        figures[f"on_policy_t{temperature:g}"] = round(hits / positions, 4)
    return figures


@torch.no_grad()
def one_token_latency_ms(
    models: dict, context: int = 200, rounds: int = 8, repeats: int = 15
) -> dict:
    """Median one-token forward time of each model with a KV cache of `context` tokens, in ms.

    The models take turns, a few forwards each per round, so a ratio of two medians compares them on
    the same machine state (a 2-core CPU drifts by tens of percent over a minute). The first round
    warms up.
    """
    from ..tree import new_cache, truncate

    caches, ids, times = {}, {}, {name: [] for name in models}
    for name, model in models.items():
        ids[name] = torch.randint(0, model.config.vocab_size, (1, context + 1))
        caches[name] = new_cache(model)
        model(input_ids=ids[name][:, :context], past_key_values=caches[name], use_cache=True)
    for round_ in range(rounds):
        for name, model in models.items():
            for _ in range(repeats):
                started = time.perf_counter()
                model(
                    input_ids=ids[name][:, context:], past_key_values=caches[name], use_cache=True
                )
                elapsed = time.perf_counter() - started
                truncate(caches[name], context)
                if round_:
                    times[name].append(elapsed)
    return {name: round(statistics.median(values) * 1e3, 3) for name, values in times.items()}


def function_body(prompt: str, completion: str, hit_limit: bool) -> str:
    """The completion up to the end of the function: a stop sequence or the first unindented
    line."""
    cut = len(completion)
    for stop in STOPS:
        at = completion.find(stop)
        if at != -1:
            cut = min(cut, at)
    lines = completion[:cut].split("\n")
    body = []
    for i, line in enumerate(lines):
        if i > 0 and line and not line[0].isspace():
            hit_limit = False
            break
        body.append(line)
    else:
        if hit_limit and cut == len(completion):
            body = body[:-1]  # cut mid-line by the token limit
    return "\n".join(body)


def humaneval_parse_rate(engine, max_new_tokens: int = 128, limit: int | None = None) -> dict:
    from .bench import humaneval_prompts

    parsed = 0
    problems = humaneval_prompts(limit)
    samples = []
    for item in problems:
        result = engine.generate(item["prompt"], "ouroboros", max_new_tokens)
        body = function_body(item["prompt"], result.text, result.stop_reason == "max_new_tokens")
        lines = [line for line in body.split("\n") if line.strip()]
        ok = False
        if len(lines) >= 2:
            try:
                ast.parse(item["prompt"] + body)
                ok = True
            except SyntaxError:
                pass
        parsed += ok
        if len(samples) < 3:
            samples.append({"id": item["id"], "body": body, "parses": ok})
    return {
        "humaneval_problems": len(problems),
        "humaneval_bodies_parsing": parsed,
        "humaneval_parse_rate": round(parsed / len(problems), 4),
        "humaneval_samples": samples,
    }


def measure_pair(
    engine, heldout_chars: int, humaneval_limit: int | None, on_policy_stubs: int
) -> dict:
    """Every figure the card reports, measured on the loaded pair (on-policy ones only where
    `on_policy_stubs` is not 0)."""
    import platform

    target, draft, tokenizer = engine.target, engine.draft, engine.tokenizer
    figures = {
        "target_params": sum(p.numel() for p in target.parameters()),
        "draft_params": sum(p.numel() for p in draft.parameters()),
        **{
            f"{name}_latency_ms": ms
            for name, ms in one_token_latency_ms({"target": target, "draft": draft}).items()
        },
        "machine": f"{platform.machine()} CPU, {torch.get_num_threads()} threads, float32",
    }
    figures["latency_ratio"] = round(figures["target_latency_ms"] / figures["draft_latency_ms"], 3)
    figures.update(heldout_figures(target, draft, tokenizer, heldout_chars))
    figures.update(humaneval_parse_rate(engine, limit=humaneval_limit))
    if on_policy_stubs:
        figures.update(on_policy_figures(target, draft, tokenizer, on_policy_stubs))
    return figures
