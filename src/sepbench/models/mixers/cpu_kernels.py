"""Small C++ kernels for CPU training, built with the machine's compiler at first use, cached, and called on
tensors' memory through ctypes.

A kernel that cannot be built (no compiler, a failed build, or ``SEPBENCH_CPU_KERNELS=0``) loads as None, logged
once per process, and its mixer trains with its PyTorch form instead. ``SEPBENCH_KERNEL_CACHE`` moves the cache
(default ``$XDG_CACHE_HOME/sepbench/kernels``).
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
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator

import torch

from sepbench.config import ConfigError

# -fno-trapping-math: a comparison may raise a floating-point exception flag under GCC's default, so without
# AVX-512's masked operations it keeps a conditional (the exp's clamp) as a branch, and a branch keeps a loop from
# vectorising (on AVX2 every loop over Mamba's channels ran scalar); no kernel reads the flags
FLAGS = ["-O3", "-march=native", "-fopenmp-simd", "-fno-trapping-math", "-fPIC", "-shared", "-std=c++17"]
if platform.machine().lower() in ("x86_64", "amd64"):
    # GCC vectorises for AVX-512 machines with 256-bit vectors unless told otherwise; on an Intel Xeon the 512-bit
    # scan forward took 3.4 ms where the 256-bit one took 4.5 (B = 64, T = 100, E = 128, N = 16, one thread)
    FLAGS.append("-mprefer-vector-width=512")
DTYPE_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}
COMMON_HEADER = Path(__file__).with_name("kernels_common.h")

log = logging.getLogger(__name__)
_held_back = 0


@contextmanager
def pytorch_forms() -> Iterator[None]:
    """Inside: every mixer runs its PyTorch form, as FLOP counting needs (a kernel's arithmetic is invisible to
    ``torch.utils.flop_counter``; the PyTorch forms do the same products)."""
    global _held_back
    _held_back += 1
    try:
        yield
    finally:
        _held_back -= 1


def held_back() -> bool:
    """Whether the caller is inside ``pytorch_forms``."""
    return _held_back > 0


def cache_dir() -> Path:
    if "SEPBENCH_KERNEL_CACHE" in os.environ:
        return Path(os.environ["SEPBENCH_KERNEL_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sepbench" / "kernels"


def compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


@lru_cache(maxsize=None)
def cpuinfo_lines() -> tuple[str, ...]:
    """The lines of Linux's /proc/cpuinfo, or none where it cannot be read."""
    try:
        return tuple(Path("/proc/cpuinfo").read_text().splitlines())
    except OSError:
        return ()


def cpu_vendor() -> str:
    """The processor's vendor id (``vendor_id`` in /proc/cpuinfo: GenuineIntel, AuthenticAMD, ...), or ''."""
    return next((line.split(":", 1)[1].strip() for line in cpuinfo_lines() if line.startswith("vendor_id")), "")


def _cpu_identity() -> str:
    """What ``-march=native`` depends on: the processor's name and feature flags (Linux), else the platform."""
    lines = cpuinfo_lines()
    if not lines:
        return platform.processor() + platform.machine()
    return "\n".join(sorted({line for line in lines if line.startswith(("model name", "flags", "Features"))}))


def build(source: Path, cxx: str) -> Path:
    """Compile ``source`` into the cache (named by a hash of source, the shared header, compiler, flags and CPU)
    unless it is there."""
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    key = hashlib.sha256("\0".join([source.read_text(), COMMON_HEADER.read_text(), version, " ".join(FLAGS),
                                    _cpu_identity()]).encode())
    target = cache_dir() / f"{source.stem}-{key.hexdigest()[:16]}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:  # concurrent builders each rename a whole file
        built = Path(scratch) / target.name
        subprocess.run([cxx, *FLAGS, f"-I{COMMON_HEADER.parent}", str(source), "-o", str(built)], check=True,
                       capture_output=True, text=True, timeout=300)
        os.replace(built, target)
    return target


