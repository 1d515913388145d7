"""Edit distance (Yang et al. 2024, sec. 6.1; format, costs and boundary of Feng et al. 2023), and ED_Local."""
from __future__ import annotations

from typing import Literal, Sequence

import numpy as np
from pydantic import Field

from sepbench.tasks.base import TASKS
from sepbench.tasks.cot.base import EOS, PAD, CotOptions, CotTask, compact

SEP, BAR, COMMA, LETTER0 = 1, 3, 4, 5
NUMBER0 = LETTER0 + 26
INSERT_DELETE, REPLACE = 2, 3


class EditDistanceOptions(CotOptions):
    boundary: Literal["reference", "textbook"] = Field(
        "reference", description="reference: row 0 and column 0 are i+j (Feng et al.); textbook: 2i and 2j")
    letters: int = Field(8, ge=1, le=24, description="each sample uses 3..letters+2 letters of a..z (reference: 8)")
    random_prob: float = Field(0.4, ge=0.0, le=1.0, description="chance that the second string is random, not edited")


class EditDistanceLocalOptions(EditDistanceOptions):
    row_char: bool = Field(True, description="each DP row opens with the character a_i it compares")
    column_chars: bool = Field(True, description="each DP cell is written as `b_j dp[i][j]`")


@TASKS.register("edit_distance", "weighted edit distance, the DP table written row by row (Yang et al. 2024, Feng et al. 2023)")
class EditDistance(CotTask):
    """``a | b <sep> row_1 , ... row_len(a) , <sep> answer``: row i is dp[i][1..len(b)], the shorter string first.

    Costs: insert and delete 2, replace 3, match 0. With ``boundary='reference'`` row 0 and column 0 are
    i + j as in the reference code, so the answer is not the textbook (2, 2, 3) edit distance; 'textbook'
    uses 2i and 2j. Tokens: <pad>0 <sep>1 <eos>2 | , then a..z and the numbers from id 31 (Feng et al. 2023).
    """

    Options = EditDistanceOptions
    separator = SEP
    row_char: bool = False
    column_chars: bool = False

    def __init__(self, length: int, options: dict | None = None) -> None:
        super().__init__(length, options)
        if length < 4:
            raise ValueError(f"{type(self).__name__} needs length >= 4 (the second string has length L-3..L+2), got {length}")
        self.edge = 1 if self.options.boundary == "reference" else INSERT_DELETE
        largest = self.edge * (2 * length + 2)
        self.numbers = max(60, largest + 1)

    @property
    def vocab_size(self) -> int:
        return NUMBER0 + self.numbers

    def _cot_len(self, first: int, second: int) -> int:
        row = int(self.row_char) + second * (1 + int(self.column_chars)) + 1
        return first + second + 2 + first * row + 2

    def max_cot_len(self, length: int) -> int:
        return self._cot_len(length, length + 2)

    def max_direct_len(self, length: int) -> int:
        return 2 * length + 5

    # --- generation --------------------------------------------------------------------------------

    def _generate(self, n: int, rng: np.random.Generator, length: int, train: bool) -> tuple[np.ndarray, np.ndarray]:
        firsts, seconds = [], []
        while sum(len(f) for f, _ in firsts) < n:
            a, b = self._string_pairs(n + n // 4 + 16, rng, length)
            firsts.append(a)
            seconds.append(b)
        first = _stack_padded([f for f, _ in firsts])[:n]
        first_len = np.concatenate([k for _, k in firsts])[:n]
        second = _stack_padded([s for s, _ in seconds])[:n]
        second_len = np.concatenate([k for _, k in seconds])[:n]
        return self.layout(first, first_len, second, second_len)

    def _string_pairs(self, n: int, rng: np.random.Generator, length: int) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """Pairs of letter-index strings (a, len a), (b, len b), a the shorter; the reference's rejection rule."""
        rows = np.arange(n)
        used = rng.integers(3, self.options.letters + 3, n)
        alphabet = np.argsort(rng.random((n, 26)), axis=1)
        letter = lambda shape: alphabet[rows[:, None] if len(shape) == 2 else rows,  # noqa: E731
                                        (rng.random(shape) * (used[:, None] if len(shape) == 2 else used)).astype(np.int64)]
        width = 2 * length + 3
        first = np.full((n, width), -1, np.int64)
        first[:, :length] = letter((n, length))
        second, second_len = first.copy(), np.full(n, length)
        edits = rng.integers(1, length + 1, n)
        for step in range(length):
            active = step < edits
            kind = rng.integers(0, 3, n)  # 0 delete, 1 replace, 2 insert
            kind = np.where(second_len == 0, 2, kind)
            pos = (rng.random(n) * (second_len + (kind == 2))).astype(np.int64)
            new = letter((n,))
            col = np.arange(width)[None, :]
            at = pos[:, None]
            shift = np.where(kind == 0, 1, np.where(kind == 2, -1, 0))[:, None]
            source = np.clip(np.where(col < at, col, col + shift), 0, width - 1)
            moved = np.take_along_axis(second, source, axis=1)
            moved = np.where((kind[:, None] == 2) & (col == at) | (kind[:, None] == 1) & (col == at), new[:, None], moved)
            moved = np.where(col >= (second_len + np.where(kind == 0, -1, np.where(kind == 2, 1, 0)))[:, None], -1, moved)
            second = np.where(active[:, None], moved, second)
            second_len = np.where(active, second_len + np.where(kind == 0, -1, np.where(kind == 2, 1, 0)), second_len)
        random_len = rng.integers(length - 3, length + 3, n)
        random_str = np.where(np.arange(width)[None, :] < random_len[:, None], letter((n, width)), -1)
        is_random = rng.random(n) < self.options.random_prob
        second = np.where(is_random[:, None], random_str, second)
        second_len = np.where(is_random, random_len, second_len)
        ok = (second_len >= length - 3) & (second_len <= length + 2) & ~np.all(first == second, axis=1)
        swap = second_len < length
        a = np.where(swap[:, None], second, first)[ok]
        b = np.where(swap[:, None], first, second)[ok]
        a_len = np.where(swap, second_len, length)[ok]
        b_len = np.where(swap, length, second_len)[ok]
        return (a[:, : length], a_len), (b[:, : length + 2], b_len)

    def table(self, a: np.ndarray, a_len: np.ndarray, b: np.ndarray, b_len: np.ndarray) -> np.ndarray:
        """dp[:, i, j] for every row at once (cells beyond a row's lengths are meaningless)."""
        n, rows, cols = a.shape[0], a.shape[1] + 1, b.shape[1] + 1
        dp = np.zeros((n, rows, cols), np.int64)
        dp[:, :, 0] = self.edge * np.arange(rows)
        dp[:, 0, :] = self.edge * np.arange(cols)
        for i in range(1, rows):
            replace = np.where(a[:, i - 1, None] == b, 0, REPLACE)
            for j in range(1, cols):
                dp[:, i, j] = np.minimum(np.minimum(dp[:, i - 1, j], dp[:, i, j - 1]) + INSERT_DELETE,
                                         dp[:, i - 1, j - 1] + replace[:, j - 1])
        return dp

    def layout(self, a: np.ndarray, a_len: np.ndarray, b: np.ndarray, b_len: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Token rows (with <eos>) and prompt lengths from letter-index strings."""
        n = a.shape[0]
        rows = np.arange(n)
        dp = self.table(a, a_len, b, b_len)
        answer = dp[rows, a_len, b_len]
        width1, width2 = a.shape[1], b.shape[1]
        col1, col2 = np.arange(width1)[None, :], np.arange(width2)[None, :]
        keep1, keep2 = col1 < a_len[:, None], col2 < b_len[:, None]
        one = lambda token: np.full((n, 1), token)  # noqa: E731
        yes = np.ones((n, 1), bool)
        pieces = [(LETTER0 + a, keep1), (one(BAR), yes), (LETTER0 + b, keep2), (one(SEP), yes)]
        if not self.direct:
            for i in range(1, width1 + 1):
                live = (i <= a_len)[:, None]
                if self.row_char:
                    pieces.append((LETTER0 + a[:, i - 1 : i], live))
                cells = NUMBER0 + dp[:, i, 1:]
                if self.column_chars:
                    cells = np.stack([LETTER0 + b, cells], axis=2).reshape(n, -1)
                    pieces.append((cells, np.repeat(keep2 & live, 2, axis=1)))
                else:
                    pieces.append((cells, keep2 & live))
                pieces.append((one(COMMA), live))
            pieces.append((one(SEP), yes))
        pieces += [(NUMBER0 + answer[:, None], yes), (one(EOS), yes)]
        values = np.concatenate([v for v, _ in pieces], axis=1)
        keep = np.concatenate([k for _, k in pieces], axis=1)
        tokens, _ = compact(values, keep)
        return tokens, a_len + b_len + 2

    # --- plain-Python oracle and checker -----------------------------------------------------------

    def solve(self, prompt: Sequence[int]) -> list[int]:
        tokens = [int(t) for t in prompt]
        bar = tokens.index(BAR)
        a, b = tokens[:bar], tokens[bar + 1 : -1]
        dp = [[self.edge * (i + j) if i == 0 or j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
        for i in range(1, len(a) + 1):
            for j in range(1, len(b) + 1):
                dp[i][j] = min(dp[i - 1][j] + INSERT_DELETE, dp[i][j - 1] + INSERT_DELETE,
                               dp[i - 1][j - 1] + (0 if a[i - 1] == b[j - 1] else REPLACE))
        out: list[int] = []
        if not self.direct:
            for i in range(1, len(a) + 1):
                out += [a[i - 1]] if self.row_char else []
                for j in range(1, len(b) + 1):
                    out += ([b[j - 1]] if self.column_chars else []) + [NUMBER0 + dp[i][j]]
                out.append(COMMA)
            out.append(SEP)
        return out + [NUMBER0 + dp[len(a)][len(b)], EOS]

    def check_sequence(self, tokens: Sequence[int]) -> bool:
        tokens = [int(t) for t in tokens]
        if SEP not in tokens or BAR not in tokens:
            return False
        cut = self.prompt_length(tokens)
        prompt = tokens[:cut]
        bar = prompt.index(BAR)
        letters = prompt[:bar] + prompt[bar + 1 : -1]
        if not all(LETTER0 <= t < NUMBER0 for t in letters) or not prompt[:bar] or not prompt[bar + 1 : -1]:
            return False
        return tokens[cut:] == self.solve(prompt)

    def render(self, tokens: Sequence[int]) -> str:
        names = {PAD: "<pad>", SEP: "<sep>", EOS: "<eos>", BAR: "|", COMMA: ","}
        return " ".join(names.get(t, chr(ord("a") + t - LETTER0) if t < NUMBER0 else str(t - NUMBER0)) for t in map(int, tokens))


@TASKS.register("ed_local", "edit distance whose CoT restates the characters each DP row needs (our locality variant)")
class EditDistanceLocal(EditDistance):
    """ED_Local, our definition of the paper's locality variant (Yang et al. 2024, sec. 6.2, Fig. 2; undefined there).

    Row i opens with a_i and writes each cell as ``b_j dp[i][j]``, so every DP value depends only on tokens
    within the last two rows; ``row_char`` and ``column_chars`` choose what is restated. Same answer as ED.
    """

    Options = EditDistanceLocalOptions

    def __init__(self, length: int, options: dict | None = None) -> None:
        super().__init__(length, options)
        self.row_char = self.options.row_char
        self.column_chars = self.options.column_chars


def _stack_padded(parts: list[np.ndarray]) -> np.ndarray:
    width = max(p.shape[1] for p in parts)
    return np.concatenate([np.pad(p, ((0, 0), (0, width - p.shape[1])), constant_values=-1) for p in parts])
