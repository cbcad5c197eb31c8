"""Measure the embedded pair and write its model card (assets/models/README.md).

    python3 -m ouroboros_core.tools.pair_card            # after train_pair; prints the figures as JSON too

Held-out text is Python that is not in the training corpus (pip's own source, see corpus.heldout_files).
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import statistics
import time
from pathlib import Path

import torch

from .corpus import EOS, heldout_files

MODELS = Path(__file__).resolve().parents[2] / "assets" / "models"
HELDOUT_GOAL = 1.4  # bits/char the target must reach on the held-out text (issue 3)
STOPS = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\nassert ")


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


ON_POLICY_TEMPERATURES = (0.0, 0.3, 0.8)


def nucleus_distribution(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    from ..sampling import nucleus

    probs = nucleus(torch.softmax(logits.double() / temperature, dim=-1), top_p)
    return probs / probs.sum(dim=-1, keepdim=True)


@torch.no_grad()
def on_policy_figures(
    target, draft, tokenizer, stubs: int, new_tokens: int = 128, seed: int = 123
) -> dict:
    """How often the draft could guess the target's next token where it is asked to: teacher-forced on the
    target's own continuations of held-out (pip) stubs, greedy and sampled. Greedy: the two argmaxes agree;
    sampled (top-p 0.95): the overlap of the two nucleus distributions, 1 - total variation, the most often any
    way of coupling a draft's guess with the target's sample can be right."""
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

    The models take turns, a few forwards each per round, so a ratio of two medians compares them on the
    same machine state (a 2-core CPU drifts by tens of percent over a minute). The first round warms up.
    """
    from ..cache import new_cache, truncate

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
    """The completion up to the end of the function: a stop sequence or the first unindented line."""
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


def targets(f: dict) -> str:
    """The project's goals for the pair, each with the measured figure and whether it is met."""
    rows = [
        (
            "target/draft one-token latency",
            "at least 5x",
            f"{f['latency_ratio']:.2f}x",
            f["latency_ratio"] >= 5,
        ),
        ("greedy agreement", "at least 55%", f"{f['agreement']:.1%}", f["agreement"] >= 0.55),
        (
            "target held-out loss",
            f"at most {HELDOUT_GOAL} bits/char",
            f"{f['target_bits_per_char']}",
            f["target_bits_per_char"] <= HELDOUT_GOAL,
        ),
        (
            "target below draft",
            "by at least 0.15 bits/char",
            f"{f['draft_bits_per_char'] - f['target_bits_per_char']:.3f}",
            f["draft_bits_per_char"] - f["target_bits_per_char"] >= 0.15,
        ),
        (
            "HumanEval bodies that parse",
            "at least half",
            f"{f['humaneval_bodies_parsing']} of {f['humaneval_problems']}",
            2 * f["humaneval_bodies_parsing"] >= f["humaneval_problems"],
        ),
    ]
    lines = ["| goal | wanted | measured | met |", "|---|---|---|---|"]
    lines += [
        f"| {goal} | {wanted} | {got} | {'yes' if ok else 'no'} |" for goal, wanted, got, ok in rows
    ]
    return "\n".join(lines)


def stages(training: dict) -> list[dict]:
    """The runs that made the pair, first to last: a run continued with `train_pair --init` keeps the one
    it continued under "previous"."""
    chain = []
    while training:
        chain.append(training)
        training = training.get("previous")
    return chain[::-1]


def whole_curve(training: dict) -> list[dict]:
    """The held-out checks of every stage on one axis: a continuation's steps count on from its first run's."""
    curve, offset = [], 0
    for stage in stages(training):
        curve += [{**c, "step": c["step"] + offset} for c in stage.get("heldout_curve", [])]
        offset += stage["config"]["steps"]
    return curve


