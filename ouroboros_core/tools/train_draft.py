"""Train a draft for a preset's target on the target's own answers (the default pair's draft).

    # the answers
    python3 -m ouroboros_core.tools.target_samples --pair smollm2 --out RUN/samples.jsonl
    python3 -m ouroboros_core.tools.target_samples --pair smollm2 --heldout --limit 48 \\
        --out RUN/heldout.jsonl
    python3 -m ouroboros_core.tools.train_draft --samples RUN/samples.jsonl \\
        --heldout RUN/heldout.jsonl --out assets/models/smollm2-draft
    # more answers for the store alone (answers.json), the draft left as it is
    python3 -m ouroboros_core.tools.train_draft --answers-only \\
        --samples RUN/samples.jsonl RUN/more.jsonl --out assets/models/smollm2-draft

The draft is the target cut to its first `layers` layers: the same width, embeddings, final norm
and (tied) output layer, so it starts from the target's own reading of tokens and writes into the
target's output space. Its layers and final norm then learn the target's answer tokens, position by
position (the answer only: the request is context, never a guess the draft makes); the embeddings
stay the target's, frozen. On a CPU a forward's cost follows depth (shared/OUROBOROS.md), so three
layers of thirty make a cheap draft; the output layer over 49,152 tokens is the rest of its cost,
read as int8 by the engine's lean forward.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from .draft_loss import Head, batches, evaluate, kind_of, load_rows, teacher_targets
from .draft_loss import LEARNED, train_step
from .draft_folder import store_rows, stored_form, vocabulary, write_answers, write_vocabulary
from .draft_start import first_draft
from .target_states import attach_projection, save_projection, with_states
from .train_checkpoint import Checkpoint, fingerprint


@dataclass(frozen=True)
class DraftTraining:
    preset: str = "smollm2"
    layers: int = 3  # of the target's thirty, from the bottom
    epochs: float = 4.0
    batch_tokens: int = 4096  # padded tokens per batch (rows of similar length go together)
    lr: float = 1e-3
    warmup: int = 30
    seed: int = 0
    eval_every: int = 50  # steps between held-out checks
    # >0: learn the target's own top-k next-token chances at every answer position too
    teacher_k: int = 0
    start: str = ""  # a draft folder to go on training from ("": the target cut to `layers`)
    # learn that draft's stored answers again too (its earlier requests' answers, so a new kind of
    # request does not wash out what it knew)
    with_store: bool = False
    checkpoint_every: int = 20  # steps between checkpoints (0: none)
    # train the embeddings (tied: the output layer) too, not only the layers and final norm
    train_embeddings: bool = False
    # a folder of the target's states (target_states: one subfolder per answers file, named as the
    # file without its suffix): the draft learns to read them through a projection
    states: str = ""
    state_drop: float = 0.2  # the share of answer positions it learns without them
    # keep the training answers whose states are not written (they learn without one)
    stateless_too: bool = False
    # what the draft learns where the target's states are known (draft_loss.LEARNED)
    learn: str = "written"


def training_rows(cfg: DraftTraining, samples: list[Path], log=print) -> list[dict]:
    """The samples' rows and, with cfg.with_store, the stored answers of the draft training goes
    on from, less those the samples hold whole (learned there with their request)."""
    rows = [row for path in samples for row in answers_of(cfg, path, log, cfg.stateless_too)]
    if cfg.with_store and cfg.start:
        sampled = {tuple(stored_form(row)) for row in rows}
        rows += [row for row in store_rows(Path(cfg.start)) if tuple(row["ids"]) not in sampled]
    return rows


def answers_of(cfg: DraftTraining, path: Path, log=print, keep_all: bool = False) -> list[dict]:
    """One answers file's rows; with cfg.states, those whose target states are there, with them
    (keep_all: the others too, without; never the held-out answers, scored with their states)."""
    rows = load_rows([path])
    if not cfg.states:
        return rows
    return with_states(rows, Path(cfg.states) / path.stem, log, keep_all)


def lr_at(step: int, steps: int, cfg: DraftTraining) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak at the last step."""
    return (
        cfg.lr
        * min(1.0, (step + 1) / cfg.warmup)
        * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
    )


def prepare(cfg: DraftTraining, samples: list[Path], heldout: Path, log):
    """(draft, tokenizer, pad id, training rows, held-out rows, vocabulary): the draft to train, its
    embeddings frozen, and the rows, the training ones with the target's top-k chances where
    cfg.teacher_k asks for them."""
    from ouroboros_core.models import load_target_of

    target, tokenizer = load_target_of(cfg.preset, log)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    rows, held = training_rows(cfg, samples, log), answers_of(cfg, heldout, log)
    if cfg.teacher_k:
        teacher_targets(target, rows, pad, cfg.teacher_k, cfg.batch_tokens, log)
    draft = first_draft(cfg, target)
    if cfg.states:
        attach_projection(draft, target.config.hidden_size, cfg.start)
    del target
    # tied: the embeddings are the output layer too
    draft.get_input_embeddings().weight.requires_grad_(cfg.train_embeddings)
    trained = sum(p.numel() for p in draft.parameters() if p.requires_grad)
    log(
        f"draft: {cfg.layers} layers, {sum(p.numel() for p in draft.parameters()):,} parameters "
        f"({trained:,} trained); {len(rows)} answers, "
        f"{sum(len(r['ids']) - r['prompt_tokens'] for r in rows):,} answer tokens; "
        f"held-out {len(held)}"
    )
    return draft, tokenizer, pad, rows, held, vocabulary(rows, draft.config.vocab_size, cfg.start)


