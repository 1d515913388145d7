"""Data generation at the papers' scale, side by side with the reference generators, on one core.

    PYTHONPATH=src python benchmarks/cot_generation.py            # 1M + 100k split per CoT task (minutes)
    PYTHONPATH=src python benchmarks/cot_generation.py --quick    # 100k + 10k split, smaller side-by-side runs

For each CoT task at the paper's largest size:
- ``fresh``: rows per CPU second of ``generate_rows`` (the ``data: fresh`` path), and of the reference's loop;
- ``split``: CPU seconds and, from a second run, peak traced memory (tracemalloc, which counts numpy's buffers
  and would slow the timed run) of ``split_rows``
  for the protocol's train + test sets (the ``data: fixed`` path), and the reference's rows per CPU second
  building its sets (their sampling + Python-set dedup, same counts, scaled from a smaller run).
The reference is timed through ``sepbench.tasks.cot.reference``, a plain-Python restatement of Feng et al.'s
loops with the same kinds of random calls (Python ``random`` per draw for arithmetic, numpy ``RandomState`` per
draw for ED and LIS), one sample at a time, rows kept as tuples in a set as the reference keeps them (its file
writing is not timed). MQAR is timed against zoology's generator restated the same way (one
``RandomState.choice(..., replace=False)`` per row for keys and values, vocab 8192).
Targets: split < 120 CPU s and < 4 GB at 1M; >= 20x the reference everywhere.
"""
from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from sepbench.tasks import build_task
from sepbench.tasks.cot import reference

LARGEST = {"arithmetic": 16, "edit_distance": 20, "ed_local": 20, "lis": 250}
REFERENCE_OF = {"arithmetic": "arithmetic", "edit_distance": "edit_distance", "ed_local": "edit_distance", "lis": "lis"}


def cpu(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def reference_rate(name: str, size: int, rows: int) -> float:
    """Reference rows per CPU second, sampling and set-dedup as its generator does (train set only)."""
    return rows / cpu(lambda: reference.split(REFERENCE_OF[name], size, rows, 0, seed=0))


def zoology_keys_values(n: int, pairs: int, vocab: int, rng: np.random.RandomState) -> None:
    """zoology's MQAR key/value draw: per row, distinct keys and distinct values by RandomState.choice."""
    keys, values = np.arange(1, vocab // 2), np.arange(vocab // 2, vocab)
    np.stack([rng.choice(keys, pairs, replace=False) for _ in range(n)])
    np.stack([rng.choice(values, pairs, replace=False) for _ in range(n)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tasks", default=",".join(LARGEST))
    args = parser.parse_args()
    n_train = 100_000 if args.quick else 1_000_000
    fresh_rows, reference_rows = (10_000, 500) if args.quick else (50_000, 2_000)
    print(f"{'task':<14}{'size':>5}{'fresh/s':>10}{'ref/s':>8}{'x':>7}{'split CPU s':>13}{'peak GB':>9}{'split/s':>10}{'x':>7}")
    for name in args.tasks.split(","):
        size = LARGEST[name]
        task = build_task(name, size)
        fresh = fresh_rows / cpu(lambda: task.generate_rows(fresh_rows, np.random.default_rng(0), train=True))
        ref = reference_rate(name, size, reference_rows // (8 if name == "lis" else 1))
        seconds = cpu(lambda: task.split_rows(n_train, n_train // 10, np.random.default_rng(1)))
        tracemalloc.start()  # a second, traced run: tracing every allocation slows numpy code up to 2x
        task.split_rows(n_train, n_train // 10, np.random.default_rng(1))
        peak = tracemalloc.get_traced_memory()[1] / 1e9
        tracemalloc.stop()
        split = 1.1 * n_train / seconds
        print(f"{name:<14}{size:>5}{fresh:>10.0f}{ref:>8.0f}{fresh / ref:>7.1f}{seconds:>13.1f}{peak:>9.2f}{split:>10.0f}{split / ref:>7.1f}", flush=True)
    print(f"\n{'mqar vocab 8192':<16}{'N':>5}{'ours/s':>10}{'zoology/s':>11}{'x':>7}")
    rows = 2_000 if args.quick else 20_000
    for pairs in (16, 64, 256):
        task = build_task("mqar", pairs, {"key_vocab": 4096, "value_vocab": 4096})
        ours = rows / cpu(lambda: task.sample_train(rows, np.random.default_rng(0)))
        theirs = rows / cpu(lambda: zoology_keys_values(rows, pairs, 8192, np.random.RandomState(0)))
        print(f"{'':<16}{pairs:>5}{ours:>10.0f}{theirs:>11.0f}{ours / theirs:>7.1f}", flush=True)


if __name__ == "__main__":
    main()
