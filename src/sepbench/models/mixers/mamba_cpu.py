"""Mamba's fused CPU kernels (``mamba_cpu.cpp``): the selective scan with its skip and gate, and the causal
depthwise convolution with its SiLU. Built with the machine's C++ compiler at first use, cached, and called on
tensors' memory through ctypes inside ``autograd.Function``s.

Where no compiler is found or the build fails, ``kernel_library`` returns None and Mamba trains with the chunked
PyTorch scan instead (logged once per process). ``SEPBENCH_FUSED_SCAN=0`` turns the kernels off;
``SEPBENCH_KERNEL_CACHE`` moves the cache (default ``$XDG_CACHE_HOME/sepbench/kernels``).
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Callable

import torch
from torch.autograd.function import FunctionCtx, once_differentiable

SOURCE = Path(__file__).with_name("mamba_cpu.cpp")
FLAGS = ["-O3", "-march=native", "-fopenmp-simd", "-fPIC", "-shared", "-std=c++17"]
SPAN = 16
"""Steps the backward recomputes from each saved state: a span's states and decays (2 x 16 x N x E floats)
stay in the L2 cache at the widths the papers use."""

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    if "SEPBENCH_KERNEL_CACHE" in os.environ:
        return Path(os.environ["SEPBENCH_KERNEL_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sepbench" / "kernels"


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


def _cpu_identity() -> str:
    """What ``-march=native`` depends on: the processor's name and feature flags (Linux), else the platform."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() + platform.machine()
    return "\n".join(sorted({line for line in lines if line.startswith(("model name", "flags", "Features"))}))


def _build(compiler: str) -> Path:
    """Compile the kernels into the cache (named by a hash of source, compiler, flags and CPU) unless there."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    key = hashlib.sha256("\0".join([SOURCE.read_text(), version, " ".join(FLAGS), _cpu_identity()]).encode())
    target = cache_dir() / f"mamba_cpu-{key.hexdigest()[:16]}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:  # concurrent builders each rename a whole file
        built = Path(scratch) / target.name
        subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", str(built)], check=True, capture_output=True,
                       text=True, timeout=300)
        os.replace(built, target)
    return target


ARGUMENTS = {"scan_forward": (10, 6), "scan_backward": (17, 6), "conv_forward": (4, 5), "conv_backward": (7, 5)}
"""Each kernel's count of pointer and of int64 arguments."""


def _declare(library: ctypes.CDLL) -> ctypes.CDLL:
    for name, (pointers, sizes) in ARGUMENTS.items():
        for suffix in ("f32", "f64"):
            getattr(library, f"{name}_{suffix}").argtypes = [ctypes.c_void_p] * pointers + [ctypes.c_int64] * sizes
    return library


@lru_cache(maxsize=1)
def kernel_library() -> ctypes.CDLL | None:
    """The compiled kernels, or None (logged once) where they are off, no compiler is found or the build fails."""
    if os.environ.get("SEPBENCH_FUSED_SCAN", "1") == "0":
        log.info("Mamba's fused CPU kernels are off (SEPBENCH_FUSED_SCAN=0): it trains with the chunked scan")
        return None
    compiler = _compiler()
    if compiler is None:
        log.warning("no C++ compiler found (CXX, c++, g++, clang++): Mamba trains with the slower chunked scan")
        return None
    try:
        return _declare(ctypes.CDLL(str(_build(compiler))))
    except (OSError, subprocess.SubprocessError) as error:
        lines = (getattr(error, "stderr", None) or str(error)).strip().splitlines()
        log.warning("Mamba's fused CPU kernels did not build (%s): it trains with the slower chunked scan",
                    lines[-1] if lines else type(error).__name__)
        return None


def _kernel(name: str, dtype: torch.dtype) -> Callable[..., None]:
    return getattr(kernel_library(), f"{name}_{'f64' if dtype == torch.float64 else 'f32'}")


def _over_batch(kernel: Callable[..., None], tensors: list[torch.Tensor | None], sizes: list[int], batch: int) -> None:
    """``kernel(*pointers, b0, b1, *sizes)`` over slices of the batch, one per intra-op thread (ctypes releases
    the GIL while the kernel runs)."""
    pointers = [None if t is None else t.data_ptr() for t in tensors]
    threads = min(torch.get_num_threads(), batch)
    bounds = [batch * i // threads for i in range(threads + 1)]
    if threads <= 1:
        kernel(*pointers, 0, batch, *sizes)
        return
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda b0, b1: kernel(*pointers, b0, b1, *sizes), bounds[:-1], bounds[1:]))


