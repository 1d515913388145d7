"""The on-disk cache of fixed CoT data sets: same results as drawing, read instead of drawn, damage redrawn."""
import threading
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

from sepbench import RunConfig, train
from sepbench.cli import app
from sepbench.tasks import build_task
from sepbench.tasks.cot.base import CotTask
from sepbench.train.data_cache import CACHE_ENV, cached_split, split_key


@pytest.fixture
def draws(monkeypatch):
    """Every call of the real ``CotTask.split_rows``, which still runs."""
    calls = []
    original = CotTask.split_rows

    def spy(self, *args, **kwargs):
        calls.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(CotTask, "split_rows", spy)
    return calls


def fixed_config(width: int = 32) -> RunConfig:
    return RunConfig.build({
        "task": {"name": "lis", "length": 6, "options": {"number_range": 20}},
        "model": {"name": "transformer", "layers": 1, "width": width},
        "train": {"steps": 30, "eval_every": 15, "eval_samples": 64, "batch_size": 32, "lr": 1e-3,
                  "early_stop": False, "data": "fixed", "train_size": 300},
        "device": "cpu",
    })


def test_a_cached_run_equals_a_drawn_one_and_later_runs_read_the_cache(tmp_path, monkeypatch, draws):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    plain = train(fixed_config())
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    writing = train(fixed_config())
    assert len(draws) == 2 and len(list(tmp_path.iterdir())) == 1
    reading = train(fixed_config())
    other_model = train(fixed_config(width=48))  # the model does not decide the data: same cache entry
    assert len(draws) == 2, "a later run drew the data again instead of reading the cache"
    for result in (writing, reading):
        assert result.metrics == plain.metrics
        assert [(p.loss, p.accuracy) for p in result.curve] == [(p.loss, p.accuracy) for p in plain.curve]
    assert other_model.status in ("completed", "solved")


def test_read_rows_are_memory_mapped_and_leave_the_generator_where_drawing_does(tmp_path, draws):
    task = build_task("edit_distance", 6)
    drawn_rng, write_rng, read_rng = (np.random.default_rng([3, 0]) for _ in range(3))
    drawn = task.split_rows(200, 50, drawn_rng)
    cached_split(task, 200, 50, write_rng, tmp_path)
    train_rows, test_rows = cached_split(task, 200, 50, read_rng, tmp_path)
    assert len(draws) == 2
    assert isinstance(train_rows.tokens, np.memmap) and not train_rows.tokens.flags.writeable
    assert train_rows.tokens.dtype == drawn[0].tokens.dtype == np.uint8
    for got, want in ((train_rows, drawn[0]), (test_rows, drawn[1])):
        assert np.array_equal(got.tokens, want.tokens) and np.array_equal(got.prompts, want.prompts)
    assert np.array_equal(read_rng.integers(0, 2**62, 8), drawn_rng.integers(0, 2**62, 8))


def test_the_key_is_the_task_the_sizes_and_the_generator_state():
    task = build_task("lis", 6, {"number_range": 20})
    key = split_key(task, 300, 64, np.random.default_rng([0, 0]))
    assert key == split_key(build_task("lis", 6, {"number_range": 20}), 300, 64, np.random.default_rng([0, 0]))
    assert key != split_key(task, 301, 64, np.random.default_rng([0, 0]))
    assert key != split_key(task, 300, 65, np.random.default_rng([0, 0]))
    assert key != split_key(task, 300, 64, np.random.default_rng([1, 0]))
    assert key != split_key(build_task("lis", 7, {"number_range": 20}), 300, 64, np.random.default_rng([0, 0]))
    assert key != split_key(build_task("lis", 6, {"number_range": 21}), 300, 64, np.random.default_rng([0, 0]))
    assert key != split_key(build_task("lis", 6, {"number_range": 20, "mode": "direct"}), 300, 64,
                            np.random.default_rng([0, 0]))


