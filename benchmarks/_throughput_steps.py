"""Training-step cost of the recurrent mixers against the LSTM, and Mamba's fused scan against the chunked one.

A step is what ``Trainer.train_until`` does between evaluations: sample a batch, forward, backward, Adam.
``python benchmarks/_throughput_steps.py --table`` prints the per-step table of every mixer at N = 20, 100, 400
(width 64, one layer, batch 64, Index Lookup) with the matrix-product GFLOP/s it reaches (``step_flops``). Times are CPU seconds
of this one-thread process (``time.process_time``), which a busy machine disturbs far less than wall time.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from _throughput_common import Ratio  # noqa: E402
from _throughput_models import alternate  # noqa: E402
from sepbench.config import RunConfig  # noqa: E402
from sepbench.models import MODELS  # noqa: E402
from sepbench.models.accounting import COUNTED_ELSEWHERE  # noqa: E402
from sepbench.models.mixers.cpu_kernels import pytorch_forms  # noqa: E402
from sepbench.models.mixers.mamba_cpu import fused_selective_scan  # noqa: E402
from sepbench.models.mixers.selective_scan import selective_scan  # noqa: E402
from sepbench.train import Trainer  # noqa: E402
from sepbench.train.loop import masked_loss  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

BATCH, WIDTH = 64, 64
CLOCK = time.process_time


def trainer(model: str, length: int, **options: object) -> Trainer:
    """A one-layer, width-64 run on Index Lookup whose evaluations never fall inside the timed steps."""
    return Trainer(RunConfig.build({
        "task": {"name": "index_lookup", "length": length},
        "model": {"name": model, "layers": 1, "width": WIDTH, "options": options},
        "train": {"steps": 10**6, "eval_every": 10**6, "batch_size": BATCH, "eval_samples": 64}, "device": "cpu"}))


def steps(run: Trainer, count: int) -> Callable[[], None]:
    """``count`` more training steps of ``run``, as ``train_until`` takes them."""
    return lambda: run.train_until((run.result.steps if run.result else 0) + count)


def per_step(times: list[float], count: int) -> tuple[float, float]:
    return min(times) / count, statistics.median(times) / count


def step_ratio(name: str, model: str, length: int, target: float, quick: bool) -> Ratio:
    count, repeats = (2, 2) if quick else (5, 3)
    times = alternate({m: steps(trainer(m, length), count) for m in (model, "lstm")}, repeats, CLOCK)
    (m_min, m_med), (l_min, l_med) = per_step(times[model], count), per_step(times["lstm"], count)
    detail = (f"one step, Index Lookup N={length}, width 64, 1 layer, batch 64: {model} min/median "
              f"{1e3 * m_min:.1f}/{1e3 * m_med:.1f} ms, lstm {1e3 * l_min:.1f}/{1e3 * l_med:.1f} ms; "
              f"ratio of mins {m_min / l_min:.3g}")
    return Ratio(name, m_med / l_med, target, "at_most", detail)


def scan_inputs(batch: int, length: int, inner: int = 128, state: int = 16) -> tuple[torch.Tensor, ...]:
    """Delta, A, u, B, C as a width-64 Mamba block feeds its scan (A at its S4D-real init), all requiring grad."""
    generator = torch.Generator().manual_seed(0)
    delta = 0.1 * torch.rand(batch, length, inner, generator=generator)
    a = -torch.arange(1.0, state + 1).expand(inner, state).clone()
    u, b, c = (torch.randn(batch, length, n, generator=generator) for n in (inner, state, state))
    return tuple(x.requires_grad_() for x in (delta, a, u, b, c))


def scan_ratio(quick: bool) -> Ratio:
    inputs = scan_inputs(64, 100)
    calls = {"fused": lambda: fused_selective_scan(*inputs).sum().backward(),
             "chunked": lambda: selective_scan(*inputs).sum().backward()}
    times = alternate(calls, 2 if quick else 5, CLOCK)
    fused, chunked = times["fused"], times["chunked"]
    detail = (f"scan forward + backward, B=64 T=100 E=128 N=16: fused min/median {1e3 * min(fused):.1f}/"
              f"{1e3 * statistics.median(fused):.1f} ms, chunked {1e3 * min(chunked):.1f}/"
              f"{1e3 * statistics.median(chunked):.1f} ms; ratio of mins {min(chunked) / min(fused):.3g}")
    return Ratio("mamba_scan_fused_vs_chunked", statistics.median(chunked) / statistics.median(fused), 5.0,
                 "at_least", detail)


def measure(quick: bool) -> list[Ratio]:
    return [scan_ratio(quick),
            step_ratio("mamba_step_vs_lstm_N100", "mamba", 100, 2.0, quick),
            step_ratio("mamba_step_vs_lstm_N400", "mamba", 400, 2.0, quick),
            step_ratio("dss_step_vs_lstm_N100", "dss", 100, 1.3, quick)]


def step_flops(run: Trainer) -> int:
    """Matrix-product FLOPs of one training step (forward and backward of the loss at the scored positions), as
    torch.utils.flop_counter counts them on the mixers' PyTorch forms (a kernel's arithmetic is invisible to it)."""
    batch = run.next_batch()
    with pytorch_forms(), FlopCounterMode(display=False, custom_mapping=COUNTED_ELSEWHERE) as counter:
        masked_loss(run.model(batch.inputs, positions=batch.mask), batch).backward()
    run.model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def table(lengths: list[int], repeats: int, count: int) -> None:
    """Per-step milliseconds (min and median) and the GFLOP/s of ``step_flops`` at the median, per mixer."""
    print(f"one training step (ms, min/median of {repeats} x {count} steps) and matrix-product GFLOP/s at the "
          f"median; Index Lookup, width {WIDTH}, 1 layer, batch {BATCH}, {torch.get_num_threads()} thread(s)")
    print(f"{'model':<20}" + "".join(f"{'N=' + str(n):>26}" for n in lengths))
    for name in MODELS.names():
        cells = []
        for length in lengths:
            run = trainer(name, length)
            flops = step_flops(run)
            times = alternate({name: steps(run, count)}, repeats, CLOCK)[name]
            low, mid = per_step(times, count)
            cells.append(f"{1e3 * low:.1f}/{1e3 * mid:.1f} ms {flops / mid / 1e9:5.1f}")
        print(f"{name:<20}" + "".join(f"{cell:>26}" for cell in cells), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true", help="print the per-step table of every mixer")
    parser.add_argument("--lengths", default="20,100,400")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.table:
        table([int(n) for n in args.lengths.split(",")], args.repeats, 3)
    else:
        for found in measure(quick=False):
            print(found.line(), flush=True)