class FusedSelectiveScan(torch.autograd.Function):
    """y = scan(Delta, A, u, B, C); with ``z``, (y + D u) SiLU(z) (D optional). Saves its inputs, the scan's
    output where gated, and one [N, E] state every ``SPAN`` steps."""

    @staticmethod
    def forward(ctx: FunctionCtx, delta: torch.Tensor, a: torch.Tensor, u: torch.Tensor, b: torch.Tensor,
                c: torch.Tensor, skip: torch.Tensor | None, z: torch.Tensor | None) -> torch.Tensor:
        delta, u, b, c = (v.contiguous() for v in (delta, u, b, c))
        skip, z = (None if v is None else v.contiguous() for v in (skip, z))
        a = a.t().contiguous()  # [N, E]: the kernel's loops run over channels
        batch, length, inner = u.shape
        needs_grad = any(ctx.needs_input_grad)
        saved = u.new_empty(batch, -(-length // SPAN), a.shape[0], inner) if needs_grad else None
        y = torch.empty_like(u)
        out = torch.empty_like(u) if z is not None else y
        _over_batch(_kernel("scan_forward", u.dtype), [delta, u, a, b, c, skip, z, y, out, saved],
                    [length, inner, a.shape[0], SPAN], batch)
        if needs_grad:
            ctx.save_for_backward(delta, a, u, b, c, skip, z, y if z is not None else None, saved)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        delta, a, u, b, c, skip, z, y, saved = ctx.saved_tensors
        batch, length, inner = u.shape
        grad_delta, grad_u, grad_b, grad_c = (torch.empty_like(v) for v in (delta, u, b, c))
        grad_a = a.new_empty(batch, *a.shape)
        grad_skip = u.new_empty(batch, inner) if skip is not None else None
        grad_z = torch.empty_like(z) if z is not None else None
        _over_batch(_kernel("scan_backward", u.dtype),
                    [delta, u, a, b, c, skip, z, y, saved, grad_out.contiguous(), grad_delta, grad_u, grad_a,
                     grad_b, grad_c, grad_skip, grad_z], [length, inner, a.shape[0], SPAN], batch)
        return (grad_delta, grad_a.sum(0).t(), grad_u, grad_b, grad_c,
                None if grad_skip is None else grad_skip.sum(0), grad_z)


class FusedCausalConv(torch.autograd.Function):
    """SiLU of the causal depthwise convolution of x [B, T, E] by weight [E, 1, K] plus bias [E]."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w = weight.squeeze(1).t().contiguous()  # [K, E]
        bias = bias.contiguous()
        batch, length, inner = x.shape
        out = torch.empty_like(x)
        _over_batch(_kernel("conv_forward", x.dtype), [x, w, bias, out], [length, inner, w.shape[0]], batch)
        ctx.save_for_backward(x, w, bias)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_out: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x, w, bias = ctx.saved_tensors
        batch, length, inner = x.shape
        grad_x = torch.zeros_like(x)
        grad_w = w.new_empty(batch, *w.shape)
        grad_bias = bias.new_empty(batch, inner)
        _over_batch(_kernel("conv_backward", x.dtype), [x, w, bias, grad_out.contiguous(), grad_x, grad_w, grad_bias],
                    [length, inner, w.shape[0]], batch)
        return grad_x, grad_w.sum(0).t().unsqueeze(1), grad_bias.sum(0)


def fused_selective_scan(delta: torch.Tensor, a: torch.Tensor, u: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                         skip: torch.Tensor | None = None, z: torch.Tensor | None = None) -> torch.Tensor:
    """``selective_scan_reference``'s outputs and gradients from the fused kernel (CPU, float32 or float64);
    with ``z``, the gated output (y + D u) SiLU(z) of Mamba's block (Gu & Dao 2023, Algorithm 2)."""
    return FusedSelectiveScan.apply(delta, a, u, b, c, skip, z)


def fused_causal_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """SiLU(causal depthwise conv1d(x)) on [B, T, E], as Mamba's block applies it before its scan."""
    return FusedCausalConv.apply(x, weight, bias)
