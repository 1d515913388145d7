"""Sweep overhead: wall time of ``sepbench sweep`` (16 tiny Index Lookup runs of 50 steps) over its runs' own time.

The sweep runs as the command a researcher types, in a fresh process, so interpreter start and exit, imports,
pool start-up and each run's set-up all count. A run's own time is its stored ``wall_seconds`` (the training
loop and its evaluations). ``sweep_overhead`` runs two workers, as a sweep on a two-core machine does (the
ideal is then about 0.5); ``sweep_overhead_1worker`` runs the default one worker (ideal 1.0).

Both include a fixed cost that no sweep design removes: the interpreter, importing torch, and
``torch._dynamo``, which every ``torch.optim`` optimizer imports on its first construction (about as long as
torch itself). ``sweep_marginal_overhead`` leaves it out: one worker, the extra wall time of a sweep of twice the
runs over their extra run time, i.e. what each further run costs beyond its own training.
"""
from __future__ import annotations

import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _throughput_common import Ratio

RUNS, STEPS = 16, 50
SPEC = """name: overhead
base:
  task: {{name: index_lookup, length: 16}}
  model: {{name: transformer, layers: 1, width: 16, heads: 2}}
  train: {{steps: {steps}, eval_every: {steps}, eval_samples: 200, batch_size: 32, early_stop: false}}
  device: cpu
seeds: [{seeds}]
"""
SRC = Path(__file__).resolve().parents[1] / "src"


def sweep_once(workers: int, src: Path = SRC, runs: int = RUNS) -> tuple[float, float]:
    """(wall seconds of the sweep command, sum of its runs' wall_seconds), on a fresh store."""
    with tempfile.TemporaryDirectory() as folder:
        spec, store = Path(folder) / "overhead.yaml", Path(folder) / "runs.db"
        spec.write_text(SPEC.format(steps=STEPS, seeds=", ".join(str(s) for s in range(runs))))
        env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
        command = [sys.executable, "-m", "sepbench", "sweep", str(spec), "--workers", str(workers), "--store", str(store)]
        start = time.perf_counter()
        subprocess.run(command, env=env, check=True, capture_output=True)
        wall = time.perf_counter() - start
        with sqlite3.connect(store) as conn:
            count, busy = conn.execute("SELECT COUNT(*), SUM(wall_seconds) FROM runs").fetchone()
    if count != runs:
        raise RuntimeError(f"the sweep stored {count} runs, expected {runs}")
    return wall, busy


def measure(quick: bool) -> list[Ratio]:
    repeats = 2 if quick else 3
    samples: dict[int, list[tuple[float, float, float]]] = {2: [], 1: []}
    marginal = []
    for _ in range(repeats):
        for workers in samples:  # alternated, so a change in the machine's load hits both alike
            wall, busy = sweep_once(workers)
            samples[workers].append((wall / busy, wall, busy))
        wall_double, busy_double = sweep_once(1, runs=2 * RUNS)
        _, wall, busy = samples[1][-1]
        marginal.append((wall_double - wall) / (busy_double - busy))
    ratios = []
    for workers, found in samples.items():
        found.sort()
        best = found[0]
        detail = (f"{workers} worker{'s' if workers > 1 else ''}, {RUNS} runs x {STEPS} steps, min of {repeats}: "
                  f"wall {best[1]:.1f} s for {best[2]:.1f} s of runs, so about {best[1] - best[2] / workers:.1f} s "
                  f"fixed; median {statistics.median(r for r, _, _ in found):.3g}")
        name = "sweep_overhead" if workers == 2 else "sweep_overhead_1worker"
        ratios.append(Ratio(name, best[0], 1.2, "at_most", detail))
    ratios.append(Ratio("sweep_marginal_overhead", min(marginal), 1.2, "at_most",
                        f"1 worker, {RUNS} more runs of {STEPS} steps: extra wall over extra run time, fixed cost "
                        f"left out; min of {repeats}, median {statistics.median(marginal):.3g}"))
    return ratios
