"""Edit distance (Yang et al. 2024, sec. 6.1; format, costs and boundary of Feng et al. 2023), and ED_Local."""
from __future__ import annotations

from typing import Literal, Sequence

import numpy as np
from pydantic import Field

from sepbench.tasks.base import TASKS
from sepbench.tasks.cot.base import EOS, PAD, CotOptions, CotTask

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
        ``edits`` random deletions, substitutions or insertions (a deletion from 2 letters inserts instead).

        Edited rows go in order of decreasing ``edits``, so the rows still being edited at a step are a prefix."""
        n, width = edits.shape[0], 2 * length + 3
        used = rng.integers(3, self.options.letters + 3, n)
        alphabet = np.argsort(rng.random((n, 26)), axis=1).astype(np.int8).ravel()
        before = np.tri(width + 1, width, -1, bool)  # before[k] marks the columns left of column k

        def letters(rows: np.ndarray, count: int) -> np.ndarray:
            pick = (rng.random((len(rows), count)) * used[rows, None]).astype(np.intp)
            return alphabet[rows[:, None] * 26 + pick]

        first = np.full((n, width), -1, np.int8)
        first[:, :length] = letters(np.arange(n), length)
        second, second_len = first.copy(), np.full(n, length)
        is_random = rng.random(n) < self.options.random_prob
        chosen = np.flatnonzero(is_random)
        random_len = rng.integers(length - 3, length + 3, chosen.size)
        second[chosen] = np.where(before.take(random_len, axis=0), letters(chosen, width), -1)
        second_len[chosen] = random_len
        edited = np.flatnonzero(~is_random)
        edited = edited[np.argsort(-edits[edited], kind="stable")]
        work, work_len, steps = second[edited], second_len[edited], -edits[edited]
        padded = np.full((len(edited), width + 2), -1, np.int8)
        for step in range(int(-steps[0]) if steps.size else 0):
            m = int(np.searchsorted(steps, -step, side="left"))
            x, x_len = work[:m], work_len[:m]
            kind = rng.integers(0, 3, m)  # 0 delete, 1 replace, 2 insert
            kind[(kind == 0) & (x_len <= 2)] = 2
            insert, delete = kind == 2, kind == 0
            pos = (rng.random(m) * (x_len + insert)).astype(np.intp)
            new = letters(edited[:m], 1)[:, 0]
            padded[:m, 1:-1] = x
            moved = np.where(delete[:, None], padded[:m, 2:], padded[:m, :-2])
            work[:m] = np.where(before.take(np.where(kind == 1, width, pos), axis=0), x, moved)
            keep = np.flatnonzero(~delete)
            work.ravel()[keep * width + pos[keep]] = new[keep]
            work_len[:m] = x_len + insert - delete
        second[edited], second_len[edited] = work, work_len
        return first, second, second_len

    def table(self, a: np.ndarray, a_len: np.ndarray, b: np.ndarray, b_len: np.ndarray) -> np.ndarray:
        """dp[:, i, j] for every row at once (cells beyond a row's lengths are meaningless)."""
        return self._table(a, b).transpose(2, 0, 1)

    def _table(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """dp[i, j, :] with the samples last, so each step is one vector operation across them. Row by row:
        dp[i, j] = min over k <= j of (c[k] + 2 (j - k)), c being the best of the cells above and to the
        upper left (c[0] = dp[i, 0]), which is a running minimum of c[k] - 2k."""
        n, rows, cols = a.shape[0], a.shape[1] + 1, b.shape[1] + 1
        ramp = (INSERT_DELETE * np.arange(cols, dtype=np.int16))[:, None]
        dp = np.empty((rows, cols, n), np.int16)
        dp[0] = self.edge * np.arange(cols, dtype=np.int16)[:, None]
        dp[:, 0] = self.edge * np.arange(rows, dtype=np.int16)[:, None]
        a_t, b_t = np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)
        diagonal = np.empty((cols - 1, n), np.int16)
        for i in range(1, rows):
            above, row = dp[i - 1], dp[i]
            np.not_equal(a_t[i - 1], b_t, out=diagonal, casting="unsafe")
            diagonal *= REPLACE
            diagonal += above[:-1]
            np.add(above[1:], INSERT_DELETE, out=row[1:])
            np.minimum(row[1:], diagonal, out=row[1:])
            row -= ramp
            for j in range(1, cols):
                np.minimum(row[j], row[j - 1], out=row[j])
            row += ramp
        return dp

    def layout(self, a: np.ndarray, a_len: np.ndarray, b: np.ndarray, b_len: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Token rows (with <eos>) and prompt lengths from letter-index strings. The rows of one pair of
        lengths share one layout, so each such group is written by slicing."""
        n = a.shape[0]
        numbers = np.ascontiguousarray((NUMBER0 + self._table(a, b)).astype(self.token_dtype).transpose(2, 0, 1))
        row_width = int(self.row_char) + (1 + int(self.column_chars)) * b_len + 1
        total = a_len + b_len + 4 + (0 if self.direct else a_len * row_width + 1)
        out = np.zeros((n, int(total.max(initial=2))), self.token_dtype)
        pairs, group = np.unique(a_len * (b.shape[1] + 1) + b_len, return_inverse=True)
        for index, (p, q) in enumerate(zip(pairs // (b.shape[1] + 1), pairs % (b.shape[1] + 1))):
            rows = np.flatnonzero(group == index) if len(pairs) > 1 else np.arange(n)
            out[rows, : int(total[rows[0]])] = self._group_rows(numbers[rows], a[rows], b[rows], int(p), int(q))
        return out, a_len + b_len + 2

    def _group_rows(self, numbers: np.ndarray, a: np.ndarray, b: np.ndarray, p: int, q: int) -> np.ndarray:
        """The token rows of samples whose strings have lengths p and q (``numbers``: their DP tables as tokens)."""
        m = a.shape[0]
        row_width = int(self.row_char) + (1 + int(self.column_chars)) * q + 1
        start = p + q + 2
        block = np.empty((m, start + (0 if self.direct else p * row_width + 1) + 2), self.token_dtype)
        block[:, :p] = LETTER0 + a[:, :p]
        block[:, p] = BAR
        block[:, p + 1 : p + 1 + q] = LETTER0 + b[:, :q]
        block[:, p + q + 1] = SEP
        if not self.direct:
            body = block[:, start : start + p * row_width].reshape(m, p, row_width)
            first = int(self.row_char)
            if self.row_char:
                body[:, :, 0] = LETTER0 + a[:, :p]
            cells = numbers[:, 1 : p + 1, 1 : q + 1]
            if self.column_chars:
                body[:, :, first : first + 2 * q : 2] = (LETTER0 + b[:, :q])[:, None, :]
                body[:, :, first + 1 : first + 2 * q : 2] = cells
            else:
                body[:, :, first : first + q] = cells
            body[:, :, -1] = COMMA
            start += p * row_width
            block[:, start] = SEP
            start += 1
        block[:, start] = numbers[:, p, q]
        block[:, start + 1] = EOS
        return block

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