def run_steps(
    draft,
    rows,
    held,
    pad: int,
    cfg: DraftTraining,
    steps: int,
    head: Head,
    rng,
    log,
    checkpoint: Checkpoint,
):
    """The training steps: the loss every ten steps (history) and the agreement with the target's
    greedy held-out answers every cfg.eval_every (the curve, from the draft as it began). With
    cfg.checkpoint_every, `checkpoint` lets a stopped run go on."""
    import torch

    greedy_held = [row for row in held if row["temperature"] == 0]
    score = functools.partial(scores, cfg, draft, greedy_held, pad, head)
    trained = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    saved = checkpoint.load(draft, opt)
    started = time.perf_counter() - (saved["elapsed_s"] if saved else 0.0)  # across stops
    step, history, curve, queue, order = begin(saved, rows, cfg, rng, score)
    log(f"going on from step {step} of {steps}" if step else json.dumps(curve[-1]))
    draft.train()
    while step < steps:
        if not queue:
            order = rng.getstate()
            queue = batches(rows, cfg.batch_tokens, rng)
        lr = lr_at(step, steps, cfg)
        batch = queue.pop()
        loss, hits, count = train_step(draft, batch, pad, head, opt, lr, cfg.state_drop, cfg.learn)
        step += 1
        if step % 10 == 0 or step == steps:
            lr, elapsed = lr_at(step - 1, steps, cfg), round(time.perf_counter() - started, 1)
            history.append(dict(step=step, loss=round(loss, 4), lr=lr, elapsed_s=elapsed))
            history[-1]["agreement"] = round(hits / count, 4)
            log(json.dumps(history[-1]))
        if step % cfg.eval_every == 0 or step == steps:
            curve.append({"step": step, **score()})
            log(json.dumps(curve[-1]))
        if checkpoint.due(step) and step < steps:
            state = {"step": step, "history": history, "curve": curve, "rng": order}
            elapsed = time.perf_counter() - started
            checkpoint.save(draft, opt, {**state, "left": len(queue), "elapsed_s": elapsed})
    return history, curve, time.perf_counter() - started


def scores(cfg: DraftTraining, draft, rows: list[dict], pad: int, head: Head) -> dict:
    """The held-out scores; a state-fed draft's also without the target's states (the engine's
    draft reads one only at the first token it guesses in a step)."""
    scored = evaluate(draft, rows, pad, cfg.batch_tokens, head)
    if cfg.states:
        without = evaluate(draft, rows, pad, cfg.batch_tokens, head, drop=1.0)
        scored["without_states"] = without["agreement"]
    return scored


def begin(saved: dict | None, rows: list[dict], cfg: DraftTraining, rng, first_score):
    """(step, history, curve, the epoch's batches left, the rng's state they were drawn at): a
    checkpoint's, with the rng set to draw the rest as the stopped run would, else a fresh start
    scored once (first_score)."""
    if not saved:
        return 0, [], [{"step": 0, **first_score()}], [], None
    rng.setstate(saved["rng"])
    queue = batches(rows, cfg.batch_tokens, rng)[: saved["left"]]
    return saved["step"], saved["history"], saved["curve"], queue, saved["rng"]


