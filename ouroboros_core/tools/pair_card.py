"""Measure the embedded pair and write its model card (assets/models/README.md).

    python3 -m ouroboros_core.tools.pair_card  # after train_pair; prints the figures as JSON too

Held-out text is Python that is not in the training corpus (pip's own source, see
corpus.heldout_files).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .pair_figures import measure_pair

MODELS = Path(__file__).resolve().parents[2] / "assets" / "models"
HELDOUT_GOAL = 1.4  # bits/char the target must reach on the held-out text (issue 3)


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
    """The runs that made the pair, first to last: a run continued with `train_pair --init` keeps
    the one it continued under "previous"."""
    chain = []
    while training:
        chain.append(training)
        training = training.get("previous")
    return chain[::-1]


def whole_curve(training: dict) -> list[dict]:
    """The held-out checks of every stage on one axis: a continuation's steps count on from its
    first run's."""
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
    continued = (
        " (a continuation counts its steps on from the run it continued)"
        if training.get("previous")
        else ""
    )
    lines = [
        "## Learning curve\n\nHeld-out loss every "
        f"{training['config']['eval_every']} steps during training{continued}, "
        f"on the first {curve[-1]['heldout_chars']:,} characters of the held-out text, in float32 "
        "(the figures above are measured on the saved bfloat16 weights). `training.png` draws "
        "it.\n",
        "| step | target bits/char | draft bits/char | agreement |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {c['step']} | {c['target_bits_per_char']} | {c['draft_bits_per_char']} "
        f"| {c['agreement']:.1%} |"
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
    # where a continuation began
    for stage in stages(training)[:-1]:
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
        f"continuations of {samples['count']:,} documented functions of the corpus "
        f"({samples['tokens']:,} tokens, temperatures {temperatures}, `target_samples`)"
    )


def on_policy_line(f: dict) -> str:
    # cards measured before the figure existed
    if "on_policy_t0" not in f:
        return ""
    return (
        "- **On the target's own writing** (teacher-forced on its "
        f"{f['on_policy_new_tokens']}-token continuations of {f['on_policy_stubs']} held-out "
        f"stubs, `on_policy_figures`): greedy agreement {f['on_policy_t0']:.1%}; sampled at top-p "
        "0.95, the overlap of the two distributions (1 - total variation, the best a guess can be "
        "right) "
        f"{f['on_policy_t0.3']:.1%} at temperature 0.3, {f['on_policy_t0.8']:.1%} at 0.8.\n"
    )


def continuations(runs: list[dict]) -> str:
    """A sentence for each run that continued the first with `train_pair --init`, and the wall time
    of them all; empty for a pair trained in one run."""
    continued = runs[1:]
    more = "".join(
        f" Then `train_pair --init` continued the {' and '.join(c['config']['models'])} alone from "
        f"it for {c['config']['steps']} steps (peak learning rate {c['config']['lr']}, "
        f"{c['config']['warmup']} warm-up steps, cosine decay, distillation weight "
        f"{c['config']['distill_weight']}){on_policy(c)}, wall time {c['wall_s'] / 60:.0f} min."
        for c in continued
    )
    if continued:
        more += f" {sum(run['wall_s'] for run in runs) / 60:.0f} min in all."
    return more


def model_table(f: dict, cfg: dict) -> str:
    """The two models side by side: shape, parameters, one-token latency and held-out loss."""
    t, d = cfg["target"], cfg["draft"]
    rows = [
        "| | target | draft |",
        "|---|---|---|",
        f"| layers x width (heads, MLP) | {t['layers']} x {t['width']} ({t['heads']}, {t['ffn']}) "
        f"| {d['layers']} x {d['width']} ({d['heads']}, {d['ffn']}) |",
        f"| parameters | {f['target_params']:,} | {f['draft_params']:,} |",
        "| one-token forward, KV cache, 200 tokens of context "
        f"| {f['target_latency_ms']} ms | {f['draft_latency_ms']} ms |",
        f"| held-out loss | {f['target_bits_per_char']} bits/char "
        f"| {f['draft_bits_per_char']} bits/char |",
    ]
    return "\n".join(rows)


