"""Data generation at the papers' scale, side by side with the reference generators, on one core.

    PYTHONPATH=src python benchmarks/cot_generation.py            # 1M + 100k split per CoT task (minutes)
    PYTHONPATH=src python benchmarks/cot_generation.py --quick    # 100k + 10k split, smaller side-by-side runs
    PYTHONPATH=src python benchmarks/cot_generation.py --tasks ""  # MQAR only

For each CoT task at the paper's largest size:
- ``fresh``: rows per CPU second of ``generate_rows`` (the ``data: fresh`` path), and of the reference's loop;
- ``split``: CPU seconds of ``split_rows`` for the protocol's train + test sets (the ``data: fixed`` path): its
  first run on that line, with the kernel's part (on the first line printed, the process's first: it also takes
  its memory from the kernel, on a VM that hands freed memory back to its host over 2 s per GB; later lines run in
  memory the process has had before), then the min and median of ``--repeats`` more runs; from one more run, peak
  traced memory (tracemalloc, which counts numpy's buffers and would slow the timed runs); and the reference's
  rows per CPU second building the same two sets (their sampling + Python-set dedup, the same train : test counts,
  scaled from a smaller run), timed in turn with the runs after the first.
The reference is timed through ``sepbench.tasks.cot.reference``, a plain-Python restatement of Feng et al.'s loops
with the same kinds of random calls (Python ``random`` per draw for arithmetic, numpy ``RandomState`` per draw for
ED and LIS), one sample at a time, rows kept as tuples in a set as the reference keeps them (its file writing is
not timed). Arithmetic's is timed in the published loop's own form (``arithmetic_text_row``: string tokens,
products and quotients looked up in a numpy table, each expansion put in token by token, the history joined by
list concatenation; the same rows from the same draws), and again, on the line below it, with tokens as ints
joined in linear time (``arithmetic_row``, ~1.5x faster than the published loop). MQAR is timed against zoology's
``multiquery_ar`` restated whole with the same random calls (per row, ``RandomState.choice(..., replace=False)``
for keys, for values and for the power-law query gaps; then the queries, labels and the random fill of non-query
positions), vocab 8192, at ``input_seq_len = 4N``: rows as long as ours (N pairs, then N queries).
Each fresh and MQAR ratio is measured ``--repeats`` times after one untimed call of each, ours and the reference
in turn; min and median are printed. The split's ratios are against the reference's median split rate: its
first run's, then the min (the slowest run) and median of the runs after it, which are timed as the reference
is (in a process that has run it before).
Targets: split < 120 CPU s and < 4 GB at 1M; >= 20x the reference everywhere.
"""
from __future__ import annotations

import argparse
import os
import time
import tracemalloc

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one intra-op thread on both sides, before numpy and torch load

import numpy as np
import torch

from sepbench.tasks import build_task
from sepbench.tasks.cot import reference

LARGEST = {"arithmetic": 16, "edit_distance": 20, "ed_local": 20, "lis": 250}
REFERENCE_OF = {"arithmetic": "arithmetic", "edit_distance": "edit_distance", "ed_local": "edit_distance", "lis": "lis"}


