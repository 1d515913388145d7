"""What a model costs: parameters and the recurrent state it carries, measured by running it."""
from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any

import torch
from torch import nn

from sepbench.models.backbone import SequenceModel


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def count_state_floats(state: Any) -> int:
    """Floating-point numbers held in a (nested) decoding state."""
    if isinstance(state, torch.Tensor):
        return state.numel() if state.is_floating_point() else 0
    if is_dataclass(state):
        return sum(count_state_floats(getattr(state, f.name)) for f in fields(state))
    if isinstance(state, (list, tuple)):
        return sum(count_state_floats(s) for s in state)
    if isinstance(state, dict):
        return sum(count_state_floats(s) for s in state.values())
    return 0


@torch.no_grad()
def measure_state_size(model: SequenceModel, length: int) -> int:
    """Floats per example the step path carries after ``length`` tokens (the KV cache for attention)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    state = model.init_state(1, device)
    token = torch.zeros(1, dtype=torch.long, device=device)
    for _ in range(length):
        _, state = model.step(token, state)
    model.train(was_training)
    return count_state_floats(state.blocks)
