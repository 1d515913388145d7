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
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from _throughput_common import Ratio  # noqa: E402
from sepbench.config import ModelConfig  # noqa: E402
from sepbench.models import SequenceModel, build_model  # noqa: E402
from sepbench.models.mixers import softmax  # noqa: E402
from sepbench.models.mixers.retnet import RetNetOptions  # noqa: E402

VOCAB, WIDTH, LAYERS, HEADS = 16, 64, 2, 4


def model(name: str, length: int, **options) -> SequenceModel:
    torch.manual_seed(0)
    return build_model(ModelConfig(name=name, layers=LAYERS, width=WIDTH, heads=HEADS, options=options), VOCAB, length)


def training_step(form: str, length: int, batch: int, chunk: int | None = None) -> Callable[[], None]:
    """One forward and backward of a 2-layer RetNet trained in ``form`` (chunk: the option's default unless given)."""
    net = model("retnet", length, form=form, **({"chunk": chunk} if chunk else {}))
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
    detail = (f"train step L={length} batch 8 width 64 2 layers, chunk {RetNetOptions().chunk}; parallel min/median "
              f"{min(par):.2f}/{statistics.median(par):.2f} s, chunkwise {min(chunk):.3f}/{statistics.median(chunk):.3f} s; "
              f"ratio of mins {min(par) / min(chunk):.3g}")
    return Ratio(name, statistics.median(par) / statistics.median(chunk), 5.0, "at_least", detail)


@torch.no_grad()
def decode_seconds(net: SequenceModel, positions: list[int], rounds: int) -> dict[int, list[float]]:
    """Seconds of decode steps (batch 1) from each position: one state is stepped to each position, then the
    states take one step each in turn for ``rounds`` rounds, so machine load hits every position alike."""
    net.eval()
    token = torch.zeros(1, dtype=torch.long)
    states = {}
    for position in positions:
        state = net.init_state(1)
        while state.position < position:
            _, state = net.step(token, state)
        states[position] = state
    found: dict[int, list[float]] = {position: [] for position in positions}
    for _ in range(rounds):
        for position in positions:
            start = time.perf_counter()
            _, states[position] = net.step(token, states[position])
            found[position].append(time.perf_counter() - start)
    return found


@contextmanager
def clocked(module: ModuleType, name: str, sink: list[float]) -> Iterator[None]:
    """Append the seconds of every call of ``module.name`` to ``sink`` while inside the block."""
    original = getattr(module, name)

    def wrapper(*args: object) -> object:
        start = time.perf_counter()
        result = original(*args)
        sink.append(time.perf_counter() - start)
        return result

    setattr(module, name, wrapper)
    try:
        yield
    finally:
        setattr(module, name, original)


def step_parts(net: SequenceModel, positions: list[int], rounds: int) -> dict[str, dict[int, float]]:
    """Median seconds per decode step spent writing the cache and attending over it (all layers), at each position."""
    writes: list[float] = []
    reads: list[float] = []
    with clocked(softmax, "append", writes), clocked(softmax, "attend", reads):
        decode_seconds(net, positions, rounds)
    layers, count = len(net.blocks), len(positions)
    parts = {}
    for part, sink in (("write", writes), ("attention", reads)):
        per_step = [sum(sink[i : i + layers]) for i in range(0, len(sink), layers)][-rounds * count :]
        parts[part] = {p: statistics.median(per_step[k::count]) for k, p in enumerate(positions)}
    return parts


def kv_decode_ratio(quick: bool) -> Ratio:
    near, far = 100, 4000
    rounds, repeats = (40, 2) if quick else (100, 3)
    net = model("transformer", far + rounds + 1)
    runs = [decode_seconds(net, [near, far], rounds) for _ in range(repeats)]
    medians = {p: statistics.median(statistics.median(run[p]) for run in runs) for p in (near, far)}
    mins = {p: min(min(run[p]) for run in runs) for p in (near, far)}
    parts = step_parts(net, [near, far], rounds)
    us = {name: {p: round(1e6 * s) for p, s in by_position.items()} for name, by_position in parts.items()}
    detail = (f"softmax width 64 2 layers batch 1, per token median {1e6 * medians[near]:.0f} -> {1e6 * medians[far]:.0f} us "
              f"(min {1e6 * mins[near]:.0f} -> {1e6 * mins[far]:.0f}); inside those steps the cache writes take "
              f"{us['write'][near]} -> {us['write'][far]} us, the attention over the cached keys "
              f"{us['attention'][near]} -> {us['attention'][far]} us")
    return Ratio("kv_decode_4000_vs_100", medians[far] / medians[near], 1.3, "at_most", detail)


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
