"""``torch.compile`` on a Transformer training step on CPU: is it worth it over a 2000-step run?

Run: ``PYTHONPATH=src python benchmarks/compile_step.py [--lengths 20,100,400] [--steps 2000] [--quick]``.
For each length it times eager and compiled steps (forward, backward, Adam) side by side, the compile time (the
first compiled step less an eager step), and counts the recompiles when the same compiled model meets another
sequence length; then prints what a ``steps``-step run costs either way. One intra-op thread.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch._dynamo  # noqa: E402

from sepbench.config import ModelConfig  # noqa: E402
from sepbench.models import build_model  # noqa: E402

VOCAB, BATCH = 70, 64


def step_fn(model: torch.nn.Module, forward, tokens: torch.Tensor):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(forward(tokens).flatten(0, 1), tokens.flatten()).backward()
        optimizer.step()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="20,100,400")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="length 20 only, 3 repeats, recompiles at 20 and 21")
    args = parser.parse_args()
    if args.quick:
        args.lengths, args.repeats = "20", 3
    torch.set_num_threads(1)
    print(f"transformer-(1, 64), batch {BATCH}, torch {torch.__version__}, {torch.get_num_threads()} thread")
    print(f"{'T':>5}{'eager ms':>16}{'compiled ms':>16}{'speed-up':>10}{'compile s':>11}"
          f"{'run eager s':>13}{'run compiled s':>16}")
    for length in (int(n) for n in args.lengths.split(",")):
        torch.manual_seed(0)
        model = build_model(ModelConfig(name="transformer", layers=1, width=64), VOCAB, length)
        tokens = torch.randint(0, VOCAB, (BATCH, length))
        eager = step_fn(model, model, tokens)
        eager()
        torch._dynamo.reset()
        compiled = step_fn(model, torch.compile(model), tokens)
        start = time.perf_counter()
        compiled()
        first = time.perf_counter() - start
        times: dict[str, list[float]] = {"eager": [], "compiled": []}
        for _ in range(args.repeats):
            for name, fn in (("eager", eager), ("compiled", compiled)):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
        e, c = (statistics.median(times[k]) for k in ("eager", "compiled"))
        compile_s = first - e
        print(f"{length:>5}{min(times['eager']) * 1e3:>8.1f}/{e * 1e3:<7.1f}{min(times['compiled']) * 1e3:>8.1f}/"
              f"{c * 1e3:<7.1f}{e / c:>10.2f}{compile_s:>11.1f}{args.steps * e:>13.1f}{compile_s + args.steps * c:>16.1f}",
              flush=True)
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = build_model(ModelConfig(name="transformer", layers=1, width=64), VOCAB, 400)
    forward = torch.compile(model)
    lengths = [20, 21] if args.quick else [20, 21, 100, 400]
    compiles = []
    for length in lengths:
        before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        start = time.perf_counter()
        step_fn(model, forward, torch.randint(0, VOCAB, (BATCH, length)))()
        compiles.append((length, torch._dynamo.utils.counters["stats"]["unique_graphs"] - before,
                         time.perf_counter() - start))
    print("one compiled model meeting new lengths (new graphs, seconds of that step): "
          + ", ".join(f"T={n}: {g} ({s:.1f} s)" for n, g, s in compiles))


if __name__ == "__main__":
    main()
