"""The target's own state over its stored answers, for a draft that reads it (train_draft
--states): at every answer position, the target's final (normed) hidden state one position before,
the input its output layer reads there. Written in parts of PART_ROWS answers, bfloat16, outside
git; a part on disk is kept, so a stopped run goes on where it stopped.

    python3 -m ouroboros_core.tools.target_states --pair smollm2 \\
        --answers data/broad/answers-train.jsonl --out /work/states/broad-train

A draft at input position p reads the state at p - 1, so an answer of n tokens after a prompt of
P needs the states at P - 2 ... P + n - 3: part[k] is an (n, width) tensor for the file's answer k.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from .draft_loss import STATE_LAYER, batches, load_rows, padded

PART_ROWS = 250


def answer_states(row: dict, hidden):
    """The states an answer's positions read: hidden (tokens, width) over the row's ids -> (answer
    tokens, width)."""
    start = row["prompt_tokens"] - 2
    return hidden[start : len(row["ids"]) - 2]


def part_path(out: Path, number: int) -> Path:
    return out / f"part-{number:05d}.pt"


def write_part(target, rows: list[dict], pad: int, path: Path, batch_tokens: int) -> None:
    """The states of `rows` (in order) into `path`, written whole or not at all."""
    import torch

    states: dict[int, torch.Tensor] = {}
    order = {id(row): k for k, row in enumerate(rows)}
    with torch.no_grad():
        for batch in batches(rows, batch_tokens, random.Random(0)):
            ids, mask, _ = padded(batch, pad)
            hidden = target.model(input_ids=ids, attention_mask=mask).last_hidden_state
            for i, row in enumerate(batch):
                states[order[id(row)]] = answer_states(row, hidden[i]).to(torch.bfloat16).clone()
    lengths = [len(row["ids"]) for row in rows]
    temporary = path.with_suffix(".tmp")
    torch.save({"lengths": lengths, "states": [states[k] for k in range(len(rows))]}, temporary)
    temporary.rename(path)


def read_states(out: Path, rows: list[dict]) -> int:
    """Adds "states" to each row of an answers file (in the file's order) whose part is on disk;
    returns how many rows got them. A part whose lengths differ from the rows' is refused."""
    import torch

    done = 0
    for number in range(0, (len(rows) + PART_ROWS - 1) // PART_ROWS):
        path = part_path(out, number)
        if not path.exists():
            continue
        part = torch.load(path)
        chunk = rows[number * PART_ROWS : (number + 1) * PART_ROWS]
        if part["lengths"] != [len(row["ids"]) for row in chunk]:
            raise ValueError(f"{path} was written from other answers than these")
        for row, states in zip(chunk, part["states"]):
            row["states"] = states
        done += len(chunk)
    return done


def attach_projection(draft, target_width: int, start: str = "") -> None:
    """Gives the draft a projection of the target's state (trained with it, in its parameters):
    the start folder's where it has one, else zeros, so training starts from the draft as it was."""
    import torch

    from ouroboros_core.models import STATE_PROJECTION, read_projection

    layer = torch.nn.Linear(target_width, draft.config.hidden_size, bias=False)
    with torch.no_grad():
        saved = Path(start) / STATE_PROJECTION if start else None
        if saved is not None and saved.is_file():
            layer.weight.copy_(read_projection(saved, draft).float())
        else:
            layer.weight.zero_()
    draft.add_module(STATE_LAYER, layer)


def save_projection(draft, out: Path) -> None:
    """Takes the projection off the draft and writes it to the folder (models.STATE_PROJECTION)."""
    import torch
    from safetensors.torch import save_file

    from ouroboros_core.models import STATE_PROJECTION

    layer = getattr(draft, STATE_LAYER)
    delattr(draft, STATE_LAYER)
    weight = layer.weight.detach().to(torch.bfloat16).contiguous()
    save_file({"weight": weight}, out / STATE_PROJECTION)


def with_states(rows: list[dict], folder: Path, log=print, keep_all: bool = False) -> list[dict]:
    """The rows of one answers file (in the file's order) that have their states in `folder`,
    those states added; says how many are left out for want of them. keep_all keeps those too:
    they train without a state, as a step's later guesses run."""
    if not folder.is_dir():
        raise SystemExit(f"{folder}: no states there (make them with {__name__})")
    read_states(folder, rows)
    kept = [row for row in rows if "states" in row]
    if len(kept) < len(rows):
        fate = "kept, without a state" if keep_all else "left out"
        log(f"{len(rows) - len(kept)} of {len(rows)} answers have no states in {folder}: {fate}")
    return rows if keep_all else kept


def main() -> None:
    import torch

    from ..models import load_target_of

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", default="smollm2", help="the preset whose target answers")
    parser.add_argument("--answers", type=Path, required=True, help="target_samples' output")
    parser.add_argument("--out", type=Path, required=True, help="a folder for the parts")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-tokens", type=int, default=4096)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = load_rows([args.answers])
    target, tokenizer = load_target_of(args.pair)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    parts = (len(rows) + PART_ROWS - 1) // PART_ROWS
    started = time.perf_counter()
    for number in range(parts):
        path = part_path(args.out, number)
        chunk = rows[number * PART_ROWS : (number + 1) * PART_ROWS]
        if path.exists() and torch.load(path)["lengths"] == [len(row["ids"]) for row in chunk]:
            continue  # written before (a last part the file has grown past is written again)
        write_part(target, chunk, pad, path, args.batch_tokens)
        print(f"part {number + 1}/{parts}: {time.perf_counter() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
