r"""Train the embedded demo pair: a deep target and a shallow, wide draft that share one tokenizer.

    # the full run (background job, about 2.3 h on 2 cores)
    python3 -m ouroboros_core.tools.train_pair --out RUN
    # then the draft alone, 8 min: the committed pair (147 min in all)
    python3 -m ouroboros_core.tools.train_pair --init RUN --models draft --steps 500 --lr 5e-4 \
        --warmup 20 --distill-weight 1.0
    # a few steps on a small corpus
    python3 -m ouroboros_core.tools.train_pair --smoke --out /tmp/pair

The corpus is the Python standard library's own source (PSF licence), which every machine with
Python has. Both models train in the same loop on the same batches; the draft also learns from the
target's (detached) next-token distribution, which raises draft/target agreement at no extra target
cost.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import asdict, replace
from pathlib import Path

from .corpus import EOS, load_corpus, train_tokenizer
from .pair_trainer import ModelShape, PairTrainer, TrainConfig


def build_model(shape: ModelShape, vocab_size: int, eos_id: int, seq_len: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=shape.width,
        intermediate_size=shape.ffn,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
    )
    model = LlamaForCausalLM(config)
    # GPT-2's depth-scaled init of the projections that write into the residual stream, so a deep,
    # narrow target starts as calmly as a shallow one instead of lagging it for hundreds of steps.
    import torch

    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.o_proj, layer.mlp.down_proj):
                proj.weight.normal_(0.0, config.initializer_range / math.sqrt(2 * shape.layers))
    return model


def tokenized_corpus(cfg: TrainConfig, log):
    """The corpus, its tokenizer (trained here, or the continued run's) and all of it as one id
    stream."""
    import torch

    docs = load_corpus(cfg.max_corpus_chars)
    log(f"corpus: {len(docs)} files, {sum(map(len, docs)):,} chars")
    if cfg.init:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(Path(cfg.init) / "target")
    else:
        tokenizer = train_tokenizer(docs, cfg.vocab_size)
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    ids = []
    for doc in docs:
        ids.extend(tokenizer(doc)["input_ids"])
        ids.append(eos_id)
    log(f"tokens: {len(ids):,} ({sum(map(len, docs)) / len(ids):.2f} chars/token)")
    return docs, tokenizer, torch.tensor(ids, dtype=torch.long)


def sample_stream(path: str, eos_id: int):
    """target_samples' continuations as one id stream, each ending in EOS as the corpus files do,
    and what the file held (for training.json)."""
    import torch

    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    ids = []
    for row in rows:
        ids += row["ids"] if row["ids"][-1] == eos_id else row["ids"] + [eos_id]
    about = {
        "count": len(rows),
        "tokens": len(ids),
        "temperatures": sorted({row["temperature"] for row in rows}),
    }
    return torch.tensor(ids, dtype=torch.long), about


def initial_models(cfg: TrainConfig, vocab_size: int, eos_id: int):
    import torch

    if cfg.init:
        from transformers import AutoModelForCausalLM

        return tuple(
            AutoModelForCausalLM.from_pretrained(Path(cfg.init) / name, dtype=torch.float32)
            for name in ("target", "draft")
        )
    return (
        build_model(cfg.target, vocab_size, eos_id, cfg.seq_len),
        build_model(cfg.draft, vocab_size, eos_id, cfg.seq_len),
    )


def save_pair(out: Path, target, draft, tokenizer, eos_id: int) -> None:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    for name, model in (("target", target), ("draft", draft)):
        model.generation_config.eos_token_id = eos_id
        model.generation_config.pad_token_id = eos_id
        model.generation_config.bos_token_id = eos_id
        model.to(torch.bfloat16).save_pretrained(out / name)  # 16-bit on disk keeps the pair small
        tokenizer.save_pretrained(out / name)


def train(cfg: TrainConfig, out: Path, log=print) -> dict:
    import torch

    started = time.perf_counter()
    previous = json.loads((Path(cfg.init) / "training.json").read_text()) if cfg.init else None
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    docs, tokenizer, data = tokenized_corpus(cfg, log)
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    samples, about_samples = sample_stream(cfg.samples, eos_id) if cfg.samples else (None, None)
    if samples is not None:
        log(f"target samples: {len(samples):,} tokens")
    trainer = PairTrainer(cfg, *initial_models(cfg, len(tokenizer), eos_id), data, samples)
    history = []
    curve = []  # held-out figures as training goes: shows whether more steps would still help
    for step in range(cfg.steps):
        row = trainer.step(step)
        if step % 25 == 0 or step == cfg.steps - 1:
            history.append({**row, "elapsed_s": round(time.perf_counter() - started, 1)})
            log(json.dumps(history[-1]))
        if cfg.eval_every and ((step + 1) % cfg.eval_every == 0 or step == cfg.steps - 1):
            curve.append({"step": step + 1, **trainer.heldout(tokenizer)})
            log(json.dumps({"heldout": curve[-1]}))
    wall = time.perf_counter() - started
    save_pair(out, trainer.target, trainer.draft, tokenizer, eos_id)
    summary = {
        "config": asdict(cfg),
        "corpus_files": len(docs),
        "corpus_chars": sum(map(len, docs)),
        "corpus_tokens": len(data),
        "wall_s": round(wall, 1),
        "history": history,
        "heldout_curve": curve,
    }
    if about_samples:
        summary["samples"] = about_samples
    # the run this one continued, so the card can give the whole story
    if previous:
        summary["previous"] = previous
    (out / "training.json").write_text(json.dumps(summary, indent=1))
    return summary


# --smoke: a few steps on a small corpus (CI)
SMOKE = TrainConfig(
    vocab_size=512,
    seq_len=64,
    batch_size=4,
    steps=4,
    warmup=2,
    max_corpus_chars=200_000,
    eval_every=2,
    eval_chars=5_000,
    target=ModelShape(2, 64, 2, 128),
    draft=ModelShape(1, 64, 2, 128),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parents[2] / "assets" / "models"
    )
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="a few steps on a small corpus (CI)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument(
        "--init",
        type=Path,
        default=None,
        help="continue a finished run from its folder (tokenizer and weights)",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        choices=("target", "draft"),
        default=None,
        help="which models train (default both); the others are saved unchanged",
    )
    parser.add_argument("--lr", type=float, default=None, help="peak learning rate")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps")
    parser.add_argument(
        "--distill-weight",
        type=float,
        default=None,
        help="share of the draft's loss that is distillation from the target (0-1)",
    )
    add_sample_args(parser)
    parser.add_argument(
        "--fp32",
        action="store_true",
        help="no bfloat16 autocast (for CPUs without native bfloat16, where it is slower)",
    )
    return parser


def add_sample_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--samples",
        type=Path,
        default=None,
        help="target_samples' JSON lines: the target's own text, mixed into every batch",
    )
    parser.add_argument(
        "--samples-share",
        type=float,
        default=None,
        help="share of each batch's rows cut from --samples (0-1, default 0.5)",
    )


def check_args(parser: argparse.ArgumentParser, args) -> None:
    """Settings out of range and files that are not there, each as the parser's usage error."""
    if args.distill_weight is not None and not 0 <= args.distill_weight <= 1:
        parser.error(f"--distill-weight {args.distill_weight}: must be between 0 and 1")
    if args.samples_share is not None and not 0 <= args.samples_share <= 1:
        parser.error(f"--samples-share {args.samples_share}: must be between 0 and 1")
    if args.samples and not args.samples.is_file():
        parser.error(
            f"--samples {args.samples}: no such file "
            "(make one with ouroboros_core.tools.target_samples)"
        )
    if args.init and (
        not (args.init / "target" / "config.json").is_file()
        or not (args.init / "training.json").is_file()
    ):
        parser.error(
            f"--init {args.init}: no finished run there "
            "(target/config.json or training.json missing)"
        )


def config_from_args(args) -> TrainConfig:
    """The full run's settings (or the smoke run's) with the arguments given over them; a
    continued run keeps the vocabulary, context and shapes of the run it continues."""
    cfg = replace(SMOKE if args.smoke else TrainConfig(), seed=args.seed)
    overrides = {
        "steps": args.steps,
        "lr": args.lr,
        "warmup": args.warmup,
        "distill_weight": args.distill_weight,
        "samples": str(args.samples) if args.samples else None,
        "samples_share": args.samples_share,
        "init": str(args.init) if args.init else None,
        "models": tuple(args.models) if args.models else None,
        "bf16": False if args.fp32 else None,
    }
    cfg = replace(cfg, **{key: value for key, value in overrides.items() if value is not None})
    if args.init:
        before = json.loads((args.init / "training.json").read_text())["config"]
        cfg = replace(
            cfg,
            vocab_size=before["vocab_size"],
            seq_len=before["seq_len"],
            target=ModelShape(**before["target"]),
            draft=ModelShape(**before["draft"]),
        )
    return cfg


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    check_args(parser, args)
    train(config_from_args(args), args.out)


if __name__ == "__main__":
    main()
