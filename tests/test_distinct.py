"""SeenRows: the first distinct rows in draw order, across chunks and stores, whatever their prefixes share."""
import numpy as np
import pytest

from sepbench.tasks.cot.distinct import PREFIX_BYTES, SeenRows, row_hashes


def patterns(rng: np.random.Generator, width: int, dtype: type, shared_prefix: bool) -> np.ndarray:
    """60 distinct PAD-padded rows to draw from (so most draws repeat one); with ``shared_prefix`` all start
    with the same ``PREFIX_BYTES`` bytes, so only their tails tell them apart."""
    table = rng.integers(1, 4, (300, width)).astype(dtype)
    table[np.arange(width)[None, :] >= rng.integers(width - 3, width + 1, len(table))[:, None]] = 0
    if shared_prefix:
        table[:, : PREFIX_BYTES // table.itemsize] = 1
    table = np.unique(table, axis=0)[:60]
    return table[rng.permutation(60)]


def first_distinct(chunks: list[np.ndarray], limits: list[int], known: set) -> list[list[int]]:
    """Plain-Python restatement: per chunk, the indices of its first ``limit`` rows not seen before."""
    out = []
    for rows, limit in zip(chunks, limits):
        kept = []
        for i, row in enumerate(rows):
            key = tuple(row[row != 0].tolist())
            if key not in known and len(kept) < limit:
                known.add(key)
                kept.append(i)
        out.append(kept)
    return out


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
@pytest.mark.parametrize("shared_prefix", [False, True])
def test_seen_rows_keeps_the_first_distinct_rows_of_each_chunk(dtype, shared_prefix):
    rng = np.random.default_rng(0)
    width = PREFIX_BYTES // np.dtype(dtype).itemsize + 6
    table = patterns(rng, width, dtype, shared_prefix)
    chunks = [table[rng.integers(0, 45, 300)] for _ in range(3)] + [table[rng.integers(0, 60, 300)]]
    limits = [1000, 1000, 1000, 20]
    expected = first_distinct(chunks[:3], limits[:3], set())
    expected_test = first_distinct(chunks[3:], limits[3:], {tuple(chunks[c][i][chunks[c][i] != 0].tolist())
                                                            for c in range(3) for i in expected[c]})
    seen = SeenRows(4000)
    train = np.zeros((3000, width), dtype)
    seen.attach(train)
    filled = 0
    for rows, limit, want in zip(chunks[:3], limits[:3], expected):
        fresh = seen.keep(rows, np.arange(filled, filled + limit))
        assert fresh.tolist() == want
        train[filled : filled + len(fresh)] = rows[fresh]
        filled += len(fresh)
    assert filled == 45  # the chunks repeat rows: the lookup of stored rows is exercised
    seen.replace(0, train[:filled].copy())  # the same rows in another array, as a narrowed set is
    test = np.zeros((20, width), dtype)
    seen.attach(test)
    assert seen.keep(chunks[3], np.arange(20)).tolist() == expected_test[0]


def test_seen_rows_fast_path_records_every_kept_row():
    """Distinct rows with distinct prefixes are kept without whole-row hashes, and still found again later."""
    rng = np.random.default_rng(1)
    rows = rng.integers(1, 250, (500, 100)).astype(np.uint8)
    seen = SeenRows(1000)
    store = np.zeros((1000, 100), np.uint8)
    seen.attach(store)
    places = rng.permutation(1000)
    assert seen.keep(rows, places).tolist() == list(range(500))
    store[places[:500]] = rows
    again = np.concatenate([rows[::7], rng.integers(1, 250, (10, 100)).astype(np.uint8)])
    assert seen.keep(again, places[500:]).tolist() == list(range(len(rows[::7]), len(again)))
    assert seen.keep(rows[:0], places[510:]).size == 0


def test_seen_rows_take_back_a_partly_inserted_chunk():
    """A chunk that repeats one of its own rows: the entries the one-pass insert placed before it met the
    repeat are taken back, and the table ends as the distinct rows alone leave it."""
    rng = np.random.default_rng(4)
    rows = rng.integers(1, 250, (200, 70)).astype(np.uint8)
    places = rng.permutation(300)
    tables = []
    for chunk in (np.concatenate([rows, rows[5:6]]), rows):
        seen = SeenRows(300)
        seen.attach(np.zeros((300, 70), np.uint8))
        assert seen.keep(chunk, places).tolist() == list(range(200))
        tables.append(seen.table)
    assert np.count_nonzero(tables[0]) == 200
    assert np.array_equal(tables[0], tables[1])


def test_seen_rows_take_back_every_probe_pass():
    """Entries placed on the first and third probe passes are all taken back when another meets its prefix hash
    on the fifth, at the end of a run of stored entries sharing one home slot (entries built by hand)."""
    seen = SeenRows(100)
    seen.attach(np.zeros((100, 8), np.uint8))
    home = lambda slot, key: np.uint64(slot) << seen.shift | np.uint64(key) << np.uint64(seen.bits)  # noqa: E731
    for k in range(1, 6):  # keys 1-5 at slots 5-9, one run
        assert seen._insert(np.array([home(5, k) | np.uint64(k)]))
    before = seen.table.copy()
    fresh = [home(100 + i, 50 + i) | np.uint64(10 + i) for i in range(3)]  # placed on the first pass
    fresh += [home(300, 60) | np.uint64(20), home(300, 61) | np.uint64(21)]  # the loser of slot 300 lands on the third
    known = home(5, 5) | np.uint64(30)  # stored key 5 sits at slot 9: met on the fifth pass
    assert not seen._insert(np.array(fresh + [known]), unless_known=True)
    assert np.array_equal(seen.table, before)
    assert seen._insert(np.array(fresh), unless_known=True)
    assert np.count_nonzero(seen.table) == 10


def test_row_hashes_ignore_trailing_padding():
    rows = np.random.default_rng(2).integers(1, 9, (50, 13)).astype(np.uint8)
    wider = np.zeros((50, 40), np.uint8)
    wider[:, :13] = rows
    assert np.array_equal(row_hashes(rows), row_hashes(wider))
    assert len(np.unique(row_hashes(rows))) == len({tuple(r) for r in rows.tolist()})


@pytest.mark.parametrize("shape,dtype", [((1, 8), np.uint8), ((5, 8), np.uint8), ((1, 64), np.uint8), ((3, 4), np.uint16)])
def test_row_hashes_leave_their_rows_alone(shape, dtype):
    """One 8-byte word a row, or one row: the shapes where a transposed block is a view of the rows."""
    rows = np.random.default_rng(3).integers(1, 200, shape).astype(dtype)
    before = rows.copy()
    row_hashes(rows)
    assert np.array_equal(rows, before)


@pytest.mark.parametrize("name,length,options,n_train", [("lis", 5, {"mode": "direct"}, 200), ("arithmetic", 3, None, 2),
                                                          ("arithmetic", 10, None, 55)])
def test_split_rows_are_the_rows_drawn(name, length, options, n_train):
    """Splits whose chunks are one 8-byte word wide or a single row: every stored row is still a valid sample."""
    from sepbench.tasks import build_task

    task = build_task(name, length, options)
    for rows in task.split_rows(n_train, 20, np.random.default_rng(0)):
        for row in rows.tokens:
            assert task.check_sequence([int(t) for t in row[: np.flatnonzero(row)[-1] + 1]]), row
