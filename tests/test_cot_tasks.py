"""The CoT tasks reproduce the reference formats (docs/cot_tasks.md) and the paper's CoT lengths."""
import random

import numpy as np
import pytest

from sepbench.tasks import build_task
from sepbench.tasks.cot import reference
from sepbench.tasks.cot.base import EOS, PAD

COT_TASKS = ["arithmetic", "edit_distance", "ed_local", "lis"]
SMALL = {"arithmetic": 4, "edit_distance": 6, "ed_local": 6, "lis": 12}


def unpadded(row) -> list[int]:
    return [int(t) for t in row if t != PAD]


# --- the reference formats, token for token ---------------------------------------------------------

def test_arithmetic_vocabulary_and_reference_examples():
    task = build_task("arithmetic", 6)
    assert task.vocab_size == 21
    assert task.encode("<pad> <cls> <eos> + - * / ( ) = 0 10") == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20]
    for line in ["7 + 7 - 5 / 7 = 7 + 7 - 7 = 3 - 7 = 7",
                 "7 - 7 - ( 2 + 5 + 5 * 4 ) / 8 = 7 - 7 - ( 2 + 5 + 9 ) / 8 = 0 - ( 2 + 5 + 9 ) / 8 = "
                 "0 - ( 7 + 9 ) / 8 = 0 - 5 / 8 = 0 - 2 = 9"]:
        tokens = task.encode(line + " <eos>")
        assert task.check_sequence(tokens)
        assert task.answer_of(tokens) == task.encode(line.split()[-1])[0]
    # the reference's order is random, so both orders of the same expression are valid CoTs
    assert task.check_sequence(task.encode("10 + 6 + 9 = 10 + 4 = 3 <eos>"))
    assert task.check_sequence(task.encode("10 + 6 + 9 = 5 + 9 = 3 <eos>"))
    direct = build_task("arithmetic", 3, {"mode": "direct"})
    assert direct.check_sequence(direct.encode("7 + 7 - 5 / 7 = 7 <eos>"))
    assert not direct.check_sequence(direct.encode("7 + 7 - 5 / 7 = 8 <eos>"))


def test_arithmetic_rejects_wrong_steps():
    task = build_task("arithmetic", 3)
    for line in ["7 + 7 - 5 / 7 = 7 + 7 - 7 = 3 - 7 = 8 <eos>",  # wrong answer
                 "7 + 7 - 5 / 7 = 3 - 7 = 7 <eos>",  # two operators in one step
                 "7 + 7 - 5 / 7 = 7 + 7 - 7 = 3 - 7 = 7",  # no <eos>
                 "7 + 7 - 5 / 7 = 7 + 7 - 8 = 3 - 8 = 6 <eos>",  # a wrong intermediate value
                 "7 + 7 - 5 / 7 = 7 <eos>",  # no CoT at all
                 # a step the reference cannot have inserted there unbracketed, though the value (mod 11) holds
                 "5 + 10 * 1 - 4 = 4 * 1 - 4 = 4 - 4 = 0 <eos>", "2 * 3 + 0 = 2 * 3 = 6 <eos>",
                 "0 + 3 * 4 = 3 * 4 = 1 <eos>", "3 - 5 - 0 = 3 - 5 = 9 <eos>", "8 / 4 * 2 = 8 / 8 = 1 <eos>"]:
        assert not task.check_sequence(task.encode(line)), line
    solved = task.solve(task.encode("5 + 10 * 1 - 4 ="))
    assert task.render(solved) == "5 + 10 - 4 = 4 - 4 = 0 <eos>"


def test_edit_distance_reference_example_and_boundary_quirk():
    task = build_task("edit_distance", 6)
    assert task.vocab_size == 91 and task.encode("<pad> <sep> <eos> | , a z 0 59") == [0, 1, 2, 3, 4, 5, 30, 31, 90]
    line = ("i p u u | i k k d d u <sep> 0 2 4 6 7 8 , 2 3 5 7 9 10 , 4 5 6 8 10 9 , 6 7 8 9 11 10 , "
            "<sep> 10 <eos>")
    tokens = task.encode(line)
    prompt = tokens[: task.prompt_length(tokens)]
    assert task.render(prompt + task.solve(prompt)) == line
    assert task.check_sequence(tokens)
    # row 0 and column 0 are i+j in the reference, 2i and 2j in the textbook (2, 2, 3) distance
    quirk = task.encode("e | e x o w o x c c <sep>")
    assert task.solve(quirk)[-3:] == task.encode("<sep> 10 <eos>")
    textbook = build_task("edit_distance", 6, {"boundary": "textbook"})
    assert textbook.solve(quirk)[-2:] == textbook.encode("14 <eos>")
    direct = build_task("edit_distance", 6, {"mode": "direct"})
    assert direct.check_sequence(direct.encode("i p u u | i k k d d u <sep> 10 <eos>"))


