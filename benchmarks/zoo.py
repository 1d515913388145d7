"""Speed of every architecture: training throughput, decode cost per token, and the side-by-side targets.

Run: ``PYTHONPATH=src python benchmarks/zoo.py`` (``--quick`` for a smoke run). Every ratio is measured
in this one run, on the device at hand, with both sides timed alternately so machine load mostly cancels.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch

from sepbench.config import ModelConfig
from sepbench.models import MODELS, SequenceModel, build_model
from sepbench.models.mixers.mamba_cpu import fused_selective_scan, kernel_library
from sepbench.models.mixers.selective_scan import selective_scan, selective_scan_reference
from sepbench.train.environment import resolve_device

VOCAB = 32
RECURRENT = ("linear_transformer", "retnet", "lstm", "dss", "mamba")
PROBE = 25


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make(name: str, length: int, device: torch.device, width: int = 64, layers: int = 2, **options) -> SequenceModel:
    torch.manual_seed(0)
    config = ModelConfig(name=name, width=width, layers=layers, heads=4, options=options)
    return build_model(config, VOCAB, length).to(device)


def scan_inputs(batch: int, length: int, device: torch.device, inner: int = 128, state: int = 16) -> tuple:
    """Delta, A, u, B, C as a width-64 Mamba block feeds its scan (A at its S4D-real init), all requiring grad."""
    generator = torch.Generator().manual_seed(0)
    delta = 0.1 * torch.rand(batch, length, inner, generator=generator)
    a = -torch.arange(1.0, state + 1).expand(inner, state).clone()
    u, b, c = (torch.randn(batch, length, n, generator=generator) for n in (inner, state, state))
    return tuple(x.to(device).requires_grad_() for x in (delta, a, u, b, c))


def train_step(model: SequenceModel, tokens: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        model.zero_grad(set_to_none=True)
        model(tokens).float().logsumexp(-1).mean().backward()

    return run


def timed(fn: Callable[[], None], device: torch.device) -> float:
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def side_by_side(fns: dict[str, Callable[[], None]], device: torch.device, repeats: int) -> dict[str, float]:
    """Median seconds per call, calls interleaved so that load changes hit every contender alike."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(timed(fn, device))
    return {name: statistics.median(ts) for name, ts in times.items()}


