"""What fusing a layer's q/k/v projections, and its gate/up projections, into one packed product
each would save on the default target's shapes (SmolLM2-135M: hidden 576, key/value 192, MLP 1536,
30 layers), measured on random weights through the oneDNN path packed.py uses.

    PYTHONPATH=. python3 docs/bench-runs/smollm2-fused-linears.py THREADS

Per row count (1: a vanilla step, 6: an Ouroboros verification), the five products apart against
the two fused ones, alternating, 30 rounds of 30 calls; medians per layer and for the 30 layers."""

import statistics
import sys
import time

import torch

HIDDEN, KV, MLP, LAYERS = 576, 192, 1536, 30


def packed(weight):
    return torch.ops.mkldnn._reorder_linear_weight(weight, 16)


def product(rows, weight):
    return torch.ops.mkldnn._linear_pointwise(rows, weight, None, "none", [], "")


def median_us(call, rounds=30, calls=30):
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(times)


def main():
    torch.set_num_threads(int(sys.argv[1]))
    shapes = {"q": HIDDEN, "k": KV, "v": KV, "gate": MLP, "up": MLP}
    weights = {name: torch.randn(rows, HIDDEN) for name, rows in shapes.items()}
    apart = [packed(weight) for weight in weights.values()]
    qkv = packed(torch.cat([weights["q"], weights["k"], weights["v"]]))
    gate_up = packed(torch.cat([weights["gate"], weights["up"]]))
    for count in (1, 6):
        rows = torch.randn(count, HIDDEN)
        separate, fused = [], []
        for _ in range(5):
            separate.append(median_us(lambda: [product(rows, w) for w in apart]))
            fused.append(median_us(lambda: (product(rows, qkv), product(rows, gate_up))))
        a, b = statistics.median(separate), statistics.median(fused)
        saved_ms = (a - b) * LAYERS / 1e3
        print(
            f"{count} rows: apart {a:.0f} us, fused {b:.0f} us a layer; {saved_ms:.2f} ms a forward"
        )


main()
