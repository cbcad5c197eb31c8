"""The target's own writing, for the draft to learn from (on-policy distillation, as in DistillSpec).

    python3 -m ouroboros_core.tools.target_samples --out RUN/samples.jsonl    # ~30 min on 2 cores
    python3 -m ouroboros_core.tools.train_pair --init assets/models --models draft --samples RUN/samples.jsonl ...

A draft trained on the corpus learns how people write; at run time it has to guess what the target writes,
greedy or sampled, which drifts from the corpus (the target's own habits, repeats, its sampled detours).
Prompts are function stubs from the training corpus (the standard library), never from the held-out text or
HumanEval; each stub is continued at one of several temperatures, so the draft sees greedy and sampled text.
One JSON line per sample: {"id", "temperature", "prompt_tokens", "ids"} with ids = prompt + continuation.
"""

from __future__ import annotations

import argparse
import json
import random
import sysconfig
import time
from pathlib import Path

from .corpus import EOS, function_stubs, stdlib_files

MODELS = Path(__file__).resolve().parents[2] / "assets" / "models"
TEMPERATURES = (0.0, 0.3, 0.8, 1.0)  # 0 is greedy; the page offers 0-1.5, visitors mostly stay below 1
TOP_P = 0.95  # the bench's and the page's default nucleus


def stub_prompts(limit: int | None, seed: int, max_chars: int = 1500) -> list[dict]:
    """Every documented function of the training corpus as a stub, shuffled; long stubs left out (a prompt
    of a page of docstring teaches little about the code that follows)."""
    stubs = [stub for stub in function_stubs(stdlib_files(), Path(sysconfig.get_paths()["stdlib"]), per_file=None)
             if len(stub["prompt"]) <= max_chars]
    random.Random(seed).shuffle(stubs)
    return stubs[:limit] if limit else stubs


def sample_batch(target, tokenizer, prompts: list[str], temperature: float,
                 max_new_tokens: int) -> list[tuple[int, list[int]]]:
    """The target's continuations of a batch of prompts (left-padded together), each cut after its first EOS:
    (prompt tokens, prompt + continuation ids) per prompt."""
    import torch

    eos = tokenizer.convert_tokens_to_ids(EOS)
    encoded = [tokenizer(prompt)["input_ids"] for prompt in prompts]
    width = max(map(len, encoded))
    input_ids = torch.tensor([[eos] * (width - len(ids)) + ids for ids in encoded])
    attention_mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in encoded])
    sampling = {"do_sample": True, "temperature": temperature, "top_p": TOP_P} if temperature else {"do_sample": False}
    with torch.no_grad():
        out = target.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=max_new_tokens,
                              pad_token_id=eos, eos_token_id=eos, top_k=None, **sampling)
    rows = []
    for ids, row in zip(encoded, out[:, width:].tolist()):
        if eos in row:
            row = row[: row.index(eos) + 1]
        rows.append((len(ids), ids + row))
    return rows


def write_samples(target, tokenizer, stubs: list[dict], out: Path, max_new_tokens: int, batch_size: int,
                  log=print) -> int:
    """Continue every stub at its temperature (they take turns), appending to `out` batch by batch, so an
    interrupted run keeps what it made and a rerun picks up after it. Returns the number of new tokens."""
    done = set()
    if out.exists():
        done = {json.loads(line)["id"] for line in out.read_text().splitlines() if line.strip()}
    todo = [(stub, TEMPERATURES[i % len(TEMPERATURES)]) for i, stub in enumerate(stubs) if stub["id"] not in done]
    batches = []
    for temperature in TEMPERATURES:  # one temperature per batch, similar prompt lengths together (less padding)
        group = sorted((item for item in todo if item[1] == temperature), key=lambda item: len(item[0]["prompt"]))
        batches += [group[i : i + batch_size] for i in range(0, len(group), batch_size)]
    random.Random(len(todo)).shuffle(batches)  # the temperatures interleave, so a partial file has them all
    started, new_tokens = time.perf_counter(), 0
    out.parent.mkdir(parents=True, exist_ok=True)
    for number, batch in enumerate(batches, 1):
        temperature = batch[0][1]
        rows = sample_batch(target, tokenizer, [stub["prompt"] for stub, _ in batch], temperature, max_new_tokens)
        with out.open("a") as file:
            for (stub, _), (prompt_tokens, ids) in zip(batch, rows):
                new_tokens += len(ids) - prompt_tokens
                file.write(json.dumps({"id": stub["id"], "temperature": temperature,
                                       "prompt_tokens": prompt_tokens, "ids": ids}) + "\n")
        elapsed = time.perf_counter() - started
        log(f"batch {number}/{len(batches)} (T {temperature}): {new_tokens:,} new tokens, "
            f"{new_tokens / elapsed:.0f} tokens/s, about {elapsed / number * (len(batches) - number) / 60:.0f} min left")
    return new_tokens


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="JSON-lines file (appended to; a rerun resumes)")
    parser.add_argument("--models", type=Path, default=MODELS, help="the pair's folder (its target/ writes)")
    parser.add_argument("--limit", type=int, default=None, help="how many stubs (default: all of them)")
    parser.add_argument("--max-new-tokens", type=int, default=192)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0, help="which stubs come first, and the sampling")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = parser.parse_args(argv)
    if args.max_new_tokens < 1 or args.batch_size < 1:
        parser.error("--max-new-tokens and --batch-size must be at least 1")
    if not (args.models / "target" / "config.json").is_file():
        parser.error(f"--models {args.models}: no target/config.json there")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.models / "target")
    target = AutoModelForCausalLM.from_pretrained(args.models / "target", dtype=torch.float32).eval()
    stubs = stub_prompts(args.limit, args.seed)
    print(f"{len(stubs)} stubs from the standard library, temperatures {TEMPERATURES}, top-p {TOP_P}")
    new_tokens = write_samples(target, tokenizer, stubs, args.out, args.max_new_tokens, args.batch_size)
    print(f"{new_tokens:,} new tokens written to {args.out}")


if __name__ == "__main__":
    main()
