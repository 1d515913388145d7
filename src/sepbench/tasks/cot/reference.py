"""Feng et al.'s (2023) sampling loops restated in plain Python, one sample at a time.

The yardstick of the CoT distribution tests and of ``benchmarks/cot_generation.py``: the reference's draws in
its order and from the same kinds of random source (Python ``random`` for arithmetic, one call of numpy's
legacy ``RandomState`` per draw for edit distance and LIS), and its data sets (a Python set of whole rows
filled to the train size, then test rows not in it). Rows are sepbench token ids ending in <eos>, but for
``arithmetic_text_row``: the same arithmetic samples in the published loop's own form, which the benchmark times.
"""
from __future__ import annotations

import random
from functools import lru_cache
from typing import Callable

import numpy as np

from sepbench.tasks.cot import arithmetic as ar
from sepbench.tasks.cot import edit_distance as ed
from sepbench.tasks.cot import lis

EOS = 2


def arithmetic_row(rng: random.Random, operators: int, p: int = 11) -> list[int]:
    """An expression grown by ``operators`` expansions of a random number, then its CoT (arithmetic/data.py)."""
    expr = [ar.NUMBER0 + rng.randrange(p)]
    history = [expr]
    for _ in range(operators):
        at = rng.randrange(len(expr))
        while expr[at] < ar.NUMBER0:
            at = rng.randrange(len(expr))
        a, op, b = _expansion(rng, expr[at] - ar.NUMBER0, p)
        left = expr[at - 1] if at > 0 else None
        right = expr[at + 1] if at + 1 < len(expr) else None
        additive = op in (ar.PLUS, ar.MINUS)
        if left == ar.DIVIDE:
            bracket = True
        elif left == ar.TIMES or right in (ar.TIMES, ar.DIVIDE) or left == ar.MINUS:
            bracket = additive
        else:
            bracket = False
        piece = [ar.OPEN, a, op, b, ar.CLOSE] if bracket else [a, op, b]
        expr = expr[:at] + piece + expr[at + 1 :]
        history.append(expr)
    row: list[int] = []
    for e in reversed(history):
        row += e + [ar.EQUALS]
    return row[:-1] + [EOS]


def arithmetic_text_row(rng: random.Random, operators: int, p: int = 11) -> list[str]:
    """``arithmetic_row``'s sample from the same draws, built as the published loop builds it (arithmetic/data.py):
    string tokens, a op b = x solved through a p x p numpy table, the expansion put in token by token, the
    history joined by repeated list concatenation, no <eos>. The reference as it runs, for timing it."""
    divide = _division_table(p)
    expr = [str(rng.randrange(p))]
    history = [expr[:]]
    for _ in range(operators):
        at = rng.randint(0, len(expr) - 1)
        while not expr[at].isdigit():
            at = rng.randint(0, len(expr) - 1)
        piece = _text_expansion(rng, int(expr[at]), p, divide)
        left = expr[at - 1] if at > 0 else None
        right = expr[at + 1] if at < len(expr) - 1 else None
        if left == "/":
            bracket = True
        elif left == "*" or right in ("*", "/") or left == "-":
            bracket = piece[2] in ("+", "-")
        else:
            bracket = False
        del expr[at]
        for token in reversed(piece if bracket else piece[1:-1]):
            expr.insert(at, token)
        history.append(expr[:])
    row: list[str] = []
    for step in reversed(history):
        row = row + step + ["="]
    return row[:-1]


@lru_cache(maxsize=None)
def _division_table(p: int) -> np.ndarray:
    """Row x, column a: the b with a * b = x (mod p), found in the table of products as the published loop does."""
    times = np.arange(p)[:, None] * np.arange(p)[None, :] % p
    divide = np.zeros((p, p), np.int32)
    for x in range(p):
        a, b = np.nonzero(times == x)
        divide[x, a] = b
    return divide


def _text_expansion(rng: random.Random, x: int, p: int, divide: np.ndarray) -> list[str]:
    """``_expansion``'s draws, solved through the division table: ['(', a, op, b, ')'] as strings."""
    while True:
        a = rng.randrange(p)
        op = rng.choice("+-*/")
        if op == "+":
            b = (x - a) % p
        elif op == "-":
            b = (a - x) % p
        elif op == "*":
            if a == 0 and x != 0:
                continue
            b = rng.randrange(p) if a == 0 else divide[x, a]
        elif x == 0 and a == 0:
            b = rng.randrange(p)
            if b == 0:
                continue
        elif x == 0 or a == 0:
            continue
        else:
            b = divide[a, x]
        return ["(", str(a), op, str(b), ")"]


def _expansion(rng: random.Random, x: int, p: int) -> tuple[int, int, int]:
    while True:
        a = rng.randrange(p)
        op = rng.choice(ar.OPERATORS)
        if op == ar.PLUS:
            b = (x - a) % p
        elif op == ar.MINUS:
            b = (a - x) % p
        elif op == ar.TIMES:
            if a == 0 and x != 0:
                continue
            b = rng.randrange(p) if a == 0 else x * pow(a, p - 2, p) % p
        elif x == 0 and a == 0:
            b = rng.randrange(p)
            if b == 0:
                continue
        elif x == 0 or a == 0:
            continue
        else:
            b = a * pow(x, p - 2, p) % p
        return ar.NUMBER0 + a, op, ar.NUMBER0 + b


