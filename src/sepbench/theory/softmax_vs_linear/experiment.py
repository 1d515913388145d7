"""The success event E and the runner: count E over independent random networks (Deng et al. sec. 7).

E = {F_exp(D0) = 0} and {F_exp(D1) > 0} and {F_lin(D0) = 0} and {F_lin(D1) = 0} (reconstructed, sec. 7):
softmax distinguishes the pair, linear attention outputs 0 on both. Each trial draws a fresh Rademacher
readout W (shared by the softmax and the linear network) and a fresh (D0, D1) pair; all trials of a
setting are evaluated as one batch (split into chunks only to bound memory).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from sepbench.theory.softmax_vs_linear.attention import KINDS, logits, normalise
from sepbench.theory.softmax_vs_linear.datasets import CrossData, DataParams, SelfData, TokenSet, ToyData
from sepbench.theory.softmax_vs_linear.networks import rademacher, readout, unit_sum

ModelName = Literal["toy", "self", "cross"]
DATA: dict[str, type[DataParams]] = {"toy": ToyData, "self": SelfData, "cross": CrossData}
NETWORK_FIELDS = ("m", "tau", "rows")
CHUNK_ENTRIES = 1 << 23
DTYPE = torch.float32
"""Float32 halves the cost of the self-attention points; every threshold test in E sits far above its rounding."""


class Setting(BaseModel):
    """One parameter setting: which model, its dataset constants, and the readout network."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ModelName
    data: ToyData | SelfData | CrossData
    m: int = Field(8, ge=1, description="number of Rademacher units")
    tau: float = Field(0.5, ge=0, description="ReLU threshold")
    rows: Literal["all", "first"] = Field("all", description="sum the units over all output rows or row 1 only")

    @classmethod
    def from_flat(cls, model: str, params: dict[str, Any]) -> "Setting":
        """Build from one flat mapping: network fields (m, tau, rows) plus the model's dataset fields."""
        if model not in DATA:
            raise ValueError(f"unknown model '{model}'; allowed: {', '.join(DATA)}")
        network = {k: v for k, v in params.items() if k in NETWORK_FIELDS}
        data = DATA[model](**{k: v for k, v in params.items() if k not in NETWORK_FIELDS})
        return cls(model=model, data=data, **network)


@dataclass(frozen=True)
class PointResult:
    """Counts over ``trials`` draws: E and its four parts."""

    successes: int
    trials: int
    exp_d0_zero: int
    exp_d1_positive: int
    lin_d0_zero: int
    lin_d1_zero: int
    seconds: float

    @property
    def frequency(self) -> float:
        return self.successes / self.trials

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _unit_sums(setting: Setting, queries: TokenSet, keys: TokenSet, W: Tensor) -> dict[str, Tensor]:
    """F for both kinds from one logit matrix; ``<w_l, Att_i> = (A (Y^T W))_{il}`` costs n^2 m, not n^2 d."""
    X, counts = queries.columns, queries.counts
    if setting.rows == "first":
        X, counts = X[..., :1], None
    scores = logits(X, keys.columns)
    projected = keys.columns.transpose(-1, -2) @ W
    return {kind: unit_sum(normalise(scores, kind, keys.counts) @ projected, setting.tau, counts) for kind in KINDS}


def readouts(setting: Setting, batch: int, generator: torch.Generator, dtype: torch.dtype = DTYPE,
             device: str | torch.device = "cpu") -> dict[tuple[str, int], Tensor]:
    """F_kind(D_label) for ``batch`` independent (network, D0, D1) draws, keyed by (kind, label)."""
    data = setting.data
    out: dict[tuple[str, int], Tensor] = {}
    if isinstance(data, ToyData):
        pair = data.sample(batch, generator, dtype)
        W = rademacher(batch, data.n, setting.m, generator, dtype).to(device)
        for label, x in enumerate(pair):
            for kind in KINDS:
                out[kind, label] = readout(normalise(x.to(device), kind).unsqueeze(1), W, setting.tau)
        return out
    pairs = data.sample(batch, generator, dtype)
    W = rademacher(batch, data.d, setting.m, generator, dtype).to(device)
    for label, instance in enumerate(pairs):
        queries, keys = (instance, instance) if isinstance(data, SelfData) else instance
        for kind, F in _unit_sums(setting, queries.to(device), keys.to(device), W).items():
            out[kind, label] = F
    return out


def _chunk(setting: Setting) -> int:
    data = setting.data
    if isinstance(data, SelfData):
        queries = 1 if setting.rows == "first" else data.n
        return max(1, CHUNK_ENTRIES // (queries * max(data.n, data.d)))
    width = data.n if isinstance(data, ToyData) else data.d
    return max(1, CHUNK_ENTRIES // (width * setting.m))


def run_point(setting: Setting, trials: int = 100, seed: int = 0, dtype: torch.dtype = DTYPE,
              device: str | torch.device = "cpu") -> PointResult:
    """Count E over ``trials`` independent draws; the same seed gives the same counts."""
    if trials < 1:
        raise ValueError(f"trials must be at least 1, got {trials}")
    start = time.perf_counter()
    generator = torch.Generator().manual_seed(seed)
    totals = dict.fromkeys(("successes", "exp_d0_zero", "exp_d1_positive", "lin_d0_zero", "lin_d1_zero"), 0)
    done, chunk = 0, _chunk(setting)
    while done < trials:
        batch = min(chunk, trials - done)
        F = readouts(setting, batch, generator, dtype, device)
        parts = {"exp_d0_zero": F["exp", 0] == 0, "exp_d1_positive": F["exp", 1] > 0,
                 "lin_d0_zero": F["lin", 0] == 0, "lin_d1_zero": F["lin", 1] == 0}
        success = parts["exp_d0_zero"] & parts["exp_d1_positive"] & parts["lin_d0_zero"] & parts["lin_d1_zero"]
        totals["successes"] += int(success.sum())
        for name, hit in parts.items():
            totals[name] += int(hit.sum())
        done += batch
    return PointResult(trials=trials, seconds=time.perf_counter() - start, **totals)