def load(source: Path, arguments: tuple[tuple[str, int, int], ...]) -> ctypes.CDLL | None:
    """The library built from ``source`` with each ``(name, pointers, sizes)`` kernel declared for float32 and
    float64 (``name_f32``, ``name_f64``; ``(name, 0, 0)``: a constant returned as int64), or None where it is
    off, cannot be built, or inside ``pytorch_forms``."""
    return None if held_back() else _load(source, arguments)


@lru_cache(maxsize=None)
def _load(source: Path, arguments: tuple[tuple[str, int, int], ...]) -> ctypes.CDLL | None:
    fallback = f"{source.stem} is not used: its mixer trains with its slower PyTorch form"
    if os.environ.get("SEPBENCH_CPU_KERNELS", "1") == "0":
        log.info("CPU kernels are off (SEPBENCH_CPU_KERNELS=0); %s", fallback)
        return None
    cxx = compiler()
    if cxx is None:
        log.warning("no C++ compiler found (CXX, c++, g++, clang++); %s", fallback)
        return None
    try:
        library = ctypes.CDLL(str(build(source, cxx)))
    except (OSError, subprocess.SubprocessError) as error:
        lines = (getattr(error, "stderr", None) or str(error)).strip().splitlines()
        log.warning("%s did not build (%s); %s", source.name, lines[-1] if lines else type(error).__name__, fallback)
        return None
    for name, pointers, sizes in arguments:
        if pointers == sizes == 0:
            getattr(library, name).restype = ctypes.c_int64
            continue
        for suffix in DTYPE_SUFFIX.values():
            getattr(library, f"{name}_{suffix}").argtypes = [ctypes.c_void_p] * pointers + [ctypes.c_int64] * sizes
    return library


def choose_path(option: str, choice: str, kernel: str, fallback: str, device: torch.device,
                library: Callable[[], ctypes.CDLL | None], source: Path, others: str) -> str:
    """What a mixer's ``option`` set to ``choice`` trains with on ``device``: for ``auto``, ``kernel`` (compiled
    from ``source`` by ``library``) on CPU where it builds, else ``fallback``; an explicit ``kernel`` where it
    cannot run fails with one line naming the ``others`` allowed."""
    available = device.type == "cpu" and library() is not None
    if choice == kernel and not available:
        raise ConfigError(f"{option} '{kernel}' needs a CPU device and a C++ compiler that builds {source.name}; "
                           f"allowed elsewhere: {others}")
    if choice == "auto":
        return kernel if available else fallback
    return choice


def check_inputs(kernel: str, tensors: dict[str, torch.Tensor | None]) -> None:
    """One clear error unless every given tensor is on the CPU in one dtype the kernels are built for."""
    given = {name: t for name, t in tensors.items() if t is not None}
    dtypes = {t.dtype for t in given.values()}
    devices = {t.device.type for t in given.values()}
    if devices != {"cpu"} or len(dtypes) != 1 or not dtypes <= DTYPE_SUFFIX.keys():
        found = ", ".join(f"{name} {t.dtype} on {t.device}" for name, t in given.items())
        raise ValueError(f"{kernel} takes CPU tensors of one dtype, float32 or float64; got {found}")


def over_batch(kernel: Callable[..., None], tensors: list[torch.Tensor | None], sizes: list[int], batch: int) -> None:
    """``kernel(*pointers, b0, b1, *sizes)`` over slices of the batch, one per intra-op thread (ctypes releases
    the GIL while a kernel runs); every batch row's numbers are the same whatever the slicing."""
    pointers = [None if t is None else t.data_ptr() for t in tensors]
    threads = min(torch.get_num_threads(), batch)
    if threads <= 1:
        kernel(*pointers, 0, batch, *sizes)
        return
    bounds = [batch * i // threads for i in range(threads + 1)]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda b0, b1: kernel(*pointers, b0, b1, *sizes), bounds[:-1], bounds[1:]))
