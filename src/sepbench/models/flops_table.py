"""Forward FLOPs of one CoT sequence in Yang et al.'s Table 2 convention and in the true count, and Table 2 itself."""
from __future__ import annotations

from dataclasses import dataclass

from sepbench.config import ModelConfig
from sepbench.models.accounting import forward_flops, paper_flops
from sepbench.models.backbone import build_model

PAPER_LENGTHS = (87, 221, 355, 505)
"""Table 2's columns: the Arithmetic CoT lengths of Yang et al. 2024 (87 is Feng et al.'s maxlen at n = 6)."""

PAPER_ARITHMETIC_LENGTHS = dict(zip((6, 10, 13, 16), PAPER_LENGTHS))
"""Operator count n -> Table 2's L for it (at n = 6, 87 where the data's longest CoT is 85)."""

PAPER_MIN_WIDTHS = {
    "transformer": (64, 128, 128, 128),
    "sparse_transformer": (128, 256, 256, 256),
    "linear_transformer": (256, 512, 512, 512),
}
"""The smallest widths reaching 90% on Arithmetic that Table 2 implies (Yang et al. 2024, Table 2; docs/models.md)."""


@dataclass(frozen=True)
class SequenceFlops:
    """One forward pass over the padded sequence of a CoT of ``length`` tokens (``tokens`` = length + 2)."""

    model: str
    width: int
    layers: int
    length: int
    tokens: int
    paper: float
    true: int


def sequence_flops(model: str, width: int, layers: int, length: int, heads: int = 4, vocab_size: int = 21) -> SequenceFlops:
    """Both counts over T = L + 2 tokens: the paper's ``(L+2)(24 layers d^2 + 1.4e4)`` (Yang et al. 2024,
    Table 2, as reconstructed from its numbers, docs/models.md) and the closed-form count of every matrix product
    of this architecture, attention scores and the output head included (``accounting.forward_flops``)."""
    tokens = length + 2
    network = build_model(ModelConfig(name=model, width=width, layers=layers, heads=heads), vocab_size, tokens)
    return SequenceFlops(model, width, layers, length, tokens, paper_flops(model, width, layers, length),
                         forward_flops(network, tokens))


def table2(widths: dict[str, tuple[int, ...]], lengths: tuple[int, ...] = PAPER_LENGTHS, layers: int = 3,
           **kwargs) -> dict[str, list[SequenceFlops]]:
    """Table 2 of Yang et al. 2024: the FLOPs of each model at its smallest solving width, one row per model."""
    rows = {}
    for model, dims in widths.items():
        if len(dims) != len(lengths):
            raise ValueError(f"{model}: {len(dims)} widths for {len(lengths)} lengths; give one width per length")
        rows[model] = [sequence_flops(model, d, layers, n, **kwargs) for d, n in zip(dims, lengths)]
    return rows
