"""LSTM (Hochreiter & Schmidhuber 1997) as a token mixer, PyTorch's built-in cell as in the paper."""
from __future__ import annotations

import torch
from torch import nn

from sepbench.config import ModelConfig
from sepbench.models.mixers.base import Mixer
from sepbench.models.registry import MODELS


@MODELS.register("lstm", "LSTM, one torch.nn.LSTM layer per block (Bhattamishra et al. 2024, sec. 6)")
class LSTMMixer(Mixer):
    """One LSTM layer; the state is (h, c), 2 x width floats per example, whatever the length."""

    default_lr = 3e-3  # measured on Index Lookup: N = 5 solved in 1500 steps (1e-3: 0.47); N = 20 0.23 (1e-3: 0.17)
    default_positions = "none"
    default_mlp = False

    def __init__(self, config: ModelConfig, max_len: int) -> None:
        super().__init__(config, max_len)
        self.lstm = nn.LSTM(config.width, config.width, batch_first=True)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lstm.reset_parameters()
        hidden = self.width
        with torch.no_grad():  # forget-gate bias 1 (Jozefowicz et al. 2015); gate order i, f, g, o
            self.lstm.bias_ih_l0[hidden : 2 * hidden].fill_(1.0)
            self.lstm.bias_hh_l0[hidden : 2 * hidden].zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lstm(x)[0]

    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        zeros = torch.zeros(1, batch_size, self.width, device=device, dtype=dtype)
        return zeros, zeros.clone()

    def step(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, tuple]:
        y, state = self.lstm(x.unsqueeze(1), state)
        return y.squeeze(1), state

    def has_batching_rule(self, device: torch.device) -> bool:
        return False  # aten::lstm has none

    def state_floats(self, length: int) -> int:
        """Closed form: h and c, 2 D floats."""
        return 2 * self.width

    def flops(self, length: int) -> int:
        """Four gates from input and hidden state: 2 T 4D (D + D) = 16 T D^2."""
        return 16 * length * self.width**2
