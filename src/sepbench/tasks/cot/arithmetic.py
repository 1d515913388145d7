"""Arithmetic(n, p): evaluate an expression mod p step by step (Yang et al. 2024, sec. 5 and C.1; Feng et al. 2023 format)."""
from __future__ import annotations

from typing import Literal, Sequence

import numpy as np
from pydantic import Field

from sepbench.tasks.base import TASKS
from sepbench.tasks.cot.base import EOS, PAD, CotOptions, CotTask

PLUS, MINUS, TIMES, DIVIDE, OPEN, CLOSE, EQUALS = 3, 4, 5, 6, 7, 8, 9
NUMBER0 = 10
OPERATORS = (PLUS, MINUS, TIMES, DIVIDE)
SYMBOLS = {1: "<cls>", PLUS: "+", MINUS: "-", TIMES: "*", DIVIDE: "/", OPEN: "(", CLOSE: ")", EQUALS: "=", EOS: "<eos>", PAD: "<pad>"}
PAPER_MAX_COT = {6: 85, 10: 221, 13: 355, 16: 505}
"""Largest CoT in the paper's data sets (Yang et al. 2024, sec. 6.1); for n >= 13 below the bound 2n^2+2n+1."""


class ArithmeticOptions(CotOptions):
    modulus: int = Field(11, ge=2, le=97, description="p, a prime; the paper uses 11")
    under: bool = Field(True, description="training also draws k < n operators with P(k) proportional to k")
    max_cot: int | Literal["paper", "bound"] = Field(
        "paper", description="reject longer samples: 'paper' caps n=13/16 at 355/505, 'bound' never caps")
    order: Literal["random", "leftmost"] = Field(
        "random", description="CoT order: 'random' undoes the expansions (the reference); 'leftmost' always "
        "evaluates the leftmost value-keeping operator (ours; one Python solve per sample, not vectorised)")


