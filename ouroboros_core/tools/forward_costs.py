r"""What one target forward costs by its number of rows, with torch's own linear layers and with
packed ones.

    python3 -m ouroboros_core.tools.forward_costs --target smollm2 --threads 2 \
        --out docs/bench-runs/forward-costs.json

A verification forward feeds the token the target has not seen plus the draft's trunk and branches:
its cost against a one-row (vanilla) forward decides what every accepted token is worth. Each row
count is timed on a KV cache of `--past` tokens, stock and packed in turn, `--repeats` times; the
medians and their ratio to the one-row stock forward are printed and saved.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

ROWS = (1, 2, 4, 8, 12, 16)


def timed_forward(model, cache, past: int, rows: int, generator) -> float:
    import torch

    from ouroboros_core.tree import DraftTree, forward_tree, truncate

    tokens = torch.randint(0, model.config.vocab_size, (rows,), generator=generator).tolist()
    started = time.perf_counter()
    forward_tree(model, cache, tokens[:1], DraftTree.of(tokens[1:]))  # every row's logits
    seconds = time.perf_counter() - started
    truncate(cache, past)
    return seconds


def forward_medians(model, past: int, repeats: int) -> dict[tuple[str, int], float]:
    """(kind, rows) -> the median milliseconds of that forward, stock and packed in turn, on a KV
    cache of `past` random tokens."""
    import torch
    from transformers import DynamicCache

    from ouroboros_core.packed import unpacked

    generator = torch.Generator().manual_seed(0)
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(
            input_ids=torch.randint(0, model.config.vocab_size, (1, past), generator=generator),
            past_key_values=cache,
            use_cache=True,
        )
        times = {(kind, rows): [] for kind in ("stock", "packed") for rows in ROWS}
        for _ in range(repeats):
            for rows in ROWS:
                with unpacked(model):
                    times["stock", rows].append(timed_forward(model, cache, past, rows, generator))
                times["packed", rows].append(timed_forward(model, cache, past, rows, generator))
    return {key: 1000 * statistics.median(seen) for key, seen in times.items()}


def measure(target: str, threads: int, past: int, repeats: int) -> dict:
    """The table, with where it came from (bench_report.provenance)."""
    import torch

    from ouroboros_core import load_engine
    from ouroboros_core.packed import pack_linears
    from ouroboros_core.tools.bench_report import provenance

    torch.set_num_threads(threads)
    engine = load_engine(target, device="cpu", dtype="float32", watch_threads=False)
    model = engine.target
    # a small target too: the table says whether it would gain
    if not pack_linears(model, min_parameters=0):
        raise SystemExit(
            "the target cannot be packed (not float32 on a CPU, or oneDNN's check failed)"
        )
    ms = forward_medians(model, past, repeats)
    one = ms["stock", 1]
    table = [
        {
            "rows": rows,
            "stock_ms": round(ms["stock", rows], 1),
            "packed_ms": round(ms["packed", rows], 1),
            "stock_vs_one_row": round(ms["stock", rows] / one, 2),
            "packed_vs_one_row": round(ms["packed", rows] / one, 2),
        }
        for rows in ROWS
    ]
    return {
        "provenance": provenance(engine),
        "target": target,
        "threads": threads,
        "past": past,
        "repeats": repeats,
        "rows": table,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--target", default="smollm2", help="preset, folder or Hub id (a draft is not needed)"
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--past", type=int, default=200, help="tokens already in the KV cache")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", type=Path, help="write the table as JSON here")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.past < 1 or args.repeats < 1:
        parser.error("--threads, --past and --repeats must be at least 1")
    report = measure(args.target, args.threads, args.past, args.repeats)
    print(f"{'rows':>4} {'stock ms':>9} {'packed ms':>9}   (x one stock row)")
    for row in report["rows"]:
        print(
            f"{row['rows']:>4} {row['stock_ms']:>9} {row['packed_ms']:>9}   "
            f"{row['stock_vs_one_row']:.2f} / {row['packed_vs_one_row']:.2f}"
        )
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
