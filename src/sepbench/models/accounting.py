"""What a model costs: parameters, recurrent state and FLOPs, both measured by running it and in closed form."""
from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from sepbench.models.backbone import SequenceModel
from sepbench.models.mixers.cpu_kernels import pytorch_forms

PAPER_TOKEN_OVERHEAD = 1.4e4
"""Per-token FLOPs beyond 72 d^2 that Yang et al.'s Table 2 implies (reconstructed from its numbers; docs/models.md)."""


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def count_state_floats(state: Any) -> int:
    """Real numbers held in a (nested) decoding state; a complex number counts as two."""
    if isinstance(state, torch.Tensor):
        if state.is_complex():
            return 2 * state.numel()
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


def stored_state_size(model: SequenceModel, length: int) -> int | None:
    """``measure_state_size``, or None for a model whose mixer has no step path (it trains teacher-forced only)."""
    try:
        return measure_state_size(model, length)
    except NotImplementedError:
        return None


def state_size(model: SequenceModel, length: int) -> int:
    """Closed form of ``measure_state_size``: the sum of each block's mixer state after ``length`` tokens."""
    return sum(block.mixer.state_floats(length) for block in model.blocks)


def forward_flops(model: SequenceModel, length: int) -> int:
    """Closed-form matrix-product FLOPs (2 per multiply-accumulate) of one forward pass over ``length`` tokens.

    Counts what ``measure_flops`` counts: the mixers' products, the MLPs and the output head; embedding
    look-ups, norms, activations, FFTs and the elementwise work of scans are not counted.
    """
    width, config = model.config.width, model.config
    total = 2 * length * width * model.head.out_features
    for block in model.blocks:
        total += block.mixer.flops(length)
        if block.mlp is not None:
            total += 4 * length * width * config.mlp_ratio * width
    return total


def _sdpa_cpu_flops(query, key, value, *args, out_val=None, **kwargs) -> int:
    """CPU fused attention: Q K^T and the weighted sum over the full T x S square, 4 B H T S d."""
    b, h, t, d = query
    return 4 * b * h * t * key[-2] * d


def _lstm_flops(data, hx, params, *args, out_val=None, **kwargs) -> int:
    """aten.lstm: every weight matrix is applied once per token (2 FLOPs per weight and token)."""
    return 2 * data[0] * data[1] * sum(rows * cols for rows, cols in (p for p in params if len(p) == 2))


def _onednn_lstm_layer_flops(data, w_ih, w_hh, *args, out_val=None, **kwargs) -> int:
    """aten.mkldnn_rnn_layer (CPU LSTM through oneDNN): input and recurrent weights once per token."""
    return 2 * data[0] * data[1] * (w_ih[0] * w_ih[1] + w_hh[0] * w_hh[1])


COUNTED_ELSEWHERE = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_cpu_flops,
    torch.ops.aten.lstm: _lstm_flops,
    torch.ops.aten.mkldnn_rnn_layer: _onednn_lstm_layer_flops,
}


def measure_flops(module: nn.Module, *inputs: torch.Tensor) -> int:
    """FLOPs of ``module(*inputs)`` by torch.utils.flop_counter, taught CPU fused attention and LSTM layers."""
    with torch.no_grad(), pytorch_forms(), FlopCounterMode(display=False, custom_mapping=COUNTED_ELSEWHERE) as counter:
        module(*inputs)
    return counter.get_total_flops()


def paper_flops(model: str, width: int, layers: int, length: int, overhead: float = PAPER_TOKEN_OVERHEAD) -> float:
    """FLOPs as Yang et al. 2024 count them in Table 2: (L + 2) (2 * layers * 12 d^2 + overhead).

    One forward pass over the L + 2 padded tokens, 2 FLOPs per multiply-accumulate of the QKV, output and
    4d MLP matrices, no attention term (so every architecture costs the same at a given width; the
    formula reconstructed from Table 2's numbers, docs/models.md). ``model`` must be a registered architecture.
    """
    from sepbench.models import MODELS

    MODELS.get(model)
    return (length + 2) * (2 * layers * 12 * width**2 + overhead)


@dataclass(frozen=True)
class ModelCost:
    """One architecture's cost at a given size, as ``sepbench models --details`` prints it."""

    model: str
    parameters: int
    state_floats: int
    flops: int
    paper_flops: float


def model_cost(name: str, width: int, layers: int, length: int, vocab_size: int = 32, heads: int = 4) -> ModelCost:
    """Parameters, closed-form state after ``length`` tokens and closed-form forward FLOPs at that length; the
    Table-2 FLOPs count the same ``length`` tokens (CoT length L = ``length`` - 2 in Yang et al.'s convention)."""
    from sepbench.config import ModelConfig
    from sepbench.models import build_model

    model = build_model(ModelConfig(name=name, width=width, layers=layers, heads=heads), vocab_size, length)
    return ModelCost(name, count_parameters(model), state_size(model, length), forward_flops(model, length),
                     paper_flops(name, width, layers, length - 2))
