"""Evaluation chunk rows from a memory budget rather than a fixed count."""
from __future__ import annotations

import torch

from sepbench.models import SequenceModel

CPU_BUDGET_BYTES = 256 * 2**20
"""Evaluation working memory on a CPU: small enough to stay clear of swapping, large enough for full BLAS speed."""
CUDA_BUDGET_SHARE = 0.25
"""Share of the accelerator's free memory one evaluation chunk may take."""


def memory_budget(device: torch.device) -> int:
    """Bytes one evaluation chunk may use on ``device``."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * CUDA_BUDGET_SHARE)
    return CPU_BUDGET_BYTES


def row_bytes(model: SequenceModel, seq_len: int, logits_per_row: int) -> int:
    """Bytes one example takes in a no-grad forward: its widest block's activations (``activation_floats``)
    and its logits at ``logits_per_row`` positions."""
    element = next(model.parameters()).element_size()
    activations = max(block.mixer.activation_floats(seq_len) for block in model.blocks)
    return element * (activations + logits_per_row * model.head.out_features)


def chunk_rows(model: SequenceModel, seq_len: int, logits_per_row: int, budget: int, cap: int) -> int:
    """Rows per evaluation chunk: as many as ``budget`` bytes hold, at most ``cap``, at least one."""
    return max(1, min(cap, budget // row_bytes(model, seq_len, logits_per_row)))
