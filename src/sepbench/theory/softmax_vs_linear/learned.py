"""Beyond the paper: train a one-layer attention classifier to tell D0 from D1, softmax vs linear.

Same generators as the random-network experiments (R2 self-attention data), fresh samples every step.
The classifier mirrors the paper's network with every weight learned: attention with a learned combined
matrix W (entries kept non-negative through a softplus, so linear attention's row sums stay positive on
the non-negative data), then units ``ReLU(<w_l, Att_i> - tau_l)`` averaged over rows, then a linear logit.
The softmax and linear classifiers differ only in exp versus identity.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Callable, Literal

import pandas as pd
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from sepbench.theory.softmax_vs_linear.attention import KINDS, Kind, logits, normalise
from sepbench.theory.softmax_vs_linear.datasets import SelfData


class LearnedConfig(BaseModel):
    """The learned comparison: one R2 dataset family per n, the same training budget for both kinds."""

    model_config = ConfigDict(extra="forbid")

    lengths: list[Annotated[int, Field(ge=3)]] = Field(default_factory=lambda: [8, 32, 128, 256], min_length=1)
    d: int = Field(32, ge=2)
    k: int = Field(4, ge=1)
    C: float = Field(4.0, gt=0)
    variant: Literal["D", "E"] = "D"
    units: int = Field(16, ge=1)
    steps: int = Field(300, ge=1)
    batch_size: int = Field(64, ge=2)
    lr: float = Field(1e-2, gt=0)
    test_samples: int = Field(2000, ge=2)
    seed: int = 0

    def describe(self) -> str:
        return (f"d={self.d}, k={self.k}, C={self.C}, variant {self.variant}, {self.units} units, {self.steps} steps "
                f"of {self.batch_size}, {self.test_samples} test samples, seed {self.seed}")

    def data(self, n: int) -> SelfData:
        return SelfData(n=n, d=self.d, k=self.k, C=self.C, variant=self.variant)


class AttentionClassifier(nn.Module):
    """Tokens (B, d, n) -> one logit: attention (exp or lin) -> ReLU units -> mean over rows -> linear."""

    def __init__(self, d: int, units: int, kind: Kind) -> None:
        super().__init__()
        self.kind = kind
        self.raw_W = nn.Parameter(torch.randn(d, d) * 0.1)
        self.value = nn.Linear(d, units)
        self.head = nn.Linear(units, 1)

    def forward(self, X: Tensor) -> Tensor:
        W = nn.functional.softplus(self.raw_W)
        rows = normalise(logits(X, X, W), self.kind) @ X.transpose(-1, -2)
        return self.head(torch.relu(self.value(rows)).mean(dim=-2)).squeeze(-1)


def labelled_batch(data: SelfData, size: int, generator: torch.Generator, device: torch.device) -> tuple[Tensor, Tensor]:
    """``size`` D0 instances labelled 0 and ``size`` D1 instances labelled 1."""
    d0, d1 = data.sample(size, generator, torch.float32)
    X = torch.cat([d0.columns, d1.columns]).to(device)
    y = torch.cat([torch.zeros(size), torch.ones(size)]).to(device)
    return X, y


def train_one(config: LearnedConfig, n: int, kind: Kind, device: torch.device) -> dict[str, float]:
    """Train from a fixed seed on fresh samples; test accuracy on fresh held-out samples."""
    start = time.perf_counter()
    data = config.data(n)
    torch.manual_seed(config.seed)
    model = AttentionClassifier(config.d, config.units, kind).to(device)
    optimiser = torch.optim.Adam(model.parameters(), lr=config.lr)
    train_gen = torch.Generator().manual_seed(config.seed * 7919 + n)
    loss = torch.tensor(float("nan"))
    for _ in range(config.steps):
        X, y = labelled_batch(data, config.batch_size // 2, train_gen, device)
        loss = nn.functional.binary_cross_entropy_with_logits(model(X), y)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    test_gen = torch.Generator().manual_seed(config.seed * 7919 + n + 10**6)
    correct = 0
    with torch.no_grad():
        remaining = config.test_samples // 2
        while remaining:
            size = min(remaining, 250)
            X, y = labelled_batch(data, size, test_gen, device)
            correct += int(((model(X) > 0).float() == y).sum())
            remaining -= size
    return {"n": n, "kind": kind, "test_accuracy": correct / (2 * (config.test_samples // 2)),
            "final_loss": float(loss.detach()), "seconds": time.perf_counter() - start}


def run_learned(config: LearnedConfig, device: str | torch.device = "cpu",
                on_result: Callable[[dict[str, float]], None] | None = None) -> pd.DataFrame:
    """Test accuracy of the softmax and the linear classifier for every n."""
    device = torch.device(device)
    rows = []
    for n in config.lengths:
        for kind in KINDS:
            rows.append(train_one(config, n, kind, device))
            if on_result is not None:
                on_result(rows[-1])
    return pd.DataFrame(rows)


def write_learned(config: LearnedConfig, out_dir: Path, device: str | torch.device = "cpu",
                  on_result: Callable[[dict[str, float]], None] | None = None) -> tuple[pd.DataFrame, Path]:
    """``run_learned``, with its rows written to ``out_dir``/learned.csv; returns the rows and the file."""
    frame = run_learned(config, device, on_result)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "learned.csv"
    path.write_text("# learned one-layer classifiers on reconstructed R2 data (docs/softmax_vs_linear.md); settings ours\n"
                    + frame.to_csv(index=False))
    return frame, path
