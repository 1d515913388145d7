"""The shared backbone: embedding (+ positions) -> N x [norm, mixer, optional MLP] -> norm -> head."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from sepbench.config import ModelConfig
from sepbench.models.registry import MODELS


class SinusoidalPositions(nn.Module):
    """Fixed sin/cos position codes (Vaswani et al. 2017, sec. 3.5)."""

    def __init__(self, max_len: int, width: int) -> None:
        super().__init__()
        position = torch.arange(max_len, dtype=torch.float32)[:, None]
        freq = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10000.0) / width))
        table = torch.zeros(max_len, width)
        table[:, 0::2] = torch.sin(position * freq)
        table[:, 1::2] = torch.cos(position * freq)[:, : width // 2]
        self.register_buffer("table", table, persistent=False)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self.table[positions]


class LearnedPositions(nn.Module):
    """A learned absolute position embedding, as the separations paper uses for its main results."""

    def __init__(self, max_len: int, width: int) -> None:
        super().__init__()
        self.table = nn.Embedding(max_len, width)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self.table(positions)


POSITIONS: dict[str, type[nn.Module]] = {"learned": LearnedPositions, "sinusoidal": SinusoidalPositions}


class MLP(nn.Module):
    def __init__(self, width: int, ratio: int, dropout: float) -> None:
        super().__init__()
        self.up = nn.Linear(width, ratio * width)
        self.act = nn.GELU()
        self.down = nn.Linear(ratio * width, width)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.down(self.act(self.up(x))))


class Block(nn.Module):
    """Pre-LN residual block: x + mixer(norm(x)), then x + mlp(norm(x)) when the model has an MLP."""

    def __init__(self, config: ModelConfig, max_len: int) -> None:
        super().__init__()
        self.norm_mix = nn.LayerNorm(config.width)
        self.mixer = MODELS.get(config.name)(config, max_len)
        self.drop = nn.Dropout(config.dropout)
        self.norm_mlp = nn.LayerNorm(config.width) if config.mlp else None
        self.mlp = MLP(config.width, config.mlp_ratio, config.dropout) if config.mlp else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.feed(self.mix(x))

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        """The residual mixer step over the whole sequence [B, T, D]."""
        return x + self.drop(self.mixer(self.norm_mix(x)))

    def feed(self, x: torch.Tensor) -> torch.Tensor:
        """The residual MLP step; per position, so ``x`` may be any [..., D] selection of positions."""
        if self.mlp is not None:
            x = x + self.mlp(self.norm_mlp(x))
        return x

    def step(self, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        y, state = self.mixer.step(self.norm_mix(x), state)
        x = x + y
        if self.mlp is not None:
            x = x + self.mlp(self.norm_mlp(x))
        return x, state


@dataclass
class DecodeState:
    """Per-block mixer states and the position of the next token."""

    blocks: list[Any]
    position: int = 0


class SequenceModel(nn.Module):
    """A language model over task tokens built from one registered mixer."""

    def __init__(self, config: ModelConfig, vocab_size: int, max_len: int) -> None:
        super().__init__()
        self.config = config
        self.max_len = max_len
        self.embed = nn.Embedding(vocab_size, config.width)
        position_cls = POSITIONS.get(config.positions)
        self.positions = position_cls(max_len, config.width) if position_cls else None
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config, max_len) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, vocab_size, bias=False)
        self._init_own_parameters()

    def _init_own_parameters(self) -> None:
        """GPT-2 style N(0, 0.02) for the backbone's embeddings, MLPs and head; mixers keep their own.

        The token embedding uses ``config.embed_std``: next to fixed sinusoidal codes (norm sqrt(width / 2))
        0.02 leaves the token signal a few percent of the input; Feng et al.'s reference keeps PyTorch's N(0, 1).
        """
        own: list[nn.Module] = [self.embed, self.head]
        if isinstance(self.positions, LearnedPositions):
            own.append(self.positions.table)
        own += [block.mlp for block in self.blocks if block.mlp is not None]
        for module in own:
            for sub in module.modules():
                if isinstance(sub, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(sub.weight, std=self.config.embed_std if sub is self.embed else 0.02)
                    if getattr(sub, "bias", None) is not None:
                        nn.init.zeros_(sub.bias)

    def _embed(self, tokens: torch.Tensor, positions: torch.Tensor, end: int) -> torch.Tensor:
        if end > self.max_len and self.positions is not None:
            raise ValueError(f"a sequence of {end} tokens exceeds this model's max_len {self.max_len}")
        x = self.embed(tokens)
        if self.positions is not None:
            x = x + self.positions(positions)
        return self.drop(x)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [B, T, V] for tokens [B, T], every position attending only to its past.

        With ``positions`` (bool [B, T]) only the logits at the True positions, [M, V] in row-major order
        (``logits[positions]`` of the full call): the last block's MLP, the final norm and the head, all per
        position, then run on those M rows alone.
        """
        length = tokens.shape[1]
        x = self._embed(tokens, torch.arange(length, device=tokens.device), length)
        for block in self.blocks[:-1]:
            x = block(x)
        x = self.blocks[-1].mix(x)
        if positions is not None:
            x = x[positions]
        return self.head(self.norm(self.blocks[-1].feed(x)))

    def compute_paths(self, device: torch.device) -> dict[str, str]:
        """The implementation each mixer computation with a choice runs on ``device`` (``Mixer.compute_paths``)."""
        return {name: path for block in self.blocks for name, path in block.mixer.compute_paths(device).items()}

    def init_state(self, batch_size: int, device: torch.device | None = None) -> DecodeState:
        param = next(self.parameters())
        device = device or param.device
        return DecodeState([b.mixer.init_state(batch_size, device, param.dtype) for b in self.blocks])

    def step(self, tokens: torch.Tensor, state: DecodeState) -> tuple[torch.Tensor, DecodeState]:
        """Logits [B, V] for the next tokens [B], given everything before them in ``state``."""
        x = self._embed(tokens, torch.tensor(state.position, device=tokens.device), state.position + 1)
        new_states = []
        for block, block_state in zip(self.blocks, state.blocks):
            x, block_state = block.step(x, block_state)
            new_states.append(block_state)
        return self.head(self.norm(x)), DecodeState(new_states, state.position + 1)


def build_model(config: ModelConfig, vocab_size: int, max_len: int) -> SequenceModel:
    return SequenceModel(config, vocab_size, max_len)