def training_notes(training: dict) -> str:
    """How the pair was made: its corpus, its tokenizer and its training runs."""
    runs = stages(training)
    first, cfg = runs[0], runs[0]["config"]
    # runs from before the bf16 option trained in float32 throughout
    precision = (
        ", forward passes in bfloat16 autocast (weights and optimiser in float32)"
        if cfg.get("bf16")
        else ""
    )
    tokens = cfg["steps"] * cfg["batch_size"] * cfg["seq_len"]
    minutes = first["wall_s"] / 60
    return f"""\
- **Corpus**: the Python standard library's own source ({training["corpus_files"]} files,
  {training["corpus_chars"]:,} characters, PSF licence), without its test suites (`Lib/test` and the
  packages' `test` folders), without data folders (encodings, pydoc_data, lib2to3, idlelib, \
turtledemo,
  test data) and without files that are mostly long lines.
- **Tokenizer**: byte-level BPE, {cfg["vocab_size"]} tokens, `<|endoftext|>` as BOS/EOS
  ({training["corpus_tokens"]:,} corpus tokens). A newline is always a token of its own, never \
fused with
  the next line's indentation, so a prompt that ends in a bare newline (a HumanEval stub) reads as \
it did
  in training.
- **Training**: both models in one loop on the same batches, {cfg["steps"]} steps of \
{cfg["batch_size"]} x
  {cfg["seq_len"]} tokens ({tokens:,} tokens), AdamW, peak
  learning rate {cfg["lr"]}, cosine decay{precision}; the draft's loss mixes cross-entropy with \
distillation from the
  target ({cfg["distill_weight"]}); the residual output projections start depth-scaled (GPT-2). Seed
  {cfg["seed"]}; wall time {minutes:.0f} min on the 2-core CPU.{continuations(runs)} Weights are \
stored in bfloat16."""


def measured_notes(f: dict) -> str:
    """What the card's figures measure: the held-out text, agreement, latency and HumanEval."""
    return f"""\
- **Held-out**: {f["heldout_chars"]:,} characters of pip's own source (an installed PyPI package, \
not
  in the corpus), in windows of 256 tokens.
- **Draft/target agreement** (greedy next token, teacher-forced on held-out): {f["agreement"]:.1%}.
{on_policy_line(f)}- **Latency ratio** target/draft: {f["latency_ratio"]:.2f}x.
- **HumanEval stubs**: the target's greedy completion (128 tokens) gives a function body of two or \
more
  lines that `ast.parse` accepts for {f["humaneval_bodies_parsing"]} of {f["humaneval_problems"]} \
problems
  ({f["humaneval_parse_rate"]:.0%})."""


def card(figures: dict, training: dict) -> str:
    """The model card (README.md) from the measured figures and the training run's record."""
    cfg = stages(training)[0]["config"]
    return f"""# The embedded demo pair

Two small Llama-architecture causal LMs that share one byte-level BPE tokenizer, trained by
`python3 -m ouroboros_core.tools.train_pair` for this demo. They write Python. Load either folder \
with
`AutoModelForCausalLM.from_pretrained` and `AutoTokenizer.from_pretrained` alone.

{model_table(figures, cfg)}

{training_notes(training)}
{measured_notes(figures)}

{targets(figures)}

{learning_curve(training)}
Measured by `python3 -m ouroboros_core.tools.pair_card` on {figures["machine"]}.
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

    engine = load_engine(str(args.models / "target"), str(args.models / "draft"), "cpu")
    figures = measure_pair(engine, args.heldout_chars, args.humaneval_limit, args.on_policy_stubs)
    print(json.dumps(figures, indent=1))
    training = json.loads((args.training or args.models / "training.json").read_text())
    (args.models / "README.md").write_text(card(figures, training))
    (args.models / "card.json").write_text(json.dumps(figures, indent=1))
    save_curve_chart(training, args.models / "training.png")


if __name__ == "__main__":
    main()
