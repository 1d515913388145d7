"""The distinguishing datasets D0 / D1 of each model, as reconstructed (R1, R2, R3; docs/softmax_vs_linear.md).

The paper's values were stripped from the text: the shapes follow its surviving prose (one dominant
coordinate, Type I/II/III columns, "all the entries are [..]", "one-sparse"), every constant is ours and
is a parameter here. Each ``sample`` draws ``batch`` independent (D0, D1) instances at once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import Tensor


class DataParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class TokenSet:
    """Column tokens (B, d, u) where column t stands for ``counts[t]`` identical tokens (all ones if None)."""

    columns: Tensor
    counts: Tensor | None = None

    def to(self, device: str | torch.device) -> "TokenSet":
        return TokenSet(self.columns.to(device), None if self.counts is None else self.counts.to(device))


class ToyData(DataParams):
    """R1, softmax regression (Deng et al. Def. 3.8): D0 has every x_i in [c_lo, c_hi]; D1 also has x_j = C ln n."""

    n: int = Field(ge=2, description="dimension of x")
    c_lo: float = Field(1.0, gt=0, description="lower end of the bounded band")
    c_hi: float = Field(2.0, gt=0, description="upper end of the bounded band")
    C: float = Field(2.0, gt=0, description="spike x_j = C ln n in D1")

    @model_validator(mode="after")
    def _band(self) -> "ToyData":
        if self.c_hi < self.c_lo:
            raise ValueError(f"c_hi ({self.c_hi}) must be at least c_lo ({self.c_lo})")
        return self

    def sample(self, batch: int, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor]:
        """(D0, D1) vectors, each (batch, n)."""
        def band() -> Tensor:
            return self.c_lo + (self.c_hi - self.c_lo) * torch.rand(batch, self.n, generator=generator, dtype=dtype)

        x0, x1 = band(), band()
        j = torch.randint(0, self.n, (batch,), generator=generator)
        x1[torch.arange(batch), j] = self.C * math.log(self.n)
        return x0, x1


def random_subsets(shape: tuple[int, ...], population: int, size: int, generator: torch.Generator) -> Tensor:
    """Uniform ``size``-subsets of ``range(population)``, one per entry of ``shape`` (Floyd's algorithm, batched)."""
    chosen = torch.empty(*shape, size, dtype=torch.long)
    for i, top in enumerate(range(population - size, population)):
        pick = torch.randint(0, top + 1, shape, generator=generator)
        taken = (chosen[..., :i] == pick.unsqueeze(-1)).any(dim=-1)
        chosen[..., i] = torch.where(taken, top, pick)
    return chosen


def skip(index: Tensor, anchor: Tensor) -> Tensor:
    """Map indices in ``range(d - 1)`` onto ``range(d)`` without ``anchor`` (broadcast over trailing dims)."""
    return index + (index >= anchor).long()


class SelfData(DataParams):
    """R2, self attention (Deng et al. Def. 6.1/D.1): X in R^{d x n} with Type I, II and III columns.

    Type I (column 1): D1 = b e_S / sqrt(s) with b = sqrt(C ln n), D0 = e_S / sqrt(s), S = the anchor j plus
    s - 1 random coordinates. Type II (columns 2..n-1): k-sparse with entries 1/sqrt(k); App. D variant: every
    support contains the anchor; App. E variant: only a fraction ``anchored`` of them do, the rest avoid it,
    so the row-1 logits take two values. Type III (column n): 1_d / sqrt(d).
    """

    n: int = Field(ge=3, description="sequence length")
    d: int = Field(ge=2, description="token dimension")
    k: int = Field(8, ge=1, description="sparsity of Type II columns")
    C: float = Field(4.0, gt=0, description="Type I logit b^2 = C ln n in D1")
    s: int = Field(1, ge=1, description="support size of the Type I signal (3 gives the paper's 1/8 case)")
    variant: Literal["D", "E"] = Field("D", description="App. D (all Type II anchored) or App. E (a fraction)")
    anchored: float = Field(0.5, gt=0, le=1, description="App. E: fraction of Type II columns holding the anchor")

    @model_validator(mode="after")
    def _fits(self) -> "SelfData":
        if self.k > self.d:
            raise ValueError(f"k ({self.k}) must be at most d ({self.d})")
        if self.s > self.d:
            raise ValueError(f"s ({self.s}) must be at most d ({self.d})")
        if self.variant == "E" and self.k > self.d - 1:
            raise ValueError(f"variant E needs k ({self.k}) at most d - 1 ({self.d - 1})")
        return self

    @property
    def b(self) -> float:
        return math.sqrt(self.C * math.log(self.n))

    def anchored_columns(self) -> int:
        return self.n - 2 if self.variant == "D" else max(1, round(self.anchored * (self.n - 2)))

    def _one(self, batch: int, spike: float, generator: torch.Generator, dtype: torch.dtype) -> TokenSet:
        d, n2 = self.d, self.n - 2
        anchor = torch.randint(0, d, (batch,), generator=generator)
        tokens = torch.zeros(batch, self.n, d, dtype=dtype)
        others = skip(random_subsets((batch,), d - 1, self.s - 1, generator), anchor[:, None])
        type1 = torch.cat([anchor[:, None], others], dim=-1)
        tokens[:, 0].scatter_(-1, type1, spike / math.sqrt(self.s))
        held, free = self.anchored_columns(), n2 - self.anchored_columns()
        holding = skip(random_subsets((batch, held), d - 1, self.k - 1, generator), anchor[:, None, None])
        holding = torch.cat([anchor[:, None, None].expand(batch, held, 1), holding], dim=-1)
        avoiding = skip(random_subsets((batch, free), d - 1, self.k, generator), anchor[:, None, None])
        tokens[:, 1:-1].scatter_(-1, torch.cat([holding, avoiding], dim=1), 1.0 / math.sqrt(self.k))
        tokens[:, -1] = 1.0 / math.sqrt(d)
        return TokenSet(tokens.transpose(1, 2))

    def sample(self, batch: int, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> tuple[TokenSet, TokenSet]:
        return self._one(batch, 1.0, generator, dtype), self._one(batch, self.b, generator, dtype)


class CrossData(DataParams):
    """R3, cross attention (Deng et al. Def. F.1): x_1 = a e_{j1}, x_2..n = 1_d; y_1 = e_{j2}, y_2..n = 1_d / d.

    Every logit except (1, 1) equals 1; D1 has j2 = j1 (logit a at (1, 1)), D0 has j2 != j1 (logit 0).
    The repeated columns are kept as counted tokens, so one instance costs O(d) whatever n is.
    """

    n: int = Field(ge=2, description="sequence length of X and Y")
    d: int = Field(ge=2, description="token dimension")
    spike: float | None = Field(None, gt=0, description="the value a of x_1 at j1 (default: d)")

    @property
    def a(self) -> float:
        return float(self.d) if self.spike is None else self.spike

    def sample(self, batch: int, generator: torch.Generator,
               dtype: torch.dtype = torch.float64) -> tuple[tuple[TokenSet, TokenSet], tuple[TokenSet, TokenSet]]:
        """((X0, Y0), (X1, Y1)), each a counted token set with two distinct columns."""
        d, rows = self.d, torch.arange(batch)
        counts = torch.tensor([1, self.n - 1])
        j1 = torch.randint(0, d, (batch,), generator=generator)
        j2_d0 = (j1 + torch.randint(1, d, (batch,), generator=generator)) % d

        def tokens(first: Tensor, rest: float) -> TokenSet:
            columns = torch.full((batch, d, 2), rest, dtype=dtype)
            columns[:, :, 0] = first
            return TokenSet(columns, counts)

        def one_hot(index: Tensor, value: float) -> Tensor:
            out = torch.zeros(batch, d, dtype=dtype)
            out[rows, index] = value
            return out

        X = tokens(one_hot(j1, self.a), 1.0)
        Y0 = tokens(one_hot(j2_d0, 1.0), 1.0 / d)
        Y1 = tokens(one_hot(j1, 1.0), 1.0 / d)
        return (X, Y0), (X, Y1)