def learning_curve(training: dict) -> str:
    """The held-out checks train_pair made as it went (runs before they existed have none)."""
    curve = whole_curve(training)
    if not curve:
        return ""
    lines = [
        f"## Learning curve\n\nHeld-out loss every {training['config']['eval_every']} steps during training"
        f"{' (a continuation counts its steps on from the run it continued)' if training.get('previous') else ''}, "
        f"on the first {curve[-1]['heldout_chars']:,} characters of the held-out text, in float32 (the "
        "figures above are measured on the saved bfloat16 weights). `training.png` draws it.\n",
        "| step | target bits/char | draft bits/char | agreement |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {c['step']} | {c['target_bits_per_char']} | {c['draft_bits_per_char']} | {c['agreement']:.1%} |"
        for c in curve
    ]
    return "\n".join(lines) + "\n"


def save_curve_chart(training: dict, path: Path) -> None:
    curve = whole_curve(training)
    if not curve:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [c["step"] for c in curve]
    fig, loss = plt.subplots(figsize=(7, 3.4), dpi=120)
    loss.plot(
        steps, [c["target_bits_per_char"] for c in curve], "o-", color="#1a73e8", label="target"
    )
    loss.plot(
        steps, [c["draft_bits_per_char"] for c in curve], "o-", color="#9aa0a6", label="draft"
    )
    loss.axhline(
        HELDOUT_GOAL, color="#1a73e8", linestyle=":", linewidth=1, label="goal for the target"
    )
    for stage in stages(training)[:-1]:  # where a continuation began
        loss.axvline(stage["config"]["steps"], color="#5f6368", linestyle="--", linewidth=1)
    loss.set_xlabel("training step")
    loss.set_ylabel("held-out bits/char")
    agreement = loss.twinx()
    agreement.plot(
        steps, [100 * c["agreement"] for c in curve], "s--", color="#e37400", label="agreement"
    )
    agreement.set_ylabel("greedy agreement, %", color="#e37400")
    handles = loss.get_legend_handles_labels()[0] + agreement.get_legend_handles_labels()[0]
    loss.legend(handles=handles, fontsize=8, loc="upper center")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def on_policy(stage: dict) -> str:
    """What a stage trained with `--samples` learned from besides the corpus."""
    if not stage.get("samples"):
        return ""
    samples = stage["samples"]
    temperatures = ", ".join(f"{t:g}" for t in samples["temperatures"])
    return (
        f"; {stage['config']['samples_share']:.0%} of each batch was the target's own writing: its "
        f"continuations of {samples['count']:,} documented functions of the corpus ({samples['tokens']:,} "
        f"tokens, temperatures {temperatures}, `target_samples`)"
    )


def on_policy_line(f: dict) -> str:
    if "on_policy_t0" not in f:  # cards measured before the figure existed
        return ""
    return (
        f"- **On the target's own writing** (teacher-forced on its {f['on_policy_new_tokens']}-token "
        f"continuations of {f['on_policy_stubs']} held-out stubs, `on_policy_figures`): greedy agreement "
        f"{f['on_policy_t0']:.1%}; sampled at top-p 0.95, the overlap of the two distributions (1 - total "
        f"variation, the best a guess can be right) {f['on_policy_t0.3']:.1%} at temperature 0.3, "
        f"{f['on_policy_t0.8']:.1%} at 0.8.\n"
    )


