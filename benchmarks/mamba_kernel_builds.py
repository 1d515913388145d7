"""Mamba's fused CPU scan under the build sepbench ships and under the builds it chose against, side by side.

Run: ``PYTHONPATH=src python benchmarks/mamba_kernel_builds.py`` (``--quick`` for a smoke run). One thread; the
gated softplus scan as Mamba's block calls it, forward and backward, at the shape of a width-64 Mamba on
Eq-random at N = 200 (batch 64, 402 steps, inner width 128, state 16). The builds:

- shipped: ``cpu_kernels.FLAGS`` (the register-blocked backward only where the compiler targets AVX-512);
- trapping math: GCC's default ``-ftrapping-math`` put back, under which the exp's clamp stays a branch and the
  loops over channels are not vectorised;
- blocked / row-wise: the backward forced to either form (``-DSEPBENCH_BLOCKED=1`` / ``=0``).
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch

from sepbench.models.mixers import cpu_kernels
from sepbench.models.mixers.mamba_cpu import fused_selective_scan, kernel_library

BUILDS = {"shipped": [], "trapping math": ["-ftrapping-math"], "blocked": ["-DSEPBENCH_BLOCKED=1"],
          "row-wise": ["-DSEPBENCH_BLOCKED=0"]}


def use_build(extra: list[str], shipped_flags: list[str]) -> bool:
    """Load the kernels built with ``extra`` flags after the shipped ones; False where they do not build."""
    cpu_kernels.FLAGS[:] = [*shipped_flags, *extra]
    cpu_kernels._load.cache_clear()
    return kernel_library() is not None


def scan_inputs(batch: int, length: int, inner: int = 128, state: int = 16) -> tuple[torch.Tensor, ...]:
    """Delta (pre-softplus), A at its S4D-real init, u, B, C, D, z and the Delta bias, all requiring grad."""
    g = torch.Generator().manual_seed(0)
    delta = torch.randn(batch, length, inner, generator=g) - 4.0  # softplus(-4 + 0.5 x) ~ 0.02: Mamba's dt range
    a = -torch.arange(1.0, state + 1).expand(inner, state).clone()
    u, z = (torch.randn(batch, length, inner, generator=g) for _ in range(2))
    b, c = (torch.randn(batch, length, state, generator=g) for _ in range(2))
    skip, bias = torch.ones(inner), torch.zeros(inner)
    return tuple(x.requires_grad_() for x in (delta, a, u, b, c, skip, z, bias))


def step(inputs: tuple[torch.Tensor, ...], grad: torch.Tensor) -> float:
    start = time.perf_counter()
    out = fused_selective_scan(*inputs, delta_softplus=True)
    torch.autograd.grad(out, inputs, grad)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short shape and two repeats (smoke run)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ["SEPBENCH_KERNEL_CACHE"] = tempfile.mkdtemp(prefix="sepbench-kernel-builds-")
    batch, length = (8, 64) if args.quick else (64, 402)
    repeats = 2 if args.quick else max(2, args.repeats)
    shipped_flags = list(cpu_kernels.FLAGS)
    builds = {name: extra for name, extra in BUILDS.items() if use_build(extra, shipped_flags)}
    if "shipped" not in builds:
        print("Mamba's kernels do not build here (no compiler, or SEPBENCH_CPU_KERNELS=0): nothing to compare")
        return
    inputs = scan_inputs(batch, length)
    grad = torch.randn(batch, length, inputs[2].shape[-1], generator=torch.Generator().manual_seed(1))
    times: dict[str, list[float]] = {name: [] for name in builds}
    for name, extra in builds.items():  # warm each build once
        use_build(extra, shipped_flags)
        step(inputs, grad)
    for _ in range(repeats):  # alternate, so that machine load falls on every build alike
        for name, extra in builds.items():
            use_build(extra, shipped_flags)
            times[name].append(step(inputs, grad))
    use_build([], shipped_flags)
    print(f"gated softplus scan, forward + backward, batch {batch}, {length} steps, inner 128, state 16, one thread, "
          f"{repeats} repeats; this CPU has AVX-512: {'yes' if _avx512() else 'no'}")
    for name, seconds in times.items():
        print(f"  {name:<14} min {1e3 * min(seconds):8.1f} ms   median {1e3 * statistics.median(seconds):8.1f} ms")
    shipped = statistics.median(times["shipped"])
    print("ratios (median of the other build / median of the shipped one)")
    for name in builds:
        if name != "shipped":
            print(f"  {name:<14} {statistics.median(times[name]) / shipped:6.2f}x")


def _avx512() -> bool:
    return any(line.startswith("flags") and " avx512f" in line for line in cpu_kernels.cpuinfo_lines())


if __name__ == "__main__":
    main()
