"""Cost of one 100-draw point of the softmax-vs-linear experiments (target: well under a second on CPU).

For each model at its figure defaults (configs/deng2023), times ``run_point`` with all draws in one batch
against the same draws evaluated one network at a time, side by side in one run, and prints the ratio.

    PYTHONPATH=src python benchmarks/softmax_vs_linear_point.py [--trials 100] [--device cpu]
"""
from __future__ import annotations

import argparse
import time

import torch

from sepbench.theory.softmax_vs_linear import Setting, run_point

POINTS = {
    "fig3 toy (n=500, m=8)": ("toy", dict(n=500, C=2.0, tau=0.5, m=8)),
    "fig4 self App. D (n=128, d=256, k=16)": ("self", dict(n=128, d=256, k=16, C=4.0, tau=1.5, m=8)),
    "fig5 self App. E (n=256, d=256, k=16)": ("self", dict(n=256, d=256, k=16, tau=1.5, m=8, variant="E")),
    "fig7 cross (n=1024, d=64)": ("cross", dict(n=1024, d=64, tau=0.5, m=8)),
}
TARGET_SECONDS = 1.0


def best_of(repeats: int, run) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 keeps shared machines fair)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{'point':42s} {'batched s':>10s} {'float64 s':>10s} {'one-by-one s':>13s} {'speed-up':>9s}  target")
    for label, (model, params) in POINTS.items():
        setting = Setting.from_flat(model, params)
        run_point(setting, 2, 0, device=args.device)
        batched = best_of(args.repeats, lambda: run_point(setting, args.trials, 0, device=args.device))
        double = best_of(args.repeats, lambda: run_point(setting, args.trials, 0, dtype=torch.float64, device=args.device))
        one_by_one = best_of(1, lambda: [run_point(setting, 1, seed, device=args.device) for seed in range(args.trials)])
        verdict = "ok" if batched < TARGET_SECONDS else "SLOW"
        print(f"{label:42s} {batched:10.3f} {double:10.3f} {one_by_one:13.3f} {one_by_one / batched:8.1f}x  "
              f"{verdict} (< {TARGET_SECONDS:g} s per {args.trials} draws, float32)")


if __name__ == "__main__":
    main()