@torch.no_grad()
def decode_costs(model: SequenceModel, positions: list[int], device: torch.device, probe: int = PROBE) -> dict[int, float]:
    """Median seconds of one decode step at each position (batch 1): the state is stepped there, then the next
    ``probe`` steps are timed one by one. Each state is stepped once, as in generation (a KV cache copies
    itself before a second step from the same state)."""
    model.eval()
    state = model.init_state(1, device)
    token = torch.zeros(1, dtype=torch.long, device=device)
    costs = {}
    for target in sorted(positions):
        while state.position < target:
            _, state = model.step(token, state)
        samples = []
        for _ in range(probe):
            sync(device)
            start = time.perf_counter()
            _, state = model.step(token, state)
            sync(device)
            samples.append(time.perf_counter() - start)
        costs[target] = statistics.median(samples)
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--quick", action="store_true", help="short lengths and few repeats (a smoke run)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    long, scan_len = (512, 256) if args.quick else (4096, 1024)
    lengths = [128, 256] if args.quick else [256, 1024]
    decode_at = [100, 400] if args.quick else [100, 1000, 4000]
    repeats = 2 if args.quick else 5
    print(f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads; width 64, 2 layers, 4 heads")

    print("\ntraining throughput (tokens/s, forward + backward, batch 8)")
    print(f"{'model':<20}" + "".join(f"{'L=' + str(n):>12}" for n in lengths))
    for name in MODELS.names():
        row = []
        for n in lengths:
            model = make(name, n, device)
            tokens = torch.randint(0, VOCAB, (8, n), device=device)
            seconds = side_by_side({name: train_step(model, tokens)}, device, repeats)[name]
            row.append(8 * n / seconds)
        print(f"{name:<20}" + "".join(f"{v:>12.0f}" for v in row))

    print("\ndecode cost per token (ms, batch 1) and its growth")
    print(f"{'model':<20}" + "".join(f"{'t=' + str(p):>10}" for p in decode_at) + f"{'last/first':>12}")
    growth: dict[str, float] = {}
    for name in MODELS.names():
        costs = decode_costs(make(name, max(decode_at) + PROBE + 1, device), decode_at, device)
        growth[name] = costs[max(decode_at)] / costs[min(decode_at)]
        print(f"{name:<20}" + "".join(f"{1e3 * costs[p]:>10.3f}" for p in decode_at) + f"{growth[name]:>12.2f}")

    print(f"\nside by side at L={long} (one training step, batch 1)")
    tokens = torch.randint(0, VOCAB, (1, long), device=device)
    contenders = {
        "sparse (block)": make("sparse_transformer", long, device),
        "sparse (dense mask)": make("sparse_transformer", long, device, dense=True),
        "linear": make("linear_transformer", long, device),
        "transformer": make("transformer", long, device),
    }
    step = side_by_side({k: train_step(m, tokens) for k, m in contenders.items()}, device, repeats)
    for key, seconds in step.items():
        print(f"  {key:<22}{1e3 * seconds:>10.1f} ms")

    print(f"\nmamba selective scan alone at L={scan_len} (forward + backward; inner width 128, state 16)")
    scan_ratio: dict[int, float] = {}
    for batch in (1, 8):
        inputs = scan_inputs(batch, scan_len, device)
        fns = {"chunked": lambda x=inputs: selective_scan(*x).sum().backward(),
               "reference": lambda x=inputs: selective_scan_reference(*x).sum().backward()}
        if device.type == "cpu" and kernel_library() is not None:
            fns["fused"] = lambda x=inputs: fused_selective_scan(*x).sum().backward()
        scan_time = side_by_side(fns, device, max(2, repeats // 2))
        scan_ratio[batch] = scan_time["reference"] / scan_time["chunked"]
        print(f"  batch {batch}:" + "".join(f"  {key} {1e3 * seconds:.1f} ms" for key, seconds in scan_time.items()))
    print(f"mamba model at L={scan_len} (one training step, batch 8)")
    tokens = torch.randint(0, VOCAB, (8, scan_len), device=device)
    paths = ("chunked", "reference") + (("fused",) if device.type == "cpu" and kernel_library() is not None else ())
    scans = {scan: make("mamba", scan_len, device, scan=scan, kernel=False) for scan in paths}
    model_time = side_by_side({k: train_step(m, tokens) for k, m in scans.items()}, device, max(2, repeats // 2))
    for key, seconds in model_time.items():
        print(f"  {key:<22}{1e3 * seconds:>10.1f} ms")

    first, last = min(decode_at), max(decode_at)
    targets = [
        (f"sparse block vs dense mask, train step at L={long}", step["sparse (dense mask)"] / step["sparse (block)"], ">= 3x", lambda r: r >= 3),
        (f"linear vs transformer, train step at L={long}", step["transformer"] / step["linear"], "> 1x", lambda r: r > 1),
        (f"linear decode at t={last} vs t={first}", growth["linear_transformer"], "<= 1.5x", lambda r: r <= 1.5),
        (f"mamba chunked scan vs Python loop, L={scan_len}, batch 1", scan_ratio[1], ">= 5x", lambda r: r >= 5),
        (f"mamba chunked scan vs Python loop, L={scan_len}, batch 8", scan_ratio[8], ">= 5x", lambda r: r >= 5),
        (f"mamba model step, chunked vs loop, L={scan_len}, batch 8", model_time["reference"] / model_time["chunked"], ">= 5x", lambda r: r >= 5),
    ]
    targets += [(f"{name} decode at t={last} vs t={first}", growth[name], "<= 1.5x", lambda r: r <= 1.5) for name in RECURRENT]
    on_gpu = "; set for the CPU: on a GPU at width 64 every step is bound by kernel launches"
    smoke = "; --quick's short lengths are a smoke run: the targets are judged at the full sizes only"
    print("\ntargets (ratio measured side by side in this run)" + (on_gpu if device.type == "cuda" else "")
          + (smoke if args.quick else ""))
    for label, ratio, goal, ok in targets:
        verdict = "not judged" if args.quick else "met" if ok(ratio) else "MISSED"
        print(f"  {label:<48}{ratio:>8.2f}x  target {goal:<8} {verdict}")


if __name__ == "__main__":
    main()
