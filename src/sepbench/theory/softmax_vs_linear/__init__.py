"""Deng et al., "Why Softmax Attention Outperforms Linear Attention" (arXiv 2310.11685 v2), reconstructed.

The source text lost every formula. The definitions here are a reconstruction, each object's status in
``docs/softmax_vs_linear.md``: the attention maps and the random networks are standard, the datasets R1/R2/R3 are our own choices that
satisfy the paper's lemmas, and every sweep range is ours, not the paper's.
"""
from sepbench.theory.softmax_vs_linear.attention import (
    attention,
    attention_matrix,
    cross_attention,
    expand_tokens,
    self_attention,
    tensor_trick_attention_matrix,
    tensor_trick_logits,
)
from sepbench.theory.softmax_vs_linear.datasets import CrossData, SelfData, ToyData, TokenSet
from sepbench.theory.softmax_vs_linear.experiment import PointResult, Setting, run_point
from sepbench.theory.softmax_vs_linear.networks import hoeffding_bound, rademacher, readout

__all__ = ["CrossData", "PointResult", "SelfData", "Setting", "TokenSet", "ToyData",
           "attention", "attention_matrix", "cross_attention", "expand_tokens", "hoeffding_bound", "rademacher",
           "readout", "run_point", "self_attention", "tensor_trick_attention_matrix", "tensor_trick_logits"]
