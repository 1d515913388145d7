"""Generation speed of the CoT tasks at the paper's largest sizes, side by side, on one core.

    PYTHONPATH=src python benchmarks/cot_generation.py             # 100,000 samples per task, projected to 1M
    PYTHONPATH=src python benchmarks/cot_generation.py --quick     # 10,000 samples per task

Target (issue 5): materialising 1,000,000 training samples of any task at the paper's largest size takes
under 2 minutes on 2 cores. Rows are generated in chunks as ``CotTask.sample_split`` does; the projection
to 1M is linear in the sample count (the deduplication is O(N log N) but small next to generation).
Generation is single-threaded numpy, so the verdict uses CPU seconds (robust to other load on the
machine) against the target's budget of 2 cores x 120 s = 240 CPU seconds.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from sepbench.tasks import build_task

LARGEST = {"arithmetic": 16, "edit_distance": 20, "ed_local": 20, "lis": 250}
TARGET_SECONDS, TARGET_SAMPLES = 120.0, 1_000_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=50_000)
    parser.add_argument("--quick", action="store_true", help="10,000 samples per task")
    args = parser.parse_args()
    samples = 10_000 if args.quick else args.samples
    print(f"{'task':<15}{'size':>6}{'samples':>10}{'wall s':>10}{'CPU s':>9}{'per CPU s':>12}{'1M CPU s (proj.)':>18}{'target':>8}")
    for name, size in LARGEST.items():
        task = build_task(name, size)
        rng = np.random.default_rng(0)
        start, cpu_start = time.perf_counter(), time.process_time()
        done = 0
        while done < samples:
            rows, _ = task.generate_rows(min(args.chunk, samples - done), rng, train=True)
            done += len(rows)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        projected = cpu * TARGET_SAMPLES / samples
        verdict = "ok" if projected / 2 <= TARGET_SECONDS else "over"
        print(f"{name:<15}{size:>6}{samples:>10}{seconds:>10.2f}{cpu:>9.2f}{samples / cpu:>12.0f}{projected:>18.1f}{verdict:>8}")
    print(f"target: {TARGET_SAMPLES:,} samples in {TARGET_SECONDS:.0f} s on 2 cores, i.e. {2 * TARGET_SECONDS:.0f} s on one")


if __name__ == "__main__":
    main()