@TASKS.register("arithmetic", "evaluate an n-operator expression mod p, one operator per CoT step (Yang et al. 2024)")
class Arithmetic(CotTask):
    """Expressions built by n random expansions of a number x into (a op b) with a op b = x (mod p).

    Brackets are added only where precedence needs them. The CoT undoes the expansions in reverse,
    rewriting the whole expression after each step, joined by ``=``; the answer is the last number.
    Tokens: <pad>0 <cls>1 <eos>2 + - * / ( ) = and the numbers 0..p-1 from id 10 (Feng et al. 2023).
    """

    Options = ArithmeticOptions
    separator = EQUALS

    def __init__(self, length: int, options: dict | None = None) -> None:
        super().__init__(length, options)
        p = self.options.modulus
        if any(p % d == 0 for d in range(2, int(p**0.5) + 1)):
            raise ValueError(f"arithmetic modulus must be prime, got {p}")
        self.p = p
        self.inverse = np.array([0] + [pow(v, p - 2, p) for v in range(1, p)])

    @property
    def vocab_size(self) -> int:
        return NUMBER0 + self.p

    def cot_cap(self, length: int) -> int:
        bound = 2 * length * length + 2 * length + 1
        cap = self.options.max_cot
        if cap == "bound":
            return bound
        if cap == "paper":
            return PAPER_MAX_COT.get(length, bound)
        return min(int(cap), bound)

    def max_cot_len(self, length: int) -> int:
        return self.cot_cap(length)

    def max_direct_len(self, length: int) -> int:
        return 4 * length + 1

    def _generate(self, n: int, rng: np.random.Generator, length: int, train: bool) -> tuple[np.ndarray, np.ndarray]:
        if train and self.options.under:
            weights = np.arange(1, length + 1) / (length * (length + 1) / 2)
            counts = rng.multinomial(n, weights)
        else:
            counts = np.zeros(length, np.int64)
            counts[-1] = n
        parts = [self._generate_fixed(int(c), k + 1, rng) for k, c in enumerate(counts) if c]
        width = max(rows.shape[1] for rows, _ in parts)
        rows = np.concatenate([np.pad(r, ((0, 0), (0, width - r.shape[1]))) for r, _ in parts])
        prompts = np.concatenate([p for _, p in parts])
        order = rng.permutation(n)
        return _trimmed(rows[order]), prompts[order]

    def split_stages(self, n_train: int) -> list[tuple[int | None, object]]:
        """With ``under``, the reference's recipe (Feng et al. 2023, arithmetic/data.py): int(n_train k /
        (1 + .. + n)) draws with k operators for each k, deduplicated, then n-operator rows up to n_train."""
        if not self.options.under:
            return [(None, self.length)]
        shares = np.arange(1, self.length + 1) / np.sum(np.arange(1, self.length + 1)) * n_train
        return [(int(share), k + 1) for k, share in enumerate(shares)] + [(None, self.length)]

    def stage_rows(self, n: int, rng: np.random.Generator, stage: object) -> tuple[np.ndarray, np.ndarray]:
        rows, prompts = self._generate_fixed(n, self.length if stage == "test" else int(stage), rng)
        return _trimmed(rows), prompts

    def _leftmost_rows(self, rows: np.ndarray, prompts: np.ndarray) -> np.ndarray:
        """The same prompts with the CoT of ``solve``: one deterministic order instead of the reference's
        random one, so greedy decoding never has to follow a choice it made between equally likely steps."""
        prompts_as_lists = ([int(t) for t in row[:k]] for row, k in zip(rows, prompts))
        solved = [prompt + self.solve(prompt) for prompt in prompts_as_lists]
        out = np.full((len(rows), max([rows.shape[1]] + [len(tokens) for tokens in solved])), PAD, rows.dtype)
        for i, tokens in enumerate(solved):
            out[i, : len(tokens)] = tokens
        return out

    def _generate_fixed(self, n: int, operators: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        rows, prompts = np.zeros((0, 1), np.int64), np.zeros(0, np.int64)
        cap = self.cot_cap(operators)
        while len(rows) < n:
            need = n - len(rows)
            new, new_prompts, cot_lengths = self._expand(max(need + need // 8 + 16, 64), operators, rng)
            if self.options.order == "leftmost" and not self.direct:
                new = self._leftmost_rows(new, new_prompts)
                cot_lengths = (new != PAD).sum(axis=1) - 1  # the cap applies to the rows actually written
            ok = np.flatnonzero(cot_lengths <= cap)[:need]
            width = max(rows.shape[1], new.shape[1])
            rows = np.concatenate([np.pad(rows, ((0, 0), (0, width - rows.shape[1]))),
                                   np.pad(new[ok], ((0, 0), (0, width - new.shape[1])))])
            prompts = np.concatenate([prompts, new_prompts[ok]])
        return rows, prompts

    def _expand(self, n: int, operators: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """n samples with exactly ``operators`` operators: rows, prompt lengths and CoT lengths."""
        p, rows = self.p, np.arange(n)
        expr = np.full((n, 2), PAD, np.int16)
        expr[:, 0] = NUMBER0 + rng.integers(0, p, n)
        history = [expr]
        piece = np.full((n, 5), PAD, np.int16)
        for step in range(operators):
            is_number = expr >= NUMBER0
            pick = rng.integers(1, step + 2, n, dtype=np.int16)
            pos = np.argmax(is_number & (np.cumsum(is_number, axis=1, dtype=np.int16) == pick[:, None]), axis=1)
            value = expr[rows, pos] - NUMBER0
            left = np.where(pos > 0, expr[rows, np.maximum(pos - 1, 0)], PAD)
            right = expr[rows, pos + 1]
            a, op, b = self._expansions(value, rng)
            additive = (op == PLUS) | (op == MINUS)
            bracket = (left == DIVIDE) | additive & ((left == TIMES) | (left == MINUS) | (right == TIMES) | (right == DIVIDE))
            piece[:] = PAD
            piece[:, 0] = np.where(bracket, OPEN, a)
            piece[:, 1] = np.where(bracket, a, op)
            piece[:, 2] = np.where(bracket, op, b)
            piece[bracket, 3] = b[bracket]
            piece[bracket, 4] = CLOSE
            size = np.where(bracket, 5, 3)[:, None]
            width = expr.shape[1]
            col = np.arange(width + 4)[None, :]
            at = pos[:, None]
            source = np.where(col < at, col, col - size + 1)
            grown = np.take_along_axis(np.pad(expr, ((0, 0), (0, 5))), np.clip(source, 0, width + 4), axis=1)
            inserted = np.take_along_axis(piece, np.clip(col - at, 0, 4), axis=1)
            expr = np.where((col >= at) & (col < at + size), inserted, grown)
            history.append(expr)
        lengths = [(h != PAD).sum(axis=1) for h in history]
        if self.direct:
            parts = [(history[-1], lengths[-1]), (np.full((n, 1), EQUALS), 1), (history[0][:, :1], 1), (np.full((n, 1), EOS), 1)]
        else:
            parts = [part for h, k in zip(reversed(history), reversed(lengths)) for part in ((h, k), (np.full((n, 1), EQUALS), 1))]
            parts[-1] = (np.full((n, 1), EOS), 1)
        total = sum(k for _, k in parts)
        out = np.full((n, int(np.max(total)) + 1), PAD, np.int64)
        trash = out.shape[1] - 1
        offset = np.zeros(n, np.int64)
        for values, k in parts:
            j = np.arange(values.shape[1])[None, :]
            index = np.where(j < np.reshape(k, (-1, 1)), offset[:, None] + j, trash)
            np.put_along_axis(out, index, values, axis=1)
            offset = offset + k
        out[:, trash] = PAD
        cot_lengths = sum(lengths) + operators
        return out[:, :-1], lengths[-1] + 1, cot_lengths

    def _expansions(self, value: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(a, op, b) with a op b = value (mod p), drawn as the reference draws them (Feng et al. 2023,
        arithmetic/data.py): a and op uniform, b solved for; an invalid draw (a = 0 under * or /, a zero
        divisor) redraws a and op, and where any b works (0 * b = 0, 0 / b = 0) b is drawn uniformly."""
        p = self.p
        a, op, b = (np.empty(value.shape[0], np.int16) for _ in range(3))
        todo = np.arange(value.shape[0])
        while todo.size:
            x = value[todo].astype(np.int64)
            first = rng.integers(0, p, todo.size)
            sign = np.asarray(OPERATORS, np.int16)[rng.integers(0, 4, todo.size)]
            free = rng.integers(0, p, todo.size)
            second = np.select([sign == PLUS, sign == MINUS, sign == TIMES],
                               [(x - first) % p, (first - x) % p,
                                np.where(first == 0, free, x * self.inverse[first] % p)],
                               np.where(x == 0, free, first * self.inverse[x] % p))
            invalid = np.where(sign == TIMES, (first == 0) & (x != 0),
                               (sign == DIVIDE) & (((first == 0) != (x == 0)) | (first == 0) & (free == 0)))
            done = todo[~invalid]
            a[done], op[done], b[done] = first[~invalid], sign[~invalid], second[~invalid]
            todo = todo[invalid]
        return NUMBER0 + a, op, NUMBER0 + b

    # --- plain-Python oracle and checker -------------------------------------------------------------

    def evaluate(self, tokens: Sequence[int]) -> int | None:
        """Value mod p of a token expression with the usual precedence, or None if malformed or dividing by 0."""
        parser = _Parser(list(tokens), self.p, self.inverse)
        try:
            value = parser.expression()
        except (IndexError, ValueError, ZeroDivisionError):
            return None
        return value if parser.at == len(tokens) else None

    def solve(self, prompt: Sequence[int]) -> list[int]:
        """A canonical solution: the leftmost operator both of whose operands are numbers and whose
        evaluation keeps the value is evaluated first (the reference's order is random; see ``check_sequence``)."""
        expr = list(prompt[:-1])
        if self.direct:
            return [NUMBER0 + self.evaluate(expr), EOS]
        out: list[int] = []
        while len(expr) > 1:
            expr = next(e for e in self.reductions(expr) if self.evaluate(e) == self.evaluate(expr))
            out += expr + [EQUALS]
        return out[:-1] + [EOS]

    def reductions(self, expr: list[int]) -> list[list[int]]:
        """Every expression made by evaluating one `a op b` of ``expr`` (dropping brackets that enclose exactly it)."""
        found = []
        for i in range(1, len(expr) - 1):
            a, op, b = expr[i - 1], expr[i], expr[i + 1]
            if op not in OPERATORS or a < NUMBER0 or b < NUMBER0:
                continue
            value = self.evaluate([a, op, b])
            if value is None:
                continue
            lo, hi = i - 1, i + 2
            if lo > 0 and hi < len(expr) and expr[lo - 1] == OPEN and expr[hi] == CLOSE:
                lo, hi = lo - 1, hi + 1
            found.append(expr[:lo] + [NUMBER0 + value] + expr[hi:])
        return found

    def check_sequence(self, tokens: Sequence[int]) -> bool:
        """Each expression after the prompt is the previous one with exactly one `a op b` evaluated, the
        value never changes, the last is a single number, and <eos> ends the sample."""
        tokens = [int(t) for t in tokens]
        if not tokens or tokens[-1] != EOS or EOS in tokens[:-1] or PAD in tokens:
            return False
        steps = _split(tokens[:-1], EQUALS)
        value = self.evaluate(steps[0])
        if value is None or len(steps) < 2:
            return False
        if self.direct:
            return len(steps) == 2 and steps[1] == [NUMBER0 + value]
        for before, after in zip(steps, steps[1:]):
            if after not in self.reductions(before) or self.evaluate(after) != value:
                return False
        return steps[-1] == [NUMBER0 + value]

    def render(self, tokens: Sequence[int]) -> str:
        return " ".join(SYMBOLS.get(int(t), str(int(t) - NUMBER0)) for t in tokens)


def _trimmed(rows: np.ndarray) -> np.ndarray:
    """Rows without the all-PAD columns that rejected longer draws leave at the end."""
    return rows[:, : int((rows != PAD).sum(axis=1).max(initial=1))]


def _split(tokens: list[int], separator: int) -> list[list[int]]:
    parts: list[list[int]] = [[]]
    for t in tokens:
        if t == separator:
            parts.append([])
        else:
            parts[-1].append(t)
    return parts


class _Parser:
    """Recursive descent over tokens: sums of products of atoms, left-associative, mod p."""

    def __init__(self, tokens: list[int], p: int, inverse: np.ndarray) -> None:
        self.tokens, self.p, self.inverse, self.at = tokens, p, inverse, 0

    def expression(self) -> int:
        value = self.term()
        while self.at < len(self.tokens) and self.tokens[self.at] in (PLUS, MINUS):
            op = self.tokens[self.at]
            self.at += 1
            rhs = self.term()
            value = (value + rhs if op == PLUS else value - rhs) % self.p
        return value

    def term(self) -> int:
        value = self.atom()
        while self.at < len(self.tokens) and self.tokens[self.at] in (TIMES, DIVIDE):
            op = self.tokens[self.at]
            self.at += 1
            rhs = self.atom()
            if op == DIVIDE and rhs == 0:
                raise ZeroDivisionError
            value = value * (rhs if op == TIMES else int(self.inverse[rhs])) % self.p
        return value

    def atom(self) -> int:
        token = self.tokens[self.at]
        self.at += 1
        if token == OPEN:
            value = self.expression()
            if self.tokens[self.at] != CLOSE:
                raise ValueError("unbalanced bracket")
            self.at += 1
            return value
        if NUMBER0 <= token < NUMBER0 + self.p:
            return token - NUMBER0
        raise ValueError("expected a number or a bracket")