def edit_distance_row(rng: np.random.RandomState, length: int, letters: int = 8) -> list[int]:
    """A string pair, its DP rows and answer with the reference's unit-cost boundary (ED/data.py)."""
    a, b = edit_distance_pair(rng, length, letters)
    dp = [[i + j for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    row = [ed.LETTER0 + c for c in a] + [ed.BAR] + [ed.LETTER0 + c for c in b] + [ed.SEP]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            dp[i][j] = min(dp[i - 1][j] + 2, dp[i][j - 1] + 2, dp[i - 1][j - 1] + (0 if a[i - 1] == b[j - 1] else 3))
        row += [ed.NUMBER0 + v for v in dp[i][1:]] + [ed.COMMA]
    return row + [ed.SEP, ed.NUMBER0 + dp[-1][-1], EOS]


def edit_distance_pair(rng: np.random.RandomState, length: int, letters: int = 8) -> tuple[list[int], list[int]]:
    """Letter indices of a string pair, the shorter first; the number of edits is drawn once and kept
    through the redraws of rejected pairs."""
    edits = rng.randint(length) + 1
    while True:
        used = rng.randint(letters) + 3
        alphabet = [int(c) for c in rng.choice(26, used, replace=False)]
        first = [alphabet[i] for i in rng.randint(used, size=length)]
        if rng.rand() < 0.4:
            second = [alphabet[i] for i in rng.randint(used, size=rng.randint(length - 3, length + 3))]
        else:
            second = first[:]
            for _ in range(edits):
                kind = rng.randint(3)
                if kind == 0 and len(second) > 2:
                    del second[rng.randint(len(second))]
                elif kind == 1:
                    second[rng.randint(len(second))] = int(rng.choice(alphabet))
                else:
                    second.insert(rng.randint(len(second) + 1), int(rng.choice(alphabet)))
        if first != second and length - 3 <= len(second) <= length + 2:
            break
    return (second, first) if len(second) < len(first) else (first, second)


def lis_row(rng: np.random.RandomState, length: int, number_range: int) -> list[int]:
    """1-3 planted increasing runs over uniform fill, the DP and the answer (LIS/data.py)."""
    runs = rng.randint(3) + 1
    total = rng.randint(length - 2) + 3
    if runs == 1:
        sizes = [total]
    elif runs == 2:
        size = rng.randint(total // 2 + 1) + 1
        sizes = [size, total - size]
    else:
        size1 = rng.randint(total // 3 + 1) + 1
        size2 = rng.randint((total - size1) // 2 + 1) + 1
        sizes = [size1, size2, total - size1 - size2]
    low = length + 1
    planted = [low + int(v) for size in sizes for v in np.sort(rng.choice(number_range - low, size, replace=False))]
    places = np.sort(rng.choice(length, total, replace=False))
    values = [int(v) for v in rng.randint(low, number_range, size=length)]
    for at, v in zip(places, planted):
        values[at] = v
    dp = [1] * length
    for i in range(length):
        for j in range(i):
            if values[i] > values[j]:
                dp[i] = max(dp[i], dp[j] + 1)
    return ([lis.NUMBER0 + v for v in values] + [lis.SEP] + [lis.NUMBER0 + d for d in dp]
            + [lis.SEP, lis.NUMBER0 + max(dp), EOS])


def sampler(name: str, length: int, seed: int, options: dict | None = None,
            text: bool = False) -> Callable[[int], list]:
    """``draw(operators_or_none)`` for a task, seeded as the reference seeds it (its own random source); with
    ``text``, arithmetic rows in the published loop's form (``arithmetic_text_row``)."""
    options = options or {}
    if name == "arithmetic":
        python_rng = random.Random(seed)
        p = options.get("modulus", 11)
        row = arithmetic_text_row if text else arithmetic_row
        return lambda operators=None: row(python_rng, operators or length, p)
    if text:
        raise ValueError(f"the published form is restated for arithmetic only, not {name!r}")
    numpy_rng = np.random.RandomState(seed)
    if name == "edit_distance":
        return lambda _=None: edit_distance_row(numpy_rng, length, options.get("letters", 8))
    if name == "lis":
        number_range = options.get("number_range") or max(250, 2 * length + 1)
        return lambda _=None: lis_row(numpy_rng, length, number_range)
    raise ValueError(f"no reference sampler for {name!r}; known: arithmetic, edit_distance, lis")


def split(name: str, length: int, n_train: int, n_test: int, seed: int = 2023,
          under: bool = True, text: bool = False) -> tuple[set[tuple], set[tuple]]:
    """The reference's data sets: ``under`` first adds int(n_train k / sum(1..n)) draws with k operators for
    every k (arithmetic only), then n-operator rows until ``n_train`` distinct; then ``n_test`` distinct
    rows that are not in the training set. ``text``: as ``sampler``."""
    draw = sampler(name, length, seed, text=text)
    train: set[tuple] = set()
    if name == "arithmetic" and under:
        for k in range(1, length + 1):
            for _ in range(int(n_train * k / (length * (length + 1) / 2))):
                train.add(tuple(draw(k)))
    while len(train) < n_train:
        train.add(tuple(draw()))
    test: set[tuple] = set()
    while len(test) < n_test:
        row = tuple(draw())
        if row not in train:
            test.add(row)
    return train, test