@pytest.mark.parametrize("size", [4, 6, 12])
def test_edit_distance_rows_are_the_reference_row_builders_rows(size):
    """Pairs drawn as the reference draws them: our solver writes the same DP rows and answer as the reference's
    row builder (ED/data.py: weighted costs, unit-cost boundary), token for token, and our checker accepts them."""
    task = build_task("edit_distance", size)
    draw = reference.sampler("edit_distance", size, 5)
    for _ in range(300):
        row = draw()
        prompt = row[: task.prompt_length(row)]
        assert prompt + task.solve(prompt) == row, task.render(row)
        assert task.check_sequence(row)


def test_ed_local_restates_the_characters_and_keeps_the_answer():
    plain, local = build_task("edit_distance", 6), build_task("ed_local", 6)
    prompt = plain.encode("a b | b a c <sep>")
    assert local.render(local.solve(prompt)) == "a b 3 a 1 c 3 , b b 1 a 3 c 4 , <sep> 4 <eos>"
    assert plain.render(plain.solve(prompt)) == "3 1 3 , 1 3 4 , <sep> 4 <eos>"
    only_rows = build_task("ed_local", 6, {"column_chars": False})
    assert only_rows.render(only_rows.solve(prompt)) == "a 3 1 3 , b 1 3 4 , <sep> 4 <eos>"
    rows, _ = local.generate_rows(300, np.random.default_rng(0))
    for row in rows:
        tokens = unpadded(row)
        cut = local.prompt_length(tokens)
        assert plain.solve(tokens[:cut])[-2:] == tokens[-2:]


def test_ed_local_cells_follow_from_tokens_at_most_two_rows_back():
    """Our locality claim: each interior cell is the DP update of the cell 2 tokens back, the row's own
    restated characters and the cells one row (2m + 2 tokens) back, never of the prompt."""
    task = build_task("ed_local", 8)
    number0, letter0 = 31, 5
    rows, prompts = task.generate_rows(100, np.random.default_rng(5))
    for row, prompt in zip(rows, prompts):
        tokens = unpadded(row)
        m = prompt - tokens.index(3) - 2  # len(b): the prompt is a | b <sep>
        width = 2 * m + 2  # a_i, (b_j, dp) * m, ','
        cot = tokens[prompt:]
        rows_written = cot[: cot.index(1)]
        assert len(rows_written) % width == 0
        for start in range(width, len(rows_written), width):  # rows i >= 2
            for j in range(2, m + 1):  # columns j >= 2
                cell = start + 2 * j
                a_i, b_j = rows_written[start], rows_written[cell - 1]
                left, up, diagonal = (rows_written[k] - number0 for k in (cell - 2, cell - width, cell - width - 2))
                assert letter0 <= a_i < number0 and letter0 <= b_j < number0
                expected = min(left + 2, up + 2, diagonal + (0 if a_i == b_j else 3))
                assert rows_written[cell] - number0 == expected


def test_lis_reference_example():
    task = build_task("lis", 10, {"number_range": 50})
    assert task.vocab_size == 53 and task.encode("<pad> <sep> <eos> 0 49") == [0, 1, 2, 3, 52]
    line = "43 26 34 45 49 23 29 42 26 45 <sep> 1 1 2 3 4 1 2 3 2 4 <sep> 4 <eos>"
    tokens = task.encode(line)
    assert task.check_sequence(tokens)
    assert task.render(tokens[:11] + task.solve(tokens[:11])) == line
    assert not task.check_sequence(task.encode(line.replace("<sep> 4 <eos>", "<sep> 5 <eos>")))


def test_lis_values_lie_apart_from_the_dp_values():
    task = build_task("lis", 40)
    rows, prompts = task.generate_rows(500, np.random.default_rng(0))
    values = rows[:, :40] - 3
    assert (prompts == 41).all() and values.min() >= 41 and values.max() < task.range
    with pytest.raises(ValueError, match="at least 2L\\+1"):
        build_task("lis", 175, {"number_range": 250})


# --- lengths of the paper's sizes (Yang et al. 2024, sec. 6.1) ---------------------------------------

