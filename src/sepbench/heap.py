"""glibc's heap kept from handing freed memory back to the system while a process trains.

glibc serves a block above its mmap threshold with fresh pages and trims the heap's top after large frees, so a
training step that frees its activations and allocates them again faults every page back in: Mamba-(1, 64) on
Index Lookup at N = 100, batch 64, took about 4600 minor page faults a step, and 300 steps 15.0 s (3.2 s of it in
the kernel) against 11.9 s with the heap kept (LSTM-(1, 64) 8.4 against 6.6 s, TF-(1, 64) 11.8 against 10.3 s;
docs/models.md). A kept heap holds the process's peak in memory until it exits. Linux with glibc only; elsewhere,
and with ``SEPBENCH_MALLOC=system``, the system's defaults stay.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import platform
from functools import lru_cache

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4
SETTINGS = {M_MMAP_MAX: 0, M_TRIM_THRESHOLD: 2**31 - 1, M_TOP_PAD: 64 * 2**20}
"""Every block comes from the heap (no mmap'd blocks, which glibc caps at 32 MiB), whose top is trimmed only past
2 GiB free and grows 64 MiB at a time."""


@lru_cache(maxsize=1)
def keep_freed_memory() -> bool:
    """Set glibc's heap to keep freed memory (once a process); True where it took effect."""
    if os.environ.get("SEPBENCH_MALLOC", "keep") == "system" or platform.libc_ver()[0] != "glibc":
        return False
    name = ctypes.util.find_library("c")
    mallopt = getattr(ctypes.CDLL(name), "mallopt", None) if name else None
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = all(mallopt(parameter, value) == 1 for parameter, value in SETTINGS.items())
    if not done:
        log.info("glibc's mallopt refused a setting; the heap keeps its defaults where it did")
    return done