def card(figures: dict, training: dict) -> str:
    first, *continued = runs = stages(training)
    cfg = first["config"]
    t, d = cfg["target"], cfg["draft"]
    f = figures
    # runs from before the bf16 option trained in float32 throughout
    precision = (
        ", forward passes in bfloat16 autocast (weights and optimiser in float32)"
        if cfg.get("bf16")
        else ""
    )
    more = "".join(
        f" Then `train_pair --init` continued the {' and '.join(c['config']['models'])} alone from it for "
        f"{c['config']['steps']} steps (peak learning rate {c['config']['lr']}, {c['config']['warmup']} warm-up "
        f"steps, cosine decay, distillation weight {c['config']['distill_weight']}){on_policy(c)}, wall time "
        f"{c['wall_s'] / 60:.0f} min."
        for c in continued
    )
    if continued:
        more += f" {sum(run['wall_s'] for run in runs) / 60:.0f} min in all."
    return f"""# The embedded demo pair

Two small Llama-architecture causal LMs that share one byte-level BPE tokenizer, trained by
`python3 -m ouroboros_core.tools.train_pair` for this demo. They write Python. Load either folder with
`AutoModelForCausalLM.from_pretrained` and `AutoTokenizer.from_pretrained` alone.

| | target | draft |
|---|---|---|
| layers x width (heads, MLP) | {t["layers"]} x {t["width"]} ({t["heads"]}, {t["ffn"]}) | {d["layers"]} x {d["width"]} ({d["heads"]}, {d["ffn"]}) |
| parameters | {f["target_params"]:,} | {f["draft_params"]:,} |
| one-token forward, KV cache, 200 tokens of context | {f["target_latency_ms"]} ms | {f["draft_latency_ms"]} ms |
| held-out loss | {f["target_bits_per_char"]} bits/char | {f["draft_bits_per_char"]} bits/char |

- **Corpus**: the Python standard library's own source ({training["corpus_files"]} files,
  {training["corpus_chars"]:,} characters, PSF licence), without its test suites (`Lib/test` and the
  packages' `test` folders), without data folders (encodings, pydoc_data, lib2to3, idlelib, turtledemo,
  test data) and without files that are mostly long lines.
- **Tokenizer**: byte-level BPE, {cfg["vocab_size"]} tokens, `<|endoftext|>` as BOS/EOS
  ({training["corpus_tokens"]:,} corpus tokens). A newline is always a token of its own, never fused with
  the next line's indentation, so a prompt that ends in a bare newline (a HumanEval stub) reads as it did
  in training.
- **Training**: both models in one loop on the same batches, {cfg["steps"]} steps of {cfg["batch_size"]} x
  {cfg["seq_len"]} tokens ({cfg["steps"] * cfg["batch_size"] * cfg["seq_len"]:,} tokens), AdamW, peak
  learning rate {cfg["lr"]}, cosine decay{precision}; the draft's loss mixes cross-entropy with distillation from the
  target ({cfg["distill_weight"]}); the residual output projections start depth-scaled (GPT-2). Seed
  {cfg["seed"]}; wall time {first["wall_s"] / 60:.0f} min on the 2-core CPU.{more} Weights are stored in bfloat16.
- **Held-out**: {f["heldout_chars"]:,} characters of pip's own source (an installed PyPI package, not
  in the corpus), in windows of 256 tokens.
- **Draft/target agreement** (greedy next token, teacher-forced on held-out): {f["agreement"]:.1%}.
{on_policy_line(f)}- **Latency ratio** target/draft: {f["latency_ratio"]:.2f}x.
- **HumanEval stubs**: the target's greedy completion (128 tokens) gives a function body of two or more
  lines that `ast.parse` accepts for {f["humaneval_bodies_parsing"]} of {f["humaneval_problems"]} problems
  ({f["humaneval_parse_rate"]:.0%}).

{targets(f)}

{learning_curve(training)}
Measured by `python3 -m ouroboros_core.tools.pair_card` on {f["machine"]}.
"""


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", type=Path, default=MODELS)
    parser.add_argument("--heldout-chars", type=int, default=300_000)
    parser.add_argument("--humaneval-limit", type=int, default=None)
    parser.add_argument(
        "--on-policy-stubs",
        type=int,
        default=96,
        help="held-out stubs the target continues for the on-policy figures (0: skip them)",
    )
    parser.add_argument(
        "--training", type=Path, help="training.json of the run (default: MODELS/training.json)"
    )
    args = parser.parse_args(argv)
    from ..models import load_engine
    import platform

    engine = load_engine(str(args.models / "target"), str(args.models / "draft"), "cpu")
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
    figures.update(heldout_figures(target, draft, tokenizer, args.heldout_chars))
    figures.update(humaneval_parse_rate(engine, limit=args.humaneval_limit))
    if args.on_policy_stubs:
        figures.update(on_policy_figures(target, draft, tokenizer, args.on_policy_stubs))
    print(json.dumps(figures, indent=1))
    training = json.loads((args.training or args.models / "training.json").read_text())
    (args.models / "README.md").write_text(card(figures, training))
    (args.models / "card.json").write_text(json.dumps(figures, indent=1))
    save_curve_chart(training, args.models / "training.png")


if __name__ == "__main__":
    main()
