"""CPU training with subnormal floats flushed to zero, as the compiled kernels run (``kernels_common.h``).

An x86 core takes a microcode assist for every subnormal operand. At long lengths some PyTorch forms make many:
on an Intel Xeon, one LSTM-(1, 64) training step on Index Lookup at N = 400 took 123-132 ms with them and 72-74 ms
flushed, while no other mixer's step was faster flushed (docs/models.md). The flush sets the calling thread's
mode only (``torch.set_flush_denormal``) and is undone on leaving unless it was already on.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch


def flushing() -> bool:
    """Whether this thread already reads and writes subnormal floats as zero."""
    return torch.tensor(1e-39).mul(1.0).item() == 0.0


@contextmanager
def flushed(device: torch.device) -> Iterator[None]:
    """Inside: subnormal results and operands are zero on ``device`` if it is a CPU that can flush them."""
    if device.type != "cpu" or flushing():
        yield
        return
    switched = torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if switched:
            torch.set_flush_denormal(False)