@pytest.mark.parametrize("name,sizes,lengths", [
    ("arithmetic", [6, 10, 13, 16], [85, 221, 355, 505]),
    ("edit_distance", [6, 12, 16, 20], [72, 210, 342, 506]),
    ("lis", [40, 110, 175, 250], [83, 223, 353, 503]),
])
def test_paper_sizes_have_the_paper_cot_lengths(name, sizes, lengths):
    assert [build_task(name, n).max_seq_len() for n in sizes] == lengths


@pytest.mark.parametrize("name,size,samples", [("arithmetic", 6, 20000), ("edit_distance", 12, 2000),
                                               ("lis", 40, 500)])
def test_generated_samples_reach_the_paper_length_exactly(name, size, samples):
    task = build_task(name, size)
    rows, _ = task.generate_rows(samples, np.random.default_rng(0), train=True)
    lengths = (rows != PAD).sum(axis=1) - 1  # without <eos>, as the reference prints it
    assert lengths.max() == task.max_seq_len()


def test_arithmetic_cap_rejects_longer_samples():
    task = build_task("arithmetic", 6, {"max_cot": 60})
    rows, _ = task.generate_rows(2000, np.random.default_rng(0))
    lengths = (rows != PAD).sum(axis=1) - 1
    assert lengths.max() <= 60 and task.max_seq_len() == 60
    assert all(task.check_sequence(unpadded(r)) for r in rows[:200])


def test_under_mixes_in_fewer_operators_for_training_only():
    task = build_task("arithmetic", 4)
    rng = np.random.default_rng(0)
    operators = lambda rows, prompts: np.isin(rows, [3, 4, 5, 6]).cumsum(1)[np.arange(len(rows)), prompts - 1]  # noqa: E731
    train = operators(*task.generate_rows(4000, rng, train=True))
    test = operators(*task.generate_rows(1000, rng))
    assert (test == 4).all()
    share = np.bincount(train, minlength=5)[1:] / len(train)
    np.testing.assert_allclose(share, [0.1, 0.2, 0.3, 0.4], atol=0.03)


# --- checkers, oracles, batches ----------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["cot", "direct"])
@pytest.mark.parametrize("name", COT_TASKS)
def test_every_sample_passes_its_checker_and_matches_the_oracle(name, mode):
    task = build_task(name, SMALL[name], {"mode": mode})
    batch = task.sample_train(300, np.random.default_rng(1))
    for i in range(len(batch)):
        assert task.check(batch.inputs[i], batch.targets[i], batch.mask[i])
        scored = batch.targets[i][batch.mask[i]].tolist()
        oracle = task.reference_answer(batch.inputs[i].tolist())
        if name == "arithmetic" and mode == "cot":  # the reference's CoT order is random, the oracle's canonical
            oracle, scored = oracle[-2:], scored[-2:]
        assert oracle == scored and scored[-1] == EOS


@pytest.mark.parametrize("name", COT_TASKS)
def test_checker_rejects_every_single_token_change_after_the_prompt(name):
    task = build_task(name, SMALL[name])
    rng = np.random.default_rng(2)
    rows, prompts = task.generate_rows(20, rng)
    for row, prompt in zip(rows, prompts):
        tokens = unpadded(row)
        for position in range(prompt, len(tokens)):
            changed = list(tokens)
            changed[position] = int((tokens[position] + rng.integers(1, task.vocab_size)) % task.vocab_size)
            assert not task.check_sequence(changed), (task.render(tokens), position)


@pytest.mark.parametrize("name", COT_TASKS)
def test_loss_mask_covers_cot_answer_and_eos_only(name):
    task = build_task(name, SMALL[name])
    rows, prompts = task.generate_rows(50, np.random.default_rng(3))
    batch = task.to_batch(rows, prompts)
    for i in range(len(rows)):
        tokens = unpadded(rows[i])
        assert batch.targets[i][batch.mask[i]].tolist() == tokens[prompts[i]:]
    if name == "arithmetic":
        assert (rows[np.arange(len(rows)), prompts - 1] == 9).all()  # the prompt ends with its first '='


@pytest.mark.parametrize("name", COT_TASKS)
def test_same_seed_same_data(name):
    task = build_task(name, SMALL[name])
    a = task.sample_train(200, np.random.default_rng(7))
    b = task.sample_train(200, np.random.default_rng(7))
    c = task.sample_train(200, np.random.default_rng(8))
    assert all(np.array_equal(x, y) for x, y in zip((a.inputs, a.targets, a.mask), (b.inputs, b.targets, b.mask)))
    assert not np.array_equal(a.inputs[:, :20], c.inputs[:, :20])