def train(cfg: DraftTraining, samples: list[Path], heldout: Path, out: Path, log=print) -> dict:
    import torch

    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    draft, tokenizer, pad, rows, held, ids = prepare(cfg, samples, heldout, log)
    per_epoch = len(batches(rows, cfg.batch_tokens, rng))
    steps = max(1, round(cfg.epochs * per_epoch))
    head = Head.of(draft, ids)
    checkpoint = Checkpoint(out, cfg.checkpoint_every, fingerprint(cfg, rows, held))
    history, curve, trained_s = run_steps(
        draft, rows, held, pad, cfg, steps, head, rng, log, checkpoint
    )
    draft.eval()
    saving = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    if cfg.states:
        save_projection(draft, out)
    # 16-bit on disk keeps the repository small
    draft.to(torch.bfloat16).save_pretrained(out)
    tokenizer.save_pretrained(out)
    vocabulary_size = write_vocabulary(ids, out)
    stored = write_answers(rows, out, cfg.start)
    summary = {
        "config": asdict(cfg),
        "steps": steps,
        "wall_s": round(trained_s + time.perf_counter() - saving, 1),
        "answers": len(rows),
        "vocabulary": vocabulary_size,
        "stored_answer_tokens": stored,
        "answer_tokens": sum(len(r["ids"]) - r["prompt_tokens"] for r in rows),
        "answers_with_states": sum("states" in row for row in rows),
        "temperatures": sorted({r["temperature"] for r in rows if "temperature" in r}),
        "heldout_answers": len(held),
        "kinds": dict(Counter(kind_of(row) for row in rows).most_common()),
        "history": history,
        "heldout_curve": curve,
    }
    earlier = Path(cfg.start) / "training.json" if cfg.start else None
    if earlier and earlier.is_file():
        # the training this one went on from, so the card can tell the whole story
        summary["started_from"] = json.loads(earlier.read_text())
    (out / "training.json").write_text(json.dumps(summary, indent=1) + "\n")
    checkpoint.remove()
    return summary


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--samples",
        type=Path,
        nargs="+",
        required=True,
        help="target_samples' answers to train on (one file or more)",
    )
    parser.add_argument(
        "--heldout", type=Path, help="target_samples' answers to held-out requests (for training)"
    )
    parser.add_argument("--out", type=Path, required=True, help="the draft's folder")
    parser.add_argument(
        "--answers-only",
        action="store_true",
        help="write the store (answers.json) of the samples into --out, a draft's folder, and "
        "train nothing",
    )
    parser.add_argument(
        "--layers",
        type=int,
        default=DraftTraining.layers,
        help="the draft's layers (with --start: a draft with fewer is grown to this many)",
    )
    parser.add_argument("--epochs", type=float, default=DraftTraining.epochs)
    parser.add_argument("--lr", type=float, default=DraftTraining.lr)
    parser.add_argument(
        "--teacher-k",
        type=int,
        default=0,
        help="also learn the target's top-k chances at every answer position (0: its tokens alone)",
    )
    parser.add_argument("--start", default="", help="a draft folder to go on training from")
    parser.add_argument(
        "--with-store",
        action="store_true",
        help="with --start: learn that draft's stored answers (answers.json) again too",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    add_long_run_options(parser)
    return parser


def add_long_run_options(parser: argparse.ArgumentParser) -> None:
    """Checkpoints, and what else a longer run may train."""
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=DraftTraining.checkpoint_every,
        help="steps between checkpoints in --out (0: none); the same command run again goes on "
        "from the last one",
    )
    parser.add_argument(
        "--states",
        default="",
        help="a folder of the target's states (ouroboros_core.tools.target_states, a subfolder "
        "per answers file): the draft learns to read them (models.STATE_PROJECTION)",
    )
    parser.add_argument(
        "--stateless-too",
        action="store_true",
        help="with --states: keep the answers whose states are not written; they learn without "
        "one, as a step's later guesses run (default: left out)",
    )
    parser.add_argument(
        "--learn",
        choices=LEARNED,
        default=DraftTraining.learn,
        help="with --states, what the draft learns at each position whose next state is known: "
        "the token written (default), the target's own first choice, or that and all its chances "
        "(a sampled answer's token is one draw of many)",
    )
    parser.add_argument(
        "--train-embeddings",
        action="store_true",
        help="train the embeddings, and so the tied output layer, too (default: the target's)",
    )


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not (args.answers_only or args.heldout):
        parser.error("--heldout is needed to train (only --answers-only goes without)")
    for path in args.samples + ([args.heldout] if args.heldout else []):
        if not path.is_file():
            parser.error(f"{path}: no such file (make it with ouroboros_core.tools.target_samples)")
    if args.answers_only:
        if not (args.out / "config.json").is_file():
            parser.error(f"--out {args.out}: no draft there (its config.json is missing)")
        from ouroboros_core.lookup import ANSWERS_FILE

        rows = load_rows(args.samples)
        tokens = write_answers(rows, args.out)
        print(f"{len(rows):,} answers, {tokens:,} tokens, stored in {args.out / ANSWERS_FILE}")
        return
    if args.layers < 1 or args.epochs <= 0 or args.lr <= 0:
        parser.error("--layers must be at least 1, --epochs and --lr above 0")
    if args.learn != "written" and not args.states:
        parser.error(f"--learn {args.learn} reads the target's states: give --states")
    if args.learn == "chances" and args.teacher_k:
        parser.error("--learn chances already learns all the target's chances: drop --teacher-k")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = DraftTraining(
        layers=args.layers,
        epochs=args.epochs,
        lr=args.lr,
        teacher_k=args.teacher_k,
        start=args.start,
        with_store=args.with_store,
        checkpoint_every=args.checkpoint_every,
        train_embeddings=args.train_embeddings,
        states=args.states,
        stateless_too=args.stateless_too,
        learn=args.learn,
    )
    train(cfg, args.samples, args.heldout, args.out)


if __name__ == "__main__":
    main()
