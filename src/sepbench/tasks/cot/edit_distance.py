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
        return self.layout(*self.string_pairs(n, rng, length))

    def string_pairs(self, n: int, rng: np.random.Generator, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Letter-index strings a, len a, b, len b (a the shorter, -1 beyond the end), sampled as the reference
        samples them (Feng et al. 2023, ED/data.py): the number of edits is drawn once per sample and kept
        when a rejected pair (equal strings, or b's length outside L-3..L+2) is redrawn."""
        edits = rng.integers(1, length + 1, n)
        a, b = np.full((n, length), -1, np.int8), np.full((n, length + 2), -1, np.int8)
        a_len, b_len = np.empty(n, np.int64), np.empty(n, np.int64)
        todo = np.arange(n)
        while todo.size:
            first, second, second_len = self._draw_pair(edits[todo], rng, length)
            ok = (second_len >= length - 3) & (second_len <= length + 2) & ~np.all(first == second, axis=1)
            swap = (second_len < length)[:, None]
            done = todo[ok]
            a[done] = np.where(swap, second, first)[ok, :length]
            b[done] = np.where(swap, first, second)[ok, : length + 2]
            a_len[done] = np.minimum(second_len, length)[ok]
            b_len[done] = np.maximum(second_len, length)[ok]
            todo = todo[~ok]
        return a, a_len, b, b_len

    def _draw_pair(self, edits: np.ndarray, rng: np.random.Generator, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One draw of the reference's pair for each entry of ``edits``: L letters of 3..letters+2 random
        ones, then with ``random_prob`` a random string of length L-3..L+2, else the first string after
        ``edits`` random deletions, substitutions or insertions (a deletion from 2 letters inserts instead)."""
        n, width = edits.shape[0], 2 * length + 3
        rows = np.arange(n)
        used = rng.integers(3, self.options.letters + 3, n)
        alphabet = np.argsort(rng.random((n, 26)), axis=1).astype(np.int8)

        def letters(shape: tuple[int, ...]) -> np.ndarray:
            scale = used[:, None] if len(shape) == 2 else used
            pick = (rng.random(shape) * scale).astype(np.int64)
            return alphabet[rows[:, None], pick] if len(shape) == 2 else alphabet[rows, pick]

        first = np.full((n, width), -1, np.int8)
        first[:, :length] = letters((n, length))
        second, second_len = first.copy(), np.full(n, length)
        col = np.arange(width)[None, :]
        for step in range(int(edits.max(initial=0))):
            active = step < edits
            kind = rng.integers(0, 3, n)  # 0 delete, 1 replace, 2 insert
            kind = np.where((kind == 0) & (second_len <= 2), 2, kind)
            pos = (rng.random(n) * (second_len + (kind == 2))).astype(np.int64)
            new = letters((n,))
            at = pos[:, None]
            grow = np.where(kind == 0, -1, np.where(kind == 2, 1, 0))
            source = np.clip(np.where(col < at, col, col - grow[:, None]), 0, width - 1)
            moved = np.take_along_axis(second, source, axis=1)
            moved = np.where((kind[:, None] != 0) & (col == at), new[:, None], moved)
            moved = np.where(col >= (second_len + grow)[:, None], -1, moved)
            second = np.where(active[:, None], moved, second)
            second_len = np.where(active, second_len + grow, second_len)
        random_len = rng.integers(length - 3, length + 3, n)
        random_str = np.where(col < random_len[:, None], letters((n, width)), -1).astype(np.int8)
        is_random = rng.random(n) < self.options.random_prob
        second = np.where(is_random[:, None], random_str, second)
        second_len = np.where(is_random, random_len, second_len)
        return first, second, second_len

    def table(self, a: np.ndarray, a_len: np.ndarray, b: np.ndarray, b_len: np.ndarray) -> np.ndarray:
        """dp[:, i, j] for every row at once (cells beyond a row's lengths are meaningless). Row by row:
        dp[i, j] = min over k <= j of (c[k] + 2 (j - k)), c being the best of the cells above and to the
        upper left (c[0] = dp[i, 0]), which is a running minimum of c[k] - 2k."""
        n, rows, cols = a.shape[0], a.shape[1] + 1, b.shape[1] + 1
        ramp = INSERT_DELETE * np.arange(cols, dtype=np.int16)
        dp = np.empty((n, rows, cols), np.int16)
        dp[:, 0, :] = self.edge * np.arange(cols)
        dp[:, :, 0] = self.edge * np.arange(rows)
        for i in range(1, rows):
            replace = np.where(a[:, i - 1, None] == b, 0, REPLACE).astype(np.int16)
            best = np.minimum(dp[:, i - 1, 1:] + INSERT_DELETE, dp[:, i - 1, :-1] + replace)
            chain = np.concatenate([dp[:, i, :1], best], axis=1) - ramp
            dp[:, i, :] = np.minimum.accumulate(chain, axis=1) + ramp
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