@pytest.mark.parametrize("name", COT_TASKS)
def test_materialised_split_is_distinct_and_disjoint(name):
    task = build_task(name, 3 if name == "arithmetic" else SMALL[name])
    train, test = task.sample_split(3000, 500, np.random.default_rng(4))
    assert len(train) == 3000 and len(test) == 500

    def rows_of(batch):
        return {tuple(batch.inputs[i][batch.inputs[i] != PAD].tolist()) for i in range(len(batch))}

    train_rows, test_rows = rows_of(train), rows_of(test)
    assert len(train_rows) == 3000 and len(test_rows) == 500
    assert not train_rows & test_rows


def test_split_fails_clearly_when_too_few_distinct_samples_exist():
    task = build_task("arithmetic", 1, {"modulus": 3})
    with pytest.raises(ValueError, match="fewer than 500 distinct samples"):
        task.sample_split(500, 10, np.random.default_rng(0))
    every = build_task("arithmetic", 1, {"under": False})  # 473 distinct one-operator samples mod 11
    train, test = every.split_rows(470, 3, np.random.default_rng(0))  # the rarest ones too, as the reference finds them
    assert len({tuple(unpadded(row)) for rows in (train.tokens, test.tokens) for row in rows}) == 473


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="prime"):
        build_task("arithmetic", 4, {"modulus": 12})
    with pytest.raises(ValueError, match="length >= 4"):
        build_task("edit_distance", 3)
    with pytest.raises(Exception, match="mode"):
        build_task("lis", 10, {"mode": "chain"})


@pytest.mark.parametrize("name, size, other, fragment", [
    ("edit_distance", 6, 40, "at 40 the task needs 114 tokens, more than the 91 of N=6"),
    ("ed_local", 6, 40, "more than the"),
    ("edit_distance", 6, 3, "cannot evaluate at 3: EditDistance needs length >= 4"),
    ("lis", 10, 200, "more than the 253 of N=10"),
    ("lis", 10, 2, "cannot evaluate at 2: lis needs length >= 3"),
])
def test_an_evaluation_length_the_trained_task_cannot_write_is_refused(name, size, other, fragment):
    with pytest.raises(ValueError, match=fragment):
        build_task(name, size).sample_eval(20, np.random.default_rng(0), other)


@pytest.mark.parametrize("name", COT_TASKS)
def test_a_shorter_evaluation_length_writes_rows_the_trained_task_checks(name):
    task = build_task(name, SMALL[name])
    batch = task.sample_eval(50, np.random.default_rng(1), SMALL[name] - 1)
    assert int(batch.inputs.max()) < task.vocab_size
    for inputs, targets, mask in zip(batch.inputs, batch.targets, batch.mask):
        assert task.check(inputs.tolist(), targets.tolist(), mask.tolist())


@pytest.mark.parametrize("name, size", [("arithmetic", 12), ("lis", 12), ("edit_distance", 6)])
def test_the_task_contract_holds_where_rows_are_as_wide_as_the_widest_sample_drawn(name, size):
    from sepbench.conformance import tasks as conformance

    outcome = conformance.samples_pass_checker(build_task(name, size), samples=2000)
    assert outcome.status == "pass", outcome.detail


def test_arithmetic_leftmost_order_keeps_prompts_and_answers():
    rng = np.random.default_rng(3)
    random_order = build_task("arithmetic", 4)
    leftmost = build_task("arithmetic", 4, {"order": "leftmost"})
    rows, prompts = random_order.generate_rows(300, np.random.default_rng(3), train=True)
    ordered, same_prompts = leftmost.generate_rows(300, rng, train=True)
    assert np.array_equal(prompts, same_prompts)
    for row, other, k in zip(rows, ordered, prompts):
        tokens, solved = [int(t) for t in row if t != PAD], [int(t) for t in other if t != PAD]
        assert solved[:k] == tokens[:k] and solved == tokens[:k] + leftmost.solve(tokens[:k])
        assert leftmost.check_sequence(solved)
        assert leftmost.answer_of(solved) == random_order.answer_of(tokens)
    assert ordered.shape[1] <= leftmost.max_seq_len() + 1


@pytest.mark.parametrize("name,size", [("arithmetic", 13), ("arithmetic", 16), ("edit_distance", 20),
                                       ("ed_local", 20), ("lis", 250)])
