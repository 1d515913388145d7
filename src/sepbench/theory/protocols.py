"""The communication protocols behind the lower bounds, run on real models (Bhattamishra et al. 2024).

``one_way_protocol`` is Thm 2's (L83-91): Alice runs a recurrent model on her prefix and sends its state;
Bob finishes. ``partition_protocol`` is Thm 4's (App. D, L430-480): for a one-layer softmax Transformer and
any split of the positions, Alice and Bob exchange the query, the max logit, the partial softmax sums and
the partial value sums, and Alice computes the last token's output.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from sepbench.models import SequenceModel
from sepbench.models.accounting import count_state_floats
from sepbench.models.mixers.softmax import SoftmaxAttention


@dataclass
class Transcript:
    """What the protocol computed and how many numbers crossed between the parties."""

    logits: torch.Tensor  # [B, V], the last token's output
    numbers_sent: int  # per example


@torch.no_grad()
def one_way_protocol(model: SequenceModel, tokens: torch.Tensor, split: int) -> Transcript:
    """Thm 2: Alice steps over tokens[:, :split] and sends the state; Bob steps over the rest."""
    state = model.init_state(tokens.shape[0])
    logits = None
    for t in range(split):
        logits, state = model.step(tokens[:, t], state)
    message = count_state_floats(state.blocks) // tokens.shape[0]
    for t in range(split, tokens.shape[1]):
        logits, state = model.step(tokens[:, t], state)
    return Transcript(logits, message)


@torch.no_grad()
def partition_protocol(model: SequenceModel, tokens: torch.Tensor, alice: torch.Tensor) -> Transcript:
    """Thm 4 for a one-layer ``transformer``: ``alice`` [T] bool marks Alice's positions and must hold T-1.

    Each party scores its own keys against the last query, they share the max M, then Z_A, Z_B =
    sum exp(A - M) and U_A, U_B = sum exp(A - M) V over their own positions; (U_A + U_B) / (Z_A + Z_B) is the
    attention output, and the rest of the block is local to Alice.
    """
    if len(model.blocks) != 1 or type(model.blocks[0].mixer) is not SoftmaxAttention:
        kind = type(model.blocks[-1].mixer).__name__
        raise ValueError(f"the partition protocol is for one-layer softmax Transformers, not {len(model.blocks)} "
                         f"layer(s) of {kind}")
    if not bool(alice[-1]):
        raise ValueError("Alice must hold the last position")
    block, mixer = model.blocks[0], model.blocks[0].mixer
    batch, length = tokens.shape
    x = model._embed(tokens, torch.arange(length, device=tokens.device), length)
    q, k, v = mixer._split(block.norm_mix(x))  # [B, T, H, D]; each party computes its own positions' rows
    logits = torch.einsum("bhd,bthd->bht", q[:, -1], k) / mixer.head_dim ** 0.5
    parties = [alice, ~alice]
    maxima = [logits[..., side].amax(-1) for side in parties if bool(side.any())]
    peak = torch.stack(maxima).amax(0)  # exchanged: one max per party and head
    z = torch.zeros_like(peak)
    u = torch.zeros(batch, mixer.heads, mixer.head_dim, dtype=x.dtype, device=x.device)
    for side in parties:
        weights = (logits[..., side] - peak[..., None]).exp()
        z = z + weights.sum(-1)
        u = u + torch.einsum("bht,bthd->bhd", weights, v[:, side])
    attended = mixer.out((u / z[..., None]).reshape(batch, -1))
    last = x[:, -1] + attended
    if block.mlp is not None:
        last = last + block.mlp(block.norm_mlp(last))
    numbers = model.config.width + mixer.heads * (2 + 2 + 2 * mixer.head_dim)
    return Transcript(model.head(model.norm(last)), numbers)
