"""Cost of one 100-draw point of the softmax-vs-linear experiments (target: well under a second on CPU).

For each model at its figure defaults (configs/deng2023), times ``run_point`` with all draws in one batch
against the same draws evaluated one network at a time, side by side in one run, and prints the ratio.

    PYTHONPATH=src python benchmarks/softmax_vs_linear_point.py [--quick] [--trials 100] [--device cpu]
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


def best_of(repeats: int, run) -> tuple[float, float]:
    """Fastest (wall, process CPU) seconds of ``repeats`` runs; CPU time shows the cost on a busy machine too."""
    times = []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        times.append((time.perf_counter() - wall, time.process_time() - cpu))
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 keeps shared machines fair)")
    parser.add_argument("--quick", action="store_true", help="one repeat per timing (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 1
    torch.set_num_threads(args.threads)
    print(f"{args.trials} draws per point, {args.threads} thread(s); seconds are wall (process CPU)")
    print(f"{'point':40s} {'float32':>15s} {'float64':>15s} {'one by one':>15s} {'batched speed-up':>17s}  target")
    for label, (model, params) in POINTS.items():
        setting = Setting.from_flat(model, params)
        run_point(setting, 2, 0, device=args.device)
        batched = best_of(args.repeats, lambda: run_point(setting, args.trials, 0, device=args.device))
        double = best_of(args.repeats, lambda: run_point(setting, args.trials, 0, dtype=torch.float64, device=args.device))
        one_by_one = best_of(1, lambda: [run_point(setting, 1, seed, device=args.device) for seed in range(args.trials)])
        verdict = "ok" if batched[0] < TARGET_SECONDS else ("ok in CPU time" if batched[1] < TARGET_SECONDS else "SLOW")
        cells = " ".join(f"{wall:6.3f} ({cpu:6.3f})" for wall, cpu in (batched, double, one_by_one))
        print(f"{label:40s} {cells} {one_by_one[0] / batched[0]:16.1f}x  {verdict} (< {TARGET_SECONDS:g} s, float32)")


if __name__ == "__main__":
    main()