def test_rows_are_never_wider_than_the_longest_sample(name, size):
    """Rejected longer draws (Arithmetic's cap) must not leave padding columns beyond max_seq_len + 1."""
    task = build_task(name, size)
    widest = 0
    for seed in range(10 if name == "arithmetic" else 2):
        for train in (False, True):
            rows, _ = task.generate_rows(2000, np.random.default_rng(seed), train=train)
            assert rows.shape[1] <= task.max_seq_len() + 1, (seed, train)
            assert rows.shape[1] == (rows != PAD).sum(axis=1).max()
            widest = max(widest, rows.shape[1])
    if name == "arithmetic":
        assert widest > task.max_seq_len() - 40  # the long samples are there, only the padding went


def test_split_follows_the_reference_under_recipe_in_narrow_rows():
    """int(N k / sum(1..n)) draws with k operators, deduplicated, then n-operator rows up to N (Feng et al.)."""
    task = build_task("arithmetic", 3)
    train, test = task.split_rows(3000, 300, np.random.default_rng(0))
    assert train.tokens.dtype == np.uint8 and train.tokens.shape[1] <= task.max_seq_len() + 1
    operators = lambda rows, prompts: np.isin(rows, [3, 4, 5, 6])[:, : prompts.max()].cumsum(1)[np.arange(len(rows)), prompts - 1]  # noqa: E731
    ours = np.bincount(operators(train.tokens, train.prompts), minlength=4)[1:]
    theirs_train, _ = reference.split("arithmetic", 3, 3000, 0, seed=0)
    theirs = np.bincount([sum(t in (3, 4, 5, 6) for t in row[: row.index(9)]) for row in theirs_train], minlength=4)[1:]
    assert ours.sum() == theirs.sum() == 3000
    assert (np.abs(ours - theirs) <= 0.05 * theirs + 10).all(), (ours, theirs)
    assert ours[0] < 500  # of the 500 one-operator draws only the distinct ones stay
    assert (operators(test.tokens, test.prompts) == 3).all()


def test_split_is_shuffled_and_as_wide_as_its_widest_row():
    task = build_task("arithmetic", 4)
    train, _ = task.split_rows(4000, 100, np.random.default_rng(2))
    assert train.tokens.flags.c_contiguous and train.tokens.shape[1] == (train.tokens != PAD).sum(axis=1).max()
    first, second = train.prompts[:2000].mean(), train.prompts[2000:].mean()
    assert abs(first - second) < 0.02 * first  # in draw order the 1- and 2-operator stages would fill the first half
    again, _ = task.split_rows(4000, 100, np.random.default_rng(2))
    assert np.array_equal(train.tokens, again.tokens) and np.array_equal(train.prompts, again.prompts)


def test_narrowing_rows_in_place_keeps_every_row():
    from sepbench.tasks.cot.base import _narrowed
    rows = np.random.default_rng(0).integers(0, 250, (1000, 37), dtype=np.uint8)
    expected = rows[:, :29].copy()
    narrowed = _narrowed(rows, 29, block=64)
    assert narrowed.flags.c_contiguous and np.array_equal(narrowed, expected)
    assert np.shares_memory(narrowed, rows)


def test_arithmetic_cap_below_every_cot_is_refused():
    with pytest.raises(ValueError, match="max_cot=300 is below the shortest CoT with 16 operators"):
        build_task("arithmetic", 16, {"max_cot": 300})  # no 16-operator CoT is shorter than 17^2 + 16 = 305
    task = build_task("arithmetic", 6, {"max_cot": 60})
    with pytest.raises(ValueError, match="with 8 operators"):
        task.generate_rows(10, np.random.default_rng(0), length=8)


def test_arithmetic_of_no_rows():
    for options in (None, {"mode": "direct"}, {"order": "leftmost"}):
        rows, prompts = build_task("arithmetic", 4, options).generate_rows(0, np.random.default_rng(0))
        assert len(rows) == len(prompts) == 0


@pytest.mark.parametrize("modulus", [2, 3])
def test_arithmetic_draws_every_expansion_of_each_number(modulus):
    """Each x -> (a op b) the reference can draw, we draw (for p = 2, x = 0 has more valid draws than x != 0)."""
    task = build_task("arithmetic", 1, {"modulus": modulus})
    rows, _ = task.generate_rows(20000, np.random.default_rng(0))
    ours = {(int(r[-2]), tuple(int(t) for t in r[:3])) for r in rows}
    draw = random.Random(0)
    theirs = {(row[-2], tuple(row[:3])) for row in (reference.arithmetic_row(draw, 1, modulus) for _ in range(20000))}
    assert ours == theirs
