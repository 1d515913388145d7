"""Lower bounds of Bhattamishra et al. 2024 on model size, as functions of task size N and precision p bits.

Each bound names the architecture family it constrains and the quantity it bounds (width m, width x heads
mH, or state bits mp). Logarithms are base 2 (bits). Thm 12 states mpH = Omega(N); ``equality`` makes it
concrete through Thm 4's 3m(p + log N)H-bit protocol and Fact 2 (EQ on N/2-bit halves needs N/2 bits).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Iterable

import pandas as pd


@dataclass(frozen=True)
class Bound:
    """One theorem's lower bound at one (N, p)."""

    theorem: str
    architecture: str
    quantity: str
    value: float  # the bound on ``quantity`` (a real number)
    minimum: int  # the smallest integer ``quantity`` allowed
    statement: str

    def allows(self, size: float) -> bool:
        """Whether a model whose bounded quantity is ``size`` escapes this bound."""
        return size >= self.value


def rnn_index_lookup(n: int, p: int) -> Bound:
    """Thm 3 (App. C.1, L369-377): a recurrent model doing Index Lookup on length-N strings has m >= N/p."""
    value = n / p
    return Bound("Thm 3", "recurrent (RNN, SSM, linear attention)", "width m", value, math.ceil(value), "m >= N / p")


def rnn_associative_recall(n: int, p: int) -> Bound:
    """Prop 9 (L379-385): single-query associative recall over N distinct keys needs m >= N/p."""
    value = n / p
    return Bound("Prop 9", "recurrent (RNN, SSM, linear attention)", "width m", value, math.ceil(value), "m >= N / p")


def one_layer_dyck(n: int, p: int) -> Bound:
    """Thm 5 (L126-128, App. E): a 1-layer Transformer deciding Dyck-(2,2) has mH >= (N-1) / (3(p + log N))."""
    value = (n - 1) / (3 * (p + math.log2(n)))
    return Bound("Thm 5", "one-layer Transformer", "width x heads mH", value, math.ceil(value),
                 "mH >= (N - 1) / (3 (p + log N))")


def rnn_nearest_neighbor(n: int, p: int) -> Bound:
    """Thm 8 (App. G.1, L733-747): a recurrent model doing NstNb on length-N inputs has m >= N/(2p)."""
    value = n / (2 * p)
    return Bound("Thm 8", "recurrent (RNN, SSM, linear attention)", "width m", value, math.ceil(value), "m >= N / (2p)")


def rnn_equality(n: int, p: int) -> Bound:
    """Thm 11 (L582-596): a recurrent model computing INEQ on {0,1}^N has mp >= N/2."""
    value = n / (2 * p)
    return Bound("Thm 11", "recurrent (RNN, SSM, linear attention)", "width m", value, math.ceil(value), "mp >= N / 2")


def one_layer_equality(n: int, p: int) -> Bound:
    """Thm 12 (L598-602): a 1-layer Transformer computing INEQ has mpH = Omega(N); here mH >= N / (6(p + log N))."""
    value = n / (6 * (p + math.log2(n)))
    return Bound("Thm 12", "one-layer Transformer", "width x heads mH", value, math.ceil(value),
                 "3 m (p + log N) H >= N / 2  (Thm 4 + Fact 2)")


def _mqar(n: int, p: int) -> Bound:
    """MQAR with N pairs is NstNb over 2N points whose first N are distinct (Thm 8 proof): m >= N / p."""
    bound = rnn_nearest_neighbor(2 * n, p)
    return Bound("Thm 8", bound.architecture, bound.quantity, bound.value, bound.minimum, "m >= N / p  (N pairs = 2N points)")


BOUNDS: dict[str, list[Callable[[int, int], Bound]]] = {
    "index_lookup": [rnn_index_lookup],
    "dyck": [one_layer_dyck],
    "eq_random": [rnn_equality, one_layer_equality],
    "eq_one": [rnn_equality, one_layer_equality],
    "equality": [rnn_equality, one_layer_equality],
    "nearest_neighbor": [rnn_nearest_neighbor],
    "mqar": [_mqar],
    "associative_recall": [rnn_associative_recall],
}


SHORTEST = 2
"""The smallest task size the bounds are stated for (log N must be positive)."""

EVEN_ONLY = frozenset({"dyck", "eq_random", "eq_one", "equality"})
"""Tasks whose instances have even length (balanced strings; two equal halves): their bounds need even N."""


def bounds_for(task: str, length: int, precision: int) -> list[Bound]:
    """Every bound the paper proves for ``task`` at N = ``length`` and p = ``precision`` bits."""
    if task not in BOUNDS:
        raise ValueError(f"no lower bound for task '{task}'; allowed: {', '.join(BOUNDS)}")
    if length < SHORTEST:
        raise ValueError(f"length must be >= {SHORTEST}, got {length}")
    if task in EVEN_ONLY and length % 2:
        raise ValueError(f"{task} instances have even length; got N={length}")
    if precision < 1:
        raise ValueError(f"precision must be >= 1 bit, got {precision}")
    return [bound(length, precision) for bound in BOUNDS[task]]


def bound_table(task: str, lengths: Iterable[int], precision: int) -> pd.DataFrame:
    """Bounds as rows (task, length, precision, theorem, ...) for overlaying on measured size-vs-N curves."""
    rows = [{"task": task, "length": n, "precision": precision, **asdict(b)}
            for n in lengths for b in bounds_for(task, n, precision)]
    return pd.DataFrame(rows)


def first_length_that_bites(bound: Callable[[int, int], Bound], size: float, precision: int, limit: int = 10**9) -> int:
    """Smallest N at which ``bound`` rules out a model of the given size (binary search; bounds grow with N)."""
    lo, hi = 2, 2
    while bound(hi, precision).allows(size):
        if hi > limit:
            raise ValueError(f"the bound does not exceed {size} below N = {limit}")
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if bound(mid, precision).allows(size):
            lo = mid + 1
        else:
            hi = mid
    return hi