@pytest.mark.parametrize("damage", ["truncate", "dtype", "shape", "meta"])
def test_a_damaged_cache_is_drawn_again_with_a_warning(tmp_path, draws, damage):
    task = build_task("lis", 6, {"number_range": 20})
    want, _ = cached_split(task, 300, 64, np.random.default_rng(0), tmp_path)
    (folder,) = tmp_path.iterdir()
    tokens = folder / "train_tokens.npy"
    if damage == "truncate":
        tokens.write_bytes(tokens.read_bytes()[:-100])
    elif damage == "dtype":
        np.save(tokens, np.asarray(want.tokens, np.uint16))
    elif damage == "shape":
        np.save(tokens, np.asarray(want.tokens)[:-1])
    else:
        (folder / "meta.json").write_text('{"version": 1, "arr')
    with pytest.warns(UserWarning, match="is damaged") as caught:
        again, _ = cached_split(task, 300, 64, np.random.default_rng(0), tmp_path)
    assert len(caught) == 1 and len(draws) == 2
    assert np.array_equal(again.tokens, want.tokens)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        repaired, _ = cached_split(task, 300, 64, np.random.default_rng(0), tmp_path)
    assert len(draws) == 2 and np.array_equal(repaired.tokens, want.tokens)


def test_files_without_meta_are_never_read_and_stray_temporaries_are_ignored(tmp_path, draws):
    """What a writer killed before its last step leaves: the arrays but no meta.json, and a temporary file."""
    task = build_task("lis", 6, {"number_range": 20})
    want, _ = cached_split(task, 300, 64, np.random.default_rng(0), tmp_path)
    (folder,) = tmp_path.iterdir()
    (folder / "meta.json").unlink()
    (folder / ".meta.json.x.tmp").write_text("{")
    (folder / "train_tokens.npy").write_bytes(b"half")
    got, _ = cached_split(task, 300, 64, np.random.default_rng(0), tmp_path)
    assert len(draws) == 2 and np.array_equal(got.tokens, want.tokens)
    cached_split(task, 300, 64, np.random.default_rng(0), tmp_path)
    assert len(draws) == 2


def test_writers_of_the_same_key_at_once_leave_one_intact_entry(tmp_path, draws):
    task = build_task("edit_distance", 6)
    found: list = []
    threads = [threading.Thread(target=lambda: found.append(
        cached_split(task, 400, 50, np.random.default_rng(5), tmp_path))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == 4
    (folder,) = tmp_path.iterdir()
    assert sorted(p.name for p in folder.iterdir()) == ["meta.json", "test_prompts.npy", "test_tokens.npy",
                                                        "train_prompts.npy", "train_tokens.npy"]
    calls = len(draws)
    read, _ = cached_split(task, 400, 50, np.random.default_rng(5), tmp_path)
    assert len(draws) == calls and all(np.array_equal(read.tokens, rows.tokens) for rows, _ in found)


def test_cli_data_cache_is_made_and_used_and_a_file_there_is_refused(tmp_path, monkeypatch, store_path, draws):
    monkeypatch.setenv(CACHE_ENV, "")  # no cache, and --data-cache's setting is undone after the test
    blocker = tmp_path / "file"
    blocker.write_text("")
    run = ["run", "--task", "lis", "--length", "6", "--width", "16", "--steps", "4", "--device", "cpu",
           "--set", "task.options.number_range=20", "--set", "train.data=fixed", "--set", "train.train_size=100",
           "--set", "train.eval_samples=20", "--set", "train.eval_every=4"]
    refused = CliRunner().invoke(app, run + ["--data-cache", str(blocker)])
    assert refused.exit_code == 2 and "--data-cache" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not store_path.exists()
    made = CliRunner().invoke(app, run + ["--data-cache", str(tmp_path / "new" / "cache")])
    assert made.exit_code == 0, made.output
    assert len(list((tmp_path / "new" / "cache").iterdir())) == 1 and len(draws) == 1
