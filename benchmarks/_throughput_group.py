"""Stacked runs: K members' training (seed and lr differ) as one program vs the same runs one after another."""
from __future__ import annotations

import statistics
import time

import torch

from _throughput_common import Ratio
from sepbench import RunConfig, train
from sepbench.train.group import train_group


def _configs(members: int, steps: int, device: str) -> list[RunConfig]:
    """A width-64 one-layer Transformer on Index Lookup N=20, batch 64; evaluation kept negligible."""
    return [RunConfig.build({
        "task": {"name": "index_lookup", "length": 20},
        "model": {"name": "transformer", "width": 64, "layers": 1},
        "train": {"steps": steps, "eval_every": 10**6, "eval_samples": 64, "early_stop": False,
                  "lr": 1e-3 * (1 + k % 4)},
        "seed": k, "device": device,
    }) for k in range(members)]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _side_by_side(configs: list[RunConfig], repeats: int, sequential_share: int) -> tuple[list[float], list[float]]:
    """Alternating wall times: the group, and ``sequential_share`` of its members alone scaled to all of them."""
    device = configs[0].device
    train_group(configs[:2])
    train(configs[0], progress=False)  # warm up both paths
    grouped, sequential = [], []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        train_group(configs)
        _sync(device)
        grouped.append(time.perf_counter() - start)
        start = time.perf_counter()
        for cfg in configs[:sequential_share]:
            train(cfg, progress=False)
        _sync(device)
        sequential.append((time.perf_counter() - start) * len(configs) / sequential_share)
    return grouped, sequential


def _ratio(name: str, target: float, grouped: list[float], sequential: list[float], note: str) -> Ratio:
    detail = (f"sequential/grouped min {min(sequential) / min(grouped):.3g} "
              f"median {statistics.median(sequential) / statistics.median(grouped):.3g}; "
              f"grouped min {min(grouped):.2f} s, sequential min {min(sequential):.2f} s; {note}")
    return Ratio(name, min(sequential) / min(grouped), target, "at_least", detail)


def measure(quick: bool) -> list[Ratio]:
    steps, repeats = (10, 2) if quick else (40, 3)
    ratios = []
    configs = _configs(8, steps, "cpu")
    grouped, sequential = _side_by_side(configs, repeats, sequential_share=8)
    ratios.append(_ratio("group8_vs_sequential", 0.9, grouped, sequential, f"CPU, 1 thread, {steps} steps"))
    if not torch.cuda.is_available():
        print("group64_vs_sequential skipped: no CUDA", flush=True)
        return ratios
    configs = _configs(64, steps * 5, "cuda")
    grouped, sequential = _side_by_side(configs, repeats, sequential_share=4)
    ratios.append(_ratio("group64_vs_sequential", 10.0, grouped, sequential,
                         f"CUDA, {steps * 5} steps, sequential timed on 4 members and scaled to 64"))
    return ratios
