"""RetNet's chunkwise training form against its parallel form, and softmax decoding cost as the KV cache fills.

``python benchmarks/_throughput_models.py --crossover`` prints the table behind ``retnet.CHUNKWISE_FROM`` and the
default chunk: CPU seconds of one training step of each form at a range of lengths (CPU time of this process,
which the load of a shared machine disturbs less than wall time).
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
from sepbench.config import ModelConfig  # noqa: E402
from sepbench.models import SequenceModel, build_model  # noqa: E402
from sepbench.models.mixers.kv_cache import append, attend, empty_cache  # noqa: E402

VOCAB, WIDTH, LAYERS, HEADS = 16, 64, 2, 4


def model(name: str, length: int, **options) -> SequenceModel:
    torch.manual_seed(0)
    return build_model(ModelConfig(name=name, layers=LAYERS, width=WIDTH, heads=HEADS, options=options), VOCAB, length)


def training_step(form: str, length: int, batch: int, chunk: int = 32) -> Callable[[], None]:
    """One forward and backward of a 2-layer RetNet trained in ``form``."""
    net = model("retnet", length, form=form, chunk=chunk)
    tokens = torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(0))

    def run() -> None:
        net.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(net(tokens).flatten(0, 1), tokens.flatten()).backward()

    return run


def alternate(calls: dict[str, Callable[[], object]], repeats: int,
              clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Seconds of each call by ``clock``, called in turn ``repeats`` times after a warm-up, so load hits all alike."""
    for call in calls.values():
        call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = clock()
            call()
            times[name].append(clock() - start)
    return times


def retnet_ratio(quick: bool) -> Ratio:
    length, repeats = (1024, 2) if quick else (4096, 2)
    times = alternate({form: training_step(form, length, 8) for form in ("parallel", "chunkwise")}, repeats)
    par, chunk = times["parallel"], times["chunkwise"]
    name = "retnet_chunkwise_1024_quick" if quick else "retnet_chunkwise_4096"
    detail = (f"train step L={length} batch 8 width 64 2 layers, chunk 32; parallel min/median "
              f"{min(par):.2f}/{statistics.median(par):.2f} s, chunkwise {min(chunk):.3f}/{statistics.median(chunk):.3f} s; "
              f"ratio of mins {min(par) / min(chunk):.3g}")
    return Ratio(name, statistics.median(par) / statistics.median(chunk), 5.0, "at_least", detail)


@torch.no_grad()
def decode_seconds(net: SequenceModel, positions: list[int], window: int) -> dict[int, list[float]]:
    """Seconds of each of ``window`` consecutive decode steps (batch 1) from each position."""
    net.eval()
    state = net.init_state(1)
    token = torch.zeros(1, dtype=torch.long)
    found: dict[int, list[float]] = {}
    for position in sorted(positions):
        while state.position < position:
            _, state = net.step(token, state)
        found[position] = []
        for _ in range(window):
            start = time.perf_counter()
            _, state = net.step(token, state)
            found[position].append(time.perf_counter() - start)
    return found


def attention_seconds(length: int, repeats: int) -> float:
    """Median seconds of one layer's cached attention (append one position, attend over ``length``)."""
    rows, dim = HEADS, WIDTH // HEADS
    cache = empty_cache(rows, dim, length + repeats + 1, torch.device("cpu"), torch.float32)
    key, query = torch.randn(rows, dim), torch.randn(rows, dim)
    for _ in range(length - 1):
        cache = append(cache, key, key)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        attend(query, append(cache, key, key), dim**-0.5)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def kv_decode_ratio(quick: bool) -> Ratio:
    near, far = 100, 4000
    window, repeats = (40, 2) if quick else (100, 3)
    net = model("transformer", far + window + 1)
    runs = [decode_seconds(net, [near, far], window) for _ in range(repeats)]
    medians = {p: [statistics.median(run[p]) for run in runs] for p in (near, far)}
    mins = {p: [min(run[p]) for run in runs] for p in (near, far)}
    ratio = statistics.median(medians[far]) / statistics.median(medians[near])
    attention = {p: LAYERS * attention_seconds(p, 200) for p in (near, far)}
    growth = statistics.median(medians[far]) - statistics.median(medians[near])
    detail = (f"softmax width 64 2 layers batch 1, per token median {1e6 * statistics.median(medians[near]):.0f} -> "
              f"{1e6 * statistics.median(medians[far]):.0f} us (min {1e6 * min(mins[near]):.0f} -> {1e6 * min(mins[far]):.0f}); "
              f"of the {1e6 * growth:.0f} us growth, attention over the cached keys (2 layers) "
              f"{1e6 * attention[near]:.0f} -> {1e6 * attention[far]:.0f} us")
    return Ratio("kv_decode_4000_vs_100", ratio, 1.3, "at_most", detail)


def measure(quick: bool) -> list[Ratio]:
    return [retnet_ratio(quick), kv_decode_ratio(quick)]


def crossover(lengths: list[int], chunks: list[int], batch: int, repeats: int) -> None:
    """Median CPU seconds of one training step per form and length, printed as a table."""
    print(f"retnet training step (forward + backward, CPU ms), batch {batch}, width 64, 2 layers, "
          f"{torch.get_num_threads()} thread(s)")
    print(f"{'L':>6}{'parallel':>12}" + "".join(f"{'chunk ' + str(c):>12}" for c in chunks))
    for length in lengths:
        calls = {"parallel": training_step("parallel", length, batch)}
        calls |= {str(c): training_step("chunkwise", length, batch, c) for c in chunks}
        times = {name: statistics.median(ts) for name, ts in alternate(calls, repeats, time.process_time).items()}
        print(f"{length:>6}" + "".join(f"{1e3 * t:>12.1f}" for t in times.values()), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crossover", action="store_true", help="print the form-by-length table")
    parser.add_argument("--lengths", default="32,64,96,128,160,192,256,512,1024")
    parser.add_argument("--chunks", default="16,32,64,128")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.crossover:
        crossover([int(n) for n in args.lengths.split(",")], [int(c) for c in args.chunks.split(",")],
                  args.batch, args.repeats)
    else:
        for found in measure(quick=False):
            print(found.line())
