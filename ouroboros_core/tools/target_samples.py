r"""The target's own writing, for the draft to learn from (on-policy distillation, as in
DistillSpec).

    python3 -m ouroboros_core.tools.target_samples --out RUN/samples.jsonl    # ~30 min on 2 cores
    python3 -m ouroboros_core.tools.train_pair --init assets/models --models draft \
        --samples RUN/samples.jsonl ...

A draft trained on the corpus learns how people write; at run time it has to guess what the target
writes, greedy or sampled, which drifts from the corpus (the target's own habits, repeats, its
sampled detours). Prompts are function stubs from the training corpus (the standard library), never
from the held-out text or HumanEval; each stub is continued at one of several temperatures, so the
draft sees greedy and sampled text. One JSON line per sample: {"id", "temperature",
"prompt_tokens", "ids"} with ids = prompt + continuation.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import sysconfig
import time
from pathlib import Path

from .corpus import EOS, function_stubs, stdlib_files

MODELS = Path(__file__).resolve().parents[2] / "assets" / "models"
# 0 is greedy; the page offers 0-1.5, visitors mostly stay below 1
TEMPERATURES = (0.0, 0.3, 0.8, 1.0)
TOP_P = 0.95  # the bench's and the page's default nucleus


def stub_prompts(limit: int | None, seed: int, max_chars: int = 1500) -> list[dict]:
    """Every documented function of the training corpus as a stub, shuffled; long stubs left out (a
    prompt of a page of docstring teaches little about the code that follows)."""
    stubs = [
        stub
        for stub in function_stubs(
            stdlib_files(), Path(sysconfig.get_paths()["stdlib"]), per_file=None
        )
        if len(stub["prompt"]) <= max_chars
    ]
    random.Random(seed).shuffle(stubs)
    return stubs[:limit] if limit else stubs


def sample_batch(
    target, encoded: list[list[int]], eos: int, pad: int, temperature: float, max_new_tokens: int
) -> list[tuple[int, list[int]]]:
    """The target's continuations of a batch of encoded prompts (left-padded together), each cut
    after its first EOS: (prompt tokens, prompt + continuation ids) per prompt. A row leaves the
    batch (and its cache) when it ends: about 4 in 10 answers run to the limit and the rest end
    near two thirds of it, so a batch that kept its ended rows would compute a third for nothing."""
    import torch
    from transformers import DynamicCache

    width = max(map(len, encoded))
    step = torch.tensor([[pad] * (width - len(ids)) + ids for ids in encoded])
    mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in encoded])
    cache, live, answers = DynamicCache(config=target.config), list(range(len(encoded))), {}
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -step.shape[1] :]
            logits = (
                target(
                    input_ids=step,
                    attention_mask=mask,
                    position_ids=positions,
                    past_key_values=cache,
                    use_cache=True,
                    logits_to_keep=1,
                )
                .logits[:, -1]
                .float()
            )
            chosen = next_tokens(logits, temperature)
            tokens = chosen.tolist()
            for row, token in zip(live, tokens):
                answers.setdefault(row, []).append(token)
            keep = [i for i, token in enumerate(tokens) if token != eos]
            if not keep:
                break
            if len(keep) < len(live):
                index = torch.tensor(keep)
                cache.batch_select_indices(index)
                mask, chosen, live = mask[index], chosen[index], [live[i] for i in keep]
            mask = torch.cat([mask, mask.new_ones(len(live), 1)], dim=1)
            step = chosen[:, None]
    return [(len(ids), ids + answers[row]) for row, ids in enumerate(encoded)]


def next_tokens(logits, temperature: float, top: int = 1024):
    """Each row's next token: its best, or a draw at `temperature` from its TOP_P nucleus. A row's
    nucleus is read from its `top` likeliest tokens where they hold it (sorting the whole
    vocabulary for every row took a third of a sampled batch's time), else from all of them."""
    import torch

    from ouroboros_core.sampling import nucleus

    if not temperature:
        return logits.argmax(-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    best, ids = probs.topk(min(top, probs.shape[-1]), dim=-1)
    kept = best.masked_fill(best.cumsum(-1) - best >= TOP_P, 0.0)
    chosen = ids.gather(-1, torch.multinomial(kept, 1)).squeeze(-1)
    wide = best.cumsum(-1)[:, -1] < TOP_P  # rows whose nucleus reaches past their top tokens
    if wide.any():
        chosen[wide] = torch.multinomial(nucleus(probs[wide], TOP_P), 1).squeeze(-1)
    return chosen


def write_samples(
    target,
    encode,
    eos: int,
    stubs: list[dict],
    out: Path,
    max_new_tokens: int,
    batch_size: int,
    log=print,
    temperatures: tuple[float, ...] = TEMPERATURES,
) -> int:
    """Continue every stub (`encode(stub)` gives its ids) at its temperature (they take turns),
    appending to `out` batch by batch, so an interrupted run keeps what it made and a rerun picks up
    after it. Returns the number of new tokens."""
    batches = pending_batches(encode, stubs, out, batch_size, temperatures)
    started, new_tokens = time.perf_counter(), 0
    out.parent.mkdir(parents=True, exist_ok=True)
    for number, batch in enumerate(batches, 1):
        temperature = batch[0][1]
        rows = sample_batch(
            target, [encode(stub) for stub, _ in batch], eos, eos, temperature, max_new_tokens
        )
        new_tokens += append_samples(out, batch, rows)
        elapsed = time.perf_counter() - started
        left_min = elapsed / number * (len(batches) - number) / 60
        log(
            f"batch {number}/{len(batches)} (T {temperature}): {new_tokens:,} new tokens, "
            f"{new_tokens / elapsed:.0f} tokens/s, about {left_min:.0f} min left"
        )
    return new_tokens


def pending_batches(
    encode, stubs: list[dict], out: Path, batch_size: int, temperatures: tuple[float, ...]
) -> list[list[tuple[dict, float]]]:
    """The stubs `out` does not hold yet, each with its temperature, in batches of one temperature
    and similar prompt lengths (less padding), the temperatures interleaved so that a partial file
    has them all."""
    done = set()
    if out.exists():
        done = {json.loads(line)["id"] for line in out.read_text().splitlines() if line.strip()}
    todo = [
        (stub, temperatures[i % len(temperatures)])
        for i, stub in enumerate(stubs)
        if stub["id"] not in done
    ]
    batches = []
    for temperature in dict.fromkeys(temperatures):
        group = sorted(
            (item for item in todo if item[1] == temperature), key=lambda item: len(encode(item[0]))
        )
        batches += capped(group, batch_size, lambda item: len(encode(item[0])))
    random.Random(len(todo)).shuffle(batches)
    return batches


# A batch's prompts and answers together stay under this many padded tokens: long passages to
# summarize go a few at a time, short questions many at a time.
BATCH_TOKENS = 24_000
ANSWER_ROOM = 192


def capped(group: list, batch_size: int, length) -> list[list]:
    """`group` (sorted by length) cut into batches of at most batch_size items and BATCH_TOKENS
    padded tokens, answers counted at ANSWER_ROOM tokens each."""
    batches, current = [], []
    for item in group:
        if current and (
            len(current) == batch_size
            or (length(item) + ANSWER_ROOM) * (len(current) + 1) > BATCH_TOKENS
        ):
            batches.append(current)
            current = []
        current.append(item)
    return batches + ([current] if current else [])


def append_samples(out: Path, batch: list[tuple[dict, float]], rows: list) -> int:
    """One JSON line per sample of the batch, appended to `out`; returns the new tokens in them."""
    new_tokens = 0
    with out.open("a") as file:
        for (stub, temperature), (prompt_tokens, ids) in zip(batch, rows):
            new_tokens += len(ids) - prompt_tokens
            line = {
                "id": stub["id"],
                "temperature": temperature,
                "prompt_tokens": prompt_tokens,
                "ids": ids,
            }
            file.write(json.dumps(line) + "\n")
    return new_tokens


def add_request_args(parser: argparse.ArgumentParser) -> None:
    """--requests and --temperatures: which requests the target answers, and how."""
    parser.add_argument(
        "--requests",
        type=Path,
        default=None,
        help='with --pair smollm2: a JSONL file of {"id", "prompt", "chat"} requests to answer '
        "(broad_requests writes one) instead of chat_requests' code requests",
    )
    parser.add_argument(
        "--temperatures",
        default=None,
        help="comma-separated temperatures the requests take turns at (default: "
        + ",".join(map(str, TEMPERATURES))
        + "; greedy only with --heldout)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="JSON-lines file (appended to; a rerun resumes)"
    )
    parser.add_argument(
        "--models", type=Path, default=MODELS, help="the pair's folder (its target/ writes)"
    )
    parser.add_argument(
        "--pair",
        choices=["demo", "smollm2"],
        default="demo",
        help="demo: the embedded pair's target continues standard-library stubs; smollm2: the "
        "default preset's target answers chat_requests' training requests",
    )
    parser.add_argument(
        "--heldout",
        action="store_true",
        help="with --pair smollm2: the held-out requests (pip's), greedy only, for the draft's "
        "card",
    )
    add_request_args(parser)
    parser.add_argument(
        "--limit", type=int, default=None, help="how many stubs (default: all of them)"
    )
    parser.add_argument(
        "--skip",
        type=int,
        default=0,
        help="leave out the first N requests (or stubs), which an earlier file answered",
    )
    parser.add_argument("--max-new-tokens", type=int, default=192)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--seed", type=int, default=0, help="which stubs come first, and the sampling"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.max_new_tokens < 1 or args.batch_size < 1:
        parser.error("--max-new-tokens and --batch-size must be at least 1")
    if args.skip < 0:
        parser.error("--skip must be 0 or more")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.pair == "smollm2":
        new_tokens = smollm2_answers(args)
    else:
        if not (args.models / "target" / "config.json").is_file():
            parser.error(f"--models {args.models}: no target/config.json there")
        new_tokens = demo_continuations(args)
    print(f"{new_tokens:,} new tokens written to {args.out}")


def smollm2_answers(args) -> int:
    """The default preset's target answers chat_requests' training requests (or, with --heldout,
    the held-out ones, greedy only)."""
    from ouroboros_core.models import load_target_of

    from .chat_requests import heldout_requests, training_requests

    target, tokenizer = load_target_of("smollm2", log=print)
    if args.requests:
        stubs = [json.loads(line) for line in args.requests.read_text().splitlines() if line]
        stubs = stubs[: args.limit] if args.limit else stubs
    else:
        stubs = (
            heldout_requests(args.limit)
            if args.heldout
            else training_requests(args.limit, args.seed)
        )
    stubs = stubs[args.skip :]
    temperatures = (0.0,) if args.heldout else TEMPERATURES
    if args.temperatures:
        temperatures = tuple(float(t) for t in args.temperatures.split(","))
    encode = functools.lru_cache(maxsize=None)(
        lambda text, chat: tuple(encoded(tokenizer, text, chat))
    )
    print(f"{len(stubs)} requests, temperatures {temperatures}, top-p {TOP_P}")
    return write_samples(
        target,
        lambda stub: list(encode(stub["prompt"], stub["chat"])),
        tokenizer.eos_token_id,
        stubs,
        args.out,
        args.max_new_tokens,
        args.batch_size,
        temperatures=temperatures,
    )


def demo_continuations(args) -> int:
    """The embedded pair's target continues stubs of the standard library's documented
    functions."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.models / "target")
    target = AutoModelForCausalLM.from_pretrained(
        args.models / "target", dtype=torch.float32
    ).eval()
    stubs = stub_prompts(args.limit, args.seed)[args.skip :]
    print(
        f"{len(stubs)} stubs from the standard library, temperatures {TEMPERATURES}, top-p {TOP_P}"
    )
    return write_samples(
        target,
        lambda stub: tokenizer(stub["prompt"])["input_ids"],
        tokenizer.convert_tokens_to_ids(EOS),
        stubs,
        args.out,
        args.max_new_tokens,
        args.batch_size,
    )


def encoded(tokenizer, text: str, chat: bool) -> list[int]:
    """A request's ids as the engine encodes it: a user turn through the chat template, or the raw
    text."""
    if chat:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer(text)["input_ids"]


if __name__ == "__main__":
    main()
