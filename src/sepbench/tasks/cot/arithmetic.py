"""Arithmetic(n, p): evaluate an expression mod p step by step (Yang et al. 2024, sec. 5 and C.1; Feng et al. 2023 format)."""
from __future__ import annotations

from functools import cached_property, lru_cache
from typing import Literal, Sequence

import numpy as np
from pydantic import Field

from sepbench.tasks.base import TASKS
from sepbench.tasks.cot.base import EOS, PAD, CotOptions, CotTask

PLUS, MINUS, TIMES, DIVIDE, OPEN, CLOSE, EQUALS = 3, 4, 5, 6, 7, 8, 9
NUMBER0 = 10
OPERATORS = (PLUS, MINUS, TIMES, DIVIDE)
SYMBOLS = {1: "<cls>", PLUS: "+", MINUS: "-", TIMES: "*", DIVIDE: "/", OPEN: "(", CLOSE: ")", EQUALS: "=", EOS: "<eos>", PAD: "<pad>"}
EXPAND_CHUNK = 8192  # rows per expansion block: keeps its temporaries in cache
WIDEN = 4  # expansions between widenings of the working rows (wider rows cost more per expansion)
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
        self._check_cap(length)

    def _check_cap(self, operators: int) -> None:
        shortest = (operators + 1) ** 2 + operators  # no brackets
        if self.cot_cap(operators) < shortest:
            raise ValueError(f"arithmetic max_cot={self.options.max_cot} is below the shortest CoT with {operators} "
                             f"operators ({shortest} tokens); use an integer >= {shortest}, 'paper' or 'bound'")

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
        operators = np.full(n, length)
        if train and self.options.under:
            operators = rng.choice(np.arange(1, length + 1), n, p=np.arange(1, length + 1) / (length * (length + 1) / 2))
        return self._rows_with(operators, rng)

    def split_stages(self, n_train: int) -> list[tuple[int | None, object]]:
        """With ``under``, the reference's recipe (Feng et al. 2023, arithmetic/data.py): int(n_train k /
        (1 + .. + n)) draws with k operators for each k, deduplicated, then n-operator rows up to n_train."""
        if not self.options.under:
            return [(None, self.length)]
        shares = np.arange(1, self.length + 1) / np.sum(np.arange(1, self.length + 1)) * n_train
        return [(int(share), k + 1) for k, share in enumerate(shares)] + [(None, self.length)]

    def stage_rows(self, n: int, rng: np.random.Generator, stage: object) -> tuple[np.ndarray, np.ndarray]:
        operators = self.length if stage == "test" else int(stage)
        return self._rows_with(np.full(n, operators), rng)

    def _leftmost_rows(self, rows: np.ndarray, prompts: np.ndarray) -> np.ndarray:
        """The same prompts with the CoT of ``solve``: one deterministic order instead of the reference's
        random one, so greedy decoding never has to follow a choice it made between equally likely steps."""
        prompts_as_lists = ([int(t) for t in row[:k]] for row, k in zip(rows, prompts))
        solved = [prompt + self.solve(prompt) for prompt in prompts_as_lists]
        out = np.full((len(rows), max([rows.shape[1]] + [len(tokens) for tokens in solved])), PAD, rows.dtype)
        for i, tokens in enumerate(solved):
            out[i, : len(tokens)] = tokens
        return out

    def _rows_with(self, operators: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """One sample per entry of ``operators`` with that many operators; a sample whose CoT is longer than
        the cap is drawn again with the same count, in place. Rows are as wide as the longest kept."""
        caps = np.array([self.cot_cap(k) for k in range(int(operators.max(initial=0)) + 1)])
        self._check_cap(int(operators.max(initial=0)))  # an integer cap fails first at the most operators
        rows, prompts, cot_lengths = self._drawn_rows(operators, rng)
        redraw = np.flatnonzero(cot_lengths > caps[operators])
        while redraw.size:
            more, more_prompts, more_cot_lengths = self._drawn_rows(operators[redraw], rng)
            ok = more_cot_lengths <= caps[operators[redraw]]
            if more.shape[1] > rows.shape[1]:
                rows = np.pad(rows, ((0, 0), (0, more.shape[1] - rows.shape[1])))
            rows[redraw[ok]] = PAD
            rows[redraw[ok], : more.shape[1]] = more[ok]
            prompts[redraw[ok]], cot_lengths[redraw[ok]] = more_prompts[ok], more_cot_lengths[ok]
            redraw = redraw[~ok]
        width = int((prompts + 2 if self.direct else cot_lengths + 1).max(initial=1))
        return (rows if rows.shape[1] == width else rows[:, :width]), prompts

    def _drawn_rows(self, operators: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``_expand``'s rows, prompt and CoT lengths, the CoT written in the order the ``order`` option names."""
        rows, prompts, cot_lengths = self._expand(operators, rng)
        if self.options.order == "leftmost" and not self.direct:
            rows = self._leftmost_rows(rows, prompts)
            cot_lengths = (rows != PAD).sum(axis=1) - 1  # the cap applies to the rows actually written
        return rows, prompts, cot_lengths

    def _expand(self, operators: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``_expand_chunk`` over blocks of rows small enough that its temporaries stay in cache. The rows are
        expanded in non-increasing operator order, so that each block has few distinct counts (each count
        costs a round of numpy calls on the block), and put back where they belong: written in place when
        the block is a run of rows, as when every count is the same. Rows are as wide as the longest
        possible sample (trimmed by the caller)."""
        top = int(operators.max(initial=0))
        width = (4 * top + 4) if self.direct else 2 * top * top + 2 * top + 2
        rows = np.zeros((len(operators), width), self.token_dtype)
        prompts, cot_lengths = np.empty(len(operators), np.int64), np.empty(len(operators), np.int64)
        order = np.argsort(-operators.astype(np.int16), kind="stable")
        for index in np.split(order, range(EXPAND_CHUNK, len(order), EXPAND_CHUNK)) if len(order) else []:
            run = (np.diff(index) == 1).all()
            if run:
                index = slice(index[0], index[-1] + 1)
            out = rows[index] if run else np.zeros((len(index), width), self.token_dtype)
            prompts[index], cot_lengths[index] = self._expand_chunk(operators[index], rng, out)
            if not run:
                rows[index] = out
        return rows, prompts, cot_lengths

    def _expand_chunk(self, operators: np.ndarray, rng: np.random.Generator, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Samples with ``operators[i]`` operators (non-increasing), written into the rows of ``out`` (zeros, at
        least as wide as the longest possible sample, an even number of tokens); their prompt and CoT lengths.

        Expansion s acts on the samples with at least s operators, a prefix. The current expressions, each
        followed by ``=``, are rows of one width in a flat array after 4 PAD tokens, so that the rows shifted
        right by 2 or 4 tokens are contiguous views too (the ``=`` moves right with the tokens after x). Each
        expression and its ``=`` is also written into its own slot of a buffer laid out as the row is (the
        last expression first). They are an even number of tokens starting at an even column, so the rows
        are the buffer's nonzero 16-bit words packed to the left, one block of rows per operator count.
        ``leaves`` holds where the numbers are."""
        n, top = len(operators), int(operators.max(initial=0))
        active = np.searchsorted(-operators, -np.arange(top + 2), side="right")
        first = (NUMBER0 + rng.integers(0, self.p, n)).astype(self.token_dtype)
        lengths, total = np.ones(n, np.int64), np.ones(n, np.int64)
        leaves = np.zeros((top + 1, n), np.int16)
        width = 2
        work = np.zeros(4 + n * width, self.token_dtype)
        work[4::width], work[5::width] = first, EQUALS
        final = np.zeros((n, 4 * top + 2), self.token_dtype) if self.direct else None
        if self.direct:
            final[:, :width] = work[4:].reshape(n, width)
        offsets = np.cumsum([0] + [4 * s + 2 for s in range(top, 0, -1)])[::-1]  # slot s starts at offsets[s]
        buffer = np.empty((n, 0 if self.direct else offsets[0] + 2), self.token_dtype)  # each row's slots are all written
        if not self.direct:
            buffer[:, offsets[0]], buffer[:, offsets[0] + 1] = first, EOS
        rows_at = np.arange(n, dtype=np.int64)
        for s in range(1, top + 1):
            m = int(active[s])
            if 4 * s + 2 > width:
                wider = 4 * min(top, s + WIDEN - 1) + 2
                work, width = _widened(work, width, wider, m), wider
            work, grow = self._step(work, width, m, leaves, s, rows_at[:m], rng)
            new = work[4:].reshape(m, width)
            lengths[:m] += grow
            total[:m] += lengths[:m]
            if self.direct:
                final[active[s + 1] : m, :width] = new[active[s + 1] :]
            else:
                buffer[:m, offsets[s] : offsets[s] + 4 * s + 2] = new[:, : 4 * s + 2]
        if self.direct:
            out[:, : 4 * top + 1] = final[:, : 4 * top + 1]
            index = np.arange(n)
            out[index, lengths], out[index, lengths + 1], out[index, lengths + 2] = EQUALS, first, EOS
            return lengths + 1, total + operators
        used = total + operators + 1
        rows = out.view(np.uint16)[:, : int(used.max(initial=0)) // 2]
        tri = np.tri(rows.shape[1] + 1, rows.shape[1], -1, bool)
        words = buffer.view(np.uint16)
        for k in np.flatnonzero(active[:-1] > active[1:]):  # the counts present
            lo, hi = int(active[k + 1]), int(active[k])
            block = words[lo:hi, offsets[k] // 2 :]
            rows[lo:hi][tri.take(used[lo:hi] // 2, axis=0)] = block[block != 0]
        return lengths + 1, total + operators

    def _step(self, work: np.ndarray, width: int, m: int, leaves: np.ndarray, s: int, rows: np.ndarray,
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Expansion s of the first ``m`` expressions in ``work`` (4 PAD tokens, then rows of ``width`` tokens:
        an expression of s numbers and ``=``, PAD after; numbers at ``leaves[:s]`` in any order, updated in
        place; ``rows`` is ``arange(m)``): a uniform number x becomes (a op b), bracketed where precedence
        needs it. Returns the new expressions laid out the same way, and how many tokens each grew by. The
        tokens after x are the row shifted by 2 or 4 tokens; the tokens before x are kept by a mask of 255s
        (``b ^ ((a ^ b) & mask)`` is a where the mask is set, else b)."""
        size = m * width
        leaf = rng.integers(0, s, m, dtype=np.int64)
        leaf *= leaves.shape[1]
        leaf += rows
        at = leaves.ravel().take(leaf)
        where = rows * width
        where += at
        a, op, b, bracket = self._expansions(work[3:].take(where), work[4:].take(where), work[5:].take(where), rng)
        wide = np.flatnonzero(bracket)
        new = np.empty(4 + size, work.dtype)
        new[:4] = PAD
        out = new[4:].reshape(m, width)
        out[...] = work[2 : 2 + size].reshape(m, width)
        out[wide] = work[:size].reshape(m, width).take(wide, axis=0)
        kept = np.bitwise_xor(work[4 : 4 + size].reshape(m, width), out)
        kept &= _before(width).take(at, axis=0)
        out ^= kept
        body = new[4:]
        opened = where[wide]
        body[opened], body[4:][opened] = OPEN, CLOSE
        where += bracket
        body[where], body[1:][where], body[2:][where] = a, op, b
        grow = 2 + 2 * bracket.view(np.int8)
        later = leaves[:s, :m]
        later += (later > at) * grow
        at += bracket
        leaves.ravel()[leaf] = at
        at += 2
        leaves[s, :m] = at
        return new, grow

    def _expansions(self, left: np.ndarray, x: np.ndarray, right: np.ndarray,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For number tokens x between tokens ``left`` and ``right``: tokens a, op, b with a op b = x (mod p),
        drawn as the reference draws them (Feng et al. 2023, arithmetic/data.py), and whether (a op b) needs
        brackets there: after /, or when + or - follows * or -, or comes before * or /. The reference draws a
        and op uniformly and solves for b; an invalid draw (a = 0 under * or /, a zero divisor) redraws a
        and op, and where any b works (0 * b = 0, 0 / b = 0) b is drawn uniformly. That is a uniform draw
        over the valid (a, op, free b) of the reference's grid: a uniform one of the first ``columns`` of
        row x of ``_expansion_table`` (``zero_columns`` where x = 0; a draw past them, -1, is drawn again
        among them)."""
        table, columns, zero_columns = self._expansion_table
        row = np.int64(len(table) // (NUMBER0 + self.p))
        index = rng.integers(0, max(columns, zero_columns), len(x))
        index += x * row
        packed = table.take(index)
        again = np.flatnonzero(packed < 0)  # x = 0 only, but for p = 2, where x != 0 has fewer valid draws
        zero = x.take(again) == NUMBER0
        for redraw, valid in ((again[zero], zero_columns), (again[~zero], columns)):
            if redraw.size:
                packed[redraw] = table.take(x.take(redraw) * row + rng.integers(0, valid, len(redraw)))
        pieces = packed.view(np.uint8).reshape(-1, 4)
        context = _LEFT_CONTEXT.take(left)
        context |= _RIGHT_CONTEXT.take(right)
        context &= pieces[:, 3]
        return pieces[:, 0], pieces[:, 1], pieces[:, 2], context != 0

    @cached_property
    def _expansion_table(self) -> tuple[np.ndarray, int, int]:
        """Row x token: the valid draws (a, op, free b) for number x as the tokens a, op, b and the contexts
        that bracket (a op b) (``_ALWAYS`` or ``_ADDITIVE`` bits) in the bytes of a little-endian int32, -1
        after them; how many there are for x != 0 (4p^2 - 2p, the same for every x) and for x = 0
        (3p^2 + p - 1). A draw over (a, op, free) is valid where the reference keeps it."""
        p = self.p
        x, free, sign, a = np.meshgrid(np.arange(p), np.arange(p), np.arange(4), np.arange(p), indexing="ij")
        inverse = self.inverse
        b = np.select([sign == 0, sign == 1, sign == 2],
                      [(x - a) % p, (a - x) % p, np.where(a == 0, free, x * inverse[a] % p)],
                      np.where(x == 0, free, a * inverse[x] % p))
        invalid = np.where(sign == 2, (a == 0) & (x != 0),
                           (sign == 3) & (((a == 0) != (x == 0)) | (a == 0) & (free == 0)))
        brackets_when = np.where(sign < 2, _ALWAYS | _ADDITIVE, _ALWAYS)
        packed = (brackets_when << 24 | (NUMBER0 + b) << 16 | np.asarray(OPERATORS)[sign] << 8 | (NUMBER0 + a)).reshape(p, -1)
        valid = ~invalid.reshape(p, -1)
        counts = valid.sum(axis=1)
        assert (counts[1:] == 4 * p * p - 2 * p).all() and counts[0] == 3 * p * p + p - 1
        table = np.full((NUMBER0 + p, counts.max()), -1, "<i4")
        for value in range(p):
            table[NUMBER0 + value, : counts[value]] = packed[value][valid[value]]
        return table.ravel(), int(counts[1]), int(counts[0])

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
        """Every expression made by evaluating one `a op b` of ``expr`` that the reference generator could have
        written there unbracketed, dropping brackets that enclose exactly it: its ``iter`` brackets a new pair
        after `/`, and a `+`/`-` pair after `*` or `-` or before `*` or `/` (docs/cot_tasks.md)."""
        found = []
        for i in range(1, len(expr) - 1):
            a, op, b = expr[i - 1], expr[i], expr[i + 1]
            if op not in OPERATORS or a < NUMBER0 or b < NUMBER0:
                continue
            before = expr[i - 2] if i >= 2 else None
            after = expr[i + 2] if i + 2 < len(expr) else None
            if before == DIVIDE or (op in (PLUS, MINUS) and (before in (TIMES, MINUS) or after in (TIMES, DIVIDE))):
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


def _widened(work: np.ndarray, width: int, wider: int, rows: int) -> np.ndarray:
    """The first ``rows`` rows of ``work`` (4 PAD tokens, then rows of ``width`` tokens) at a wider width."""
    out = np.zeros(4 + rows * wider, work.dtype)
    out[4:].reshape(rows, wider)[:, :width] = work[4 : 4 + rows * width].reshape(rows, width)
    return out


_ALWAYS, _ADDITIVE = 1, 2  # bits of a neighbour's context: brackets any (a op b) / brackets a + or - only
_LEFT_CONTEXT = np.zeros(256, np.uint8)
_LEFT_CONTEXT[DIVIDE], _LEFT_CONTEXT[TIMES], _LEFT_CONTEXT[MINUS] = _ALWAYS, _ADDITIVE, _ADDITIVE
_RIGHT_CONTEXT = np.zeros(256, np.uint8)
_RIGHT_CONTEXT[TIMES], _RIGHT_CONTEXT[DIVIDE] = _ADDITIVE, _ADDITIVE


@lru_cache(maxsize=None)
def _before(width: int) -> np.ndarray:
    """Row ``at`` is 255 in the columns before ``at`` and 0 from there on (uint8, ``width`` columns)."""
    return np.tri(width + 1, width, -1, np.uint8) * np.uint8(255)


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