def cpu(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def cpu_and_kernel(fn) -> tuple[float, float]:
    """CPU seconds of ``fn`` (user + system) and the system (kernel) part of them."""
    before = os.times()
    fn()
    after = os.times()
    return after.user + after.system - before.user - before.system, after.system - before.system


def reference_rate(name: str, size: int, rows: int, test_rows: int = 0, text: bool = False) -> float:
    """Reference rows per CPU second, sampling and set-dedup as its generator does: ``rows`` training rows, then
    ``test_rows`` test rows that are not among them."""
    build = lambda: reference.split(REFERENCE_OF[name], size, rows, test_rows, seed=0, text=text)  # noqa: E731
    return (rows + test_rows) / cpu(build)


def zoology_mqar(n: int, pairs: int, vocab: int, rng: np.random.RandomState) -> None:
    """zoology's MQAR rows at ``input_seq_len = 4 * pairs`` (one draw per row, as its ``apply_along_axis`` does)."""
    half, context, space = vocab // 2, 2 * pairs, pairs
    keys = np.stack([rng.choice(np.arange(1, half), pairs, replace=False) for _ in range(n)])
    values = np.stack([rng.choice(np.arange(half, vocab), pairs, replace=False) for _ in range(n)])
    power = 0.01 * np.arange(1, space + 1) ** (0.01 - 1)
    gaps = np.stack([rng.choice(space, pairs, replace=False, p=power / power.sum()) for _ in range(n)])
    examples = np.zeros((n, 4 * pairs + 1), np.int64)
    examples[:, 0:context:2], examples[:, 1:context:2] = keys, values
    np.put_along_axis(examples, context + 2 * gaps, keys, axis=1)
    labels = np.full((n, 4 * pairs + 1), -100, np.int64)
    np.put_along_axis(labels, context + 2 * gaps + 1, values, axis=1)
    inputs = torch.tensor(examples[:, :-1])
    fill = inputs == 0
    inputs[fill] = torch.randint(vocab, size=inputs.shape)[fill]
    torch.tensor(labels[:, 1:])


def side_by_side(ours, theirs, repeats: int) -> tuple[float, float, float, float]:
    """``ours`` and ``theirs`` (each returns rows per CPU second) timed in turn ``repeats`` times: the median
    rate of each, and the min and median of the per-repeat ratio. One untimed call of each comes first: a
    process's first call also builds lookup tables and takes its first memory from the kernel."""
    ours(), theirs()
    rates = [(ours(), theirs()) for _ in range(repeats)]
    x = [mine / reference for mine, reference in rates]
    return float(np.median([r[0] for r in rates])), float(np.median([r[1] for r in rates])), min(x), float(np.median(x))


def cot_row(label: str, name: str, text: bool, n_train: int, fresh_rows: int, reference_rows: int,
            repeats: int) -> None:
    """One line of the CoT table: ``name`` at its largest size against the reference (``text``: arithmetic's
    reference in the published loop's own form)."""
    size = LARGEST[name]
    task = build_task(name, size)
    reference_train = reference_rows // (8 if name == "lis" else 1)
    fresh, ref, x_min, x_median = side_by_side(
        lambda: fresh_rows / cpu(lambda: task.generate_rows(fresh_rows, np.random.default_rng(0), train=True)),
        lambda: reference_rate(name, size, reference_train, text=text), repeats)
    first, first_kernel = cpu_and_kernel(lambda: task.split_rows(n_train, n_train // 10, np.random.default_rng(1)))
    turns = [(cpu(lambda: task.split_rows(n_train, n_train // 10, np.random.default_rng(1))),
              reference_rate(name, size, reference_train, reference_train // 10, text=text)) for _ in range(repeats)]
    splits, ref_split = [seconds for seconds, _ in turns], float(np.median([rate for _, rate in turns]))
    tracemalloc.start()  # a second, traced run: tracing every allocation slows numpy code up to 2x
    task.split_rows(n_train, n_train // 10, np.random.default_rng(1))
    peak = tracemalloc.get_traced_memory()[1] / 1e9
    tracemalloc.stop()
    split = 1.1 * n_train / np.median(splits)
    x_split = [1.1 * n_train / seconds / ref_split for seconds in (first, max(splits))] + [split / ref_split]
    print(f"{label:<14}{size:>5}{fresh:>10.0f}{ref:>8.0f}{x_min:>7.1f}{x_median:>7.1f}           "
          f"{first:>6.2f}{first_kernel:>6.2f}{min(splits):>6.2f}{np.median(splits):>6.2f}{peak:>8.2f}"
          f"{split:>9.0f}{ref_split:>7.0f}     {x_split[0]:>5.1f}{x_split[1]:>5.1f}{x_split[2]:>5.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tasks", default=",".join(LARGEST))
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    n_train = 100_000 if args.quick else 1_000_000
    fresh_rows, reference_rows = (10_000, 500) if args.quick else (50_000, 2_000)
    print(f"{'task':<14}{'size':>5}{'fresh/s':>10}{'ref/s':>8}{'x min':>7}{'x med':>7}  split s: "
          f"{'first':>6}{'kern':>6}{'min':>6}{'med':>6}{'peak GB':>8}{'split/s':>9}{'ref/s':>7}"
          f"  x: {'first':>5}{'min':>5}{'med':>5}")
    for name in filter(None, args.tasks.split(",")):
        for text in (True, False) if name == "arithmetic" else (False,):
            label = "arithmetic" if text else ("  int tokens" if name == "arithmetic" else name)
            cot_row(label, name, text, n_train, fresh_rows, reference_rows, args.repeats)
    print(f"\n{'mqar vocab 8192':<16}{'N':>5}{'ours/s':>10}{'zoology/s':>11}{'x min':>7}{'x med':>7}")
    rows = 2_000 if args.quick else 20_000
    for pairs in (16, 64, 256):
        task = build_task("mqar", pairs, {"key_vocab": 4096, "value_vocab": 4096})
        ours, theirs, x_min, x_median = side_by_side(
            lambda: rows / cpu(lambda: task.sample_train(rows, np.random.default_rng(0))),
            lambda: rows / cpu(lambda: zoology_mqar(rows, pairs, 8192, np.random.RandomState(0))), args.repeats)
        print(f"{'':<16}{pairs:>5}{ours:>10.0f}{theirs:>11.0f}{x_min:>7.1f}{x_median:>7.1f}", flush=True)


if __name__ == "__main__":
    main()
