import math
import shutil

import pandas as pd
import pytest
from typer.testing import CliRunner

from sepbench import RunConfig, Store
from sepbench.cli import app
from sepbench.config import ConfigError, apply_overrides
from sepbench.sweep import Reuse, SweepSpec
from sepbench.sweep.halving import Rung, _Run, halve_cell, lr_score, planned_steps, rank, run_halving, schedule
from sepbench.sweep.search import SolvedRule, min_width_table, select_lr
from sepbench.train import EvalPoint, RunResult, train

runner = CliRunner()
LRS = [3e-2, 1e-2, 1e-3, 1e-5]
BASE = {"task": {"name": "index_lookup", "length": 12, "options": {"alphabet_size": 8}},
        "model": {"name": "lstm", "width": 16},
        "train": {"steps": 40, "eval_every": 10, "eval_samples": 100, "batch_size": 32, "warmup_steps": 5},
        "device": "cpu"}
SPEC = {"name": "halving", "base": BASE, "lr_grid": LRS, "seeds": [0, 1], "lr_search": "halving"}


@pytest.mark.parametrize("budget, lrs, eta, every, rungs", [
    (3000, 8, 2, 1, [(375, 4), (750, 2), (1500, 1), (3000, 1)]),
    (3000, 8, 2, 100, [(300, 4), (700, 2), (1500, 1), (3000, 1)]),
    (3000, 5, 2, 100, [(300, 3), (700, 2), (1500, 1), (3000, 1)]),
    (900, 9, 3, 100, [(100, 3), (300, 1), (900, 1)]),
    (60, 8, 2, 20, [(20, 1), (60, 1)]),
    (50, 8, 2, 50, [(50, 8)]),
    (100, 1, 2, 10, [(100, 1)]),
])
def test_rungs_sit_at_budget_over_eta_powers_snapped_to_the_evaluation_grid(budget, lrs, eta, every, rungs):
    assert schedule(budget, lrs, eta, every, finalists=1) == [Rung(step, keep) for step, keep in rungs]


@pytest.mark.parametrize("budget, lrs, eta, every, rungs", [
    (3000, 8, 2, 100, [(300, 4), (700, 2), (3000, 2)]),
    (900, 9, 3, 100, [(100, 3), (300, 2), (900, 2)]),
    (60, 8, 2, 20, [(20, 2), (60, 2)]),
    (100, 2, 2, 10, [(100, 2)]),
    (100, 1, 2, 10, [(100, 1)]),
])
def test_by_default_two_learning_rates_train_to_the_budget(budget, lrs, eta, every, rungs):
    assert schedule(budget, lrs, eta, every) == [Rung(step, keep) for step, keep in rungs]


def test_planned_steps_of_eight_lrs_are_under_40_percent_of_the_grid():
    assert planned_steps(schedule(3000, 8, 2, 1, finalists=1), 8) == 8 * 375 + 4 * 375 + 2 * 750 + 1500
    assert planned_steps(schedule(3000, 8, 2, 100, finalists=1), 8) == 8 * 300 + 4 * 400 + 2 * 800 + 1500 < 8 * 3000 / 3
    assert planned_steps(schedule(3000, 8, 2, 100), 8) == 8 * 300 + 4 * 400 + 2 * 2300 < 8 * 3000 / 2.5
    assert planned_steps(schedule(100, 1), 1) == 100
    with pytest.raises(ValueError, match="eta must be > 1"):
        schedule(100, 4, eta=1.0)
    with pytest.raises(ValueError, match="finalists must be >= 1"):
        schedule(100, 4, finalists=0)


def test_rank_by_mean_accuracy_then_loss_and_leave_out_the_unscored():
    assert rank({1e-3: (0.5, 1.0), 1e-2: (0.5, 0.8), 1e-4: (0.9, 2.0), 1e-1: None, 1e-5: (0.5, 0.8)}) == \
        [1e-4, 1e-2, 1e-5, 1e-3]


def _result(lr: float, seed: int, status: str, curve: list[tuple[int, float]], **extra) -> RunResult:
    cfg = RunConfig.build(apply_overrides(BASE, {"train.lr": lr, "seed": seed}))
    points = [EvalPoint(step=s, loss=1 - a, accuracy=a, seconds=0.0) for s, a in curve]
    return RunResult(config=cfg, config_hash=cfg.config_hash(), status=status, curve=points, steps=curve[-1][0],
                     metrics={"accuracy": curve[-1][1], "loss": 1 - curve[-1][1]}, **extra)


def test_an_lr_is_scored_by_the_mean_over_seeds_and_a_run_cut_before_the_rung_has_no_score():
    early = _result(1e-3, 0, "solved", [(10, 0.5), (20, 1.0)], steps_to_threshold=20)
    running = _result(1e-3, 1, "completed", [(10, 0.2), (20, 0.4), (30, 0.6), (40, 0.8)])
    assert lr_score([early, running], 30) == pytest.approx((0.8, 0.2))
    assert lr_score([early, running], 10) == pytest.approx((0.35, 0.65))
    cut = _result(1e-3, 1, "pruned", [(10, 0.2)])
    assert lr_score([early, cut], 10) is not None and lr_score([early, cut], 20) is None
    failed = RunResult(config=early.config, config_hash="x", status="failed", error="boom")
    assert lr_score([failed], 10) == (0.0, math.inf)
    crashed_later = failed.model_copy(update={"curve": [EvalPoint(step=10, loss=0.5, accuracy=0.5, seconds=0.0)]})
    assert lr_score([crashed_later], 10) == (0.5, 0.5) and lr_score([crashed_later], 20) == (0.0, math.inf)
    diverged = _result(1e-3, 0, "diverged", [(10, 0.5)]).model_copy(update={"steps": 12})
    assert lr_score([diverged], 10) == (0.5, 0.5) and lr_score([diverged], 20) == (0.0, math.inf)
    assert rank({1e-1: lr_score([diverged], 20), 1e-4: (0.0, 3.0)}) == [1e-4, 1e-1]  # below a rate that trained


@pytest.fixture(scope="module")
def halved(tmp_path_factory):
    """One real cell (LSTM on Index Lookup, 4 lrs x 2 seeds, 40 steps) searched by successive halving."""
    store = Store(tmp_path_factory.mktemp("halving") / "runs.db")
    configs = SweepSpec.build(SPEC).expand()
    outcome = run_halving(configs, store)
    return configs, store, outcome


def _stored_by_lr(store: Store) -> dict[float, list[RunResult]]:
    by_lr: dict[float, list[RunResult]] = {}
    for result in store.results():
        by_lr.setdefault(result.config.train.lr, []).append(result)
    return by_lr


def test_the_worse_half_stops_at_each_rung_and_is_stored_pruned_with_its_curve(halved):
    configs, store, outcome = halved
    assert len(store) == len(configs) == 8 and outcome.skipped == 0 and len(outcome.results) == 8
    by_lr = _stored_by_lr(store)
    alive = LRS
    for rung in schedule(40, len(LRS), 2, 10)[:-1]:
        order = rank({lr: lr_score(by_lr[lr], rung.step) for lr in alive})
        for lr in order[rung.keep:]:
            assert {(r.status, r.steps, r.curve[-1].step) for r in by_lr[lr]} == {("pruned", rung.step, rung.step)}
        alive = order[:rung.keep]
    assert len(alive) == 2  # the finalists train to the budget
    assert all(r.status in ("completed", "solved") and r.steps == 40 for lr in alive for r in by_lr[lr])
    assert outcome.steps == planned_steps(schedule(40, 4, 2, 10), 4) * 2 == sum(r.steps for r in store.results())


def test_a_survivor_is_the_grid_run_itself(halved):
    configs, store, _ = halved
    survivor = next(r for r in store.results() if r.status != "pruned")
    grid = train(survivor.config, progress=False)
    assert survivor.config_hash == grid.config_hash
    assert [(p.step, p.accuracy, p.loss) for p in survivor.curve] == [(p.step, p.accuracy, p.loss) for p in grid.curve]
    assert survivor.metrics == grid.metrics and survivor.status == grid.status


def test_lr_selection_sees_only_the_finalists(halved):
    _, store, _ = halved
    (cell,) = select_lr(store.results()).itertuples()
    finalists = {r.config.train.lr for r in store.results() if r.status != "pruned"}
    assert cell.best_lr in finalists and cell.learning_rates == len(finalists) == 2 and cell.seeds == 2


def test_a_run_that_crashes_in_a_search_is_stored_failed_with_the_curve_it_reached(halved, tmp_path, monkeypatch):
    from sepbench.sweep import halving

    configs, full, _ = halved
    doomed = next(r for r in full.results() if r.status != "pruned").config
    train_until = halving.Trainer.train_until

    def crash_past_the_first_rung(trainer, step: int) -> RunResult:
        if trainer.config.config_hash() == doomed.config_hash() and step > 10:
            raise RuntimeError("boom")
        return train_until(trainer, step)

    monkeypatch.setattr(halving.Trainer, "train_until", crash_past_the_first_rung)
    store = Store(tmp_path / "runs.db")
    run_halving(configs, store)
    crashed = store.get(doomed.config_hash())
    assert crashed.status == "failed" and crashed.error == "RuntimeError: boom"
    assert [p.step for p in crashed.curve] == [10]


class Interrupted(Exception):
    pass


@pytest.mark.parametrize("stored_before_kill", [3, 4])
def test_a_killed_search_resumes_without_training_the_stored_rung_again(halved, tmp_path, stored_before_kill):
    configs, full, full_outcome = halved
    store = Store(tmp_path / "runs.db")

    def kill_after(result: RunResult) -> None:
        if len(store) == stored_before_kill:
            raise Interrupted

    with pytest.raises(Interrupted):
        run_halving(configs, store, on_result=kill_after)
    before = {r.config_hash: r for r in store.results()}
    assert len(before) == stored_before_kill and {r.status for r in before.values()} == {"pruned"}
    resumed = run_halving(configs, store)
    assert resumed.skipped == stored_before_kill
    assert not {r.config_hash for r in resumed.results} & set(before)
    # every run held at the first rung (step 10) saved its checkpoint there and resumes from it
    assert [r.resumed_from for r in resumed.results] == [[10]] * (8 - stored_before_kill)
    assert resumed.steps == full_outcome.steps - sum(r.steps for r in before.values()) - 10 * len(resumed.results)
    assert all(store.get(h).created_at == r.created_at for h, r in before.items())
    summary = lambda s: sorted((r.config_hash, r.status, r.steps, r.accuracy) for r in s.results())  # noqa: E731
    assert summary(store) == summary(full)
    again = run_halving(configs, store)
    assert again.steps == 0 and not again.results and again.skipped == 8


def test_retry_failed_trains_a_search_s_failed_runs_again_as_the_uninterrupted_search_ends(halved, tmp_path):
    """A worker that dies stores its cell's unstored runs as failed: a cut one and a finalist here. The search
    replays nothing for them until ``--retry-failed`` (``Reuse``) asks, and then ends as if nothing had failed."""
    configs, full, _ = halved
    store = Store(tmp_path / "runs.db")
    results = full.results()
    lost = [next(r for r in results if r.status == "pruned"), next(r for r in results if r.status != "pruned")]
    for result in results:
        store.put(result.model_copy(update={"status": "failed", "error": "the worker died"})
                  if result in lost else result)
    kept = run_halving(configs, store)
    assert kept.steps == 0 and not kept.results and {store.get(r.config_hash).status for r in lost} == {"failed"}
    retried = run_halving(configs, store, reuse=Reuse(retry_failed=True))
    assert sorted(r.config_hash for r in retried.results) == sorted(r.config_hash for r in lost)
    assert retried.skipped == len(configs) - len(lost)
    summary = lambda s: sorted((r.config_hash, r.status, r.steps, r.accuracy) for r in s.results())  # noqa: E731
    assert summary(store) == summary(full)


def test_a_run_that_trained_to_the_budget_is_stored_before_its_cell_ends(halved, tmp_path, monkeypatch):
    configs, full, full_outcome = halved
    store = Store(tmp_path / "runs.db")
    budget, advance, at_budget = BASE["train"]["steps"], _Run.advance, []

    def advance_until_the_second_finalist(run: _Run, step: int) -> None:
        if step == budget:
            at_budget.append(run.config.config_hash())
            if len(at_budget) == 2:
                raise KeyboardInterrupt
        advance(run, step)

    monkeypatch.setattr(_Run, "advance", advance_until_the_second_finalist)
    with pytest.raises(KeyboardInterrupt):
        run_halving(configs, store)
    first = store.get(at_budget[0])
    assert first is not None and first.status in ("completed", "solved")
    assert (first.steps, first.metrics) == (full.get(at_budget[0]).steps, full.get(at_budget[0]).metrics)
    assert not (store.checkpoints / f"{at_budget[0]}.pt").exists()  # stored, so its checkpoint went
    monkeypatch.undo()
    before = list(store.results())
    shutil.rmtree(store.checkpoints)  # the runs held at the rung lose their checkpoints too: only stored runs remain
    resumed = run_halving(configs, store)
    assert at_budget[0] not in {r.config_hash for r in resumed.results}
    assert resumed.steps == full_outcome.steps - sum(r.steps for r in before)
    summary = lambda s: sorted((r.config_hash, r.status, r.steps, r.accuracy) for r in s.results())  # noqa: E731
    assert summary(store) == summary(full)


def test_nothing_is_cut_at_the_budget_where_a_rate_wins_and_an_earlier_cut_stays_where_it_was(tmp_path):
    """A schedule of one rung, the budget: a rate an earlier search stored as cut (at step 20) keeps that cut; and
    where lr 1e-3 solves on both seeds, lr 1e-2, trained in full beside it, is stored as it ended, not pruned."""
    configs = [c for c in SweepSpec.build(SPEC).expand() if c.train.lr in (1e-2, 1e-3, 1e-5)]
    store = Store(tmp_path / "runs.db")
    for seed in (0, 1):
        store.put(_result(1e-3, seed, "solved", [(10, 0.3), (30, 0.995)], steps_to_threshold=30))
        store.put(_result(1e-2, seed, "completed", [(10, 0.2), (40, 0.6)]))
        store.put(_result(1e-5, seed, "pruned", [(10, 0.1), (20, 0.1)]))
    outcome = halve_cell(configs, store, finalists=3)
    assert outcome.steps == 0 and outcome.cut_at == {c.config_hash(): 20 for c in configs if c.train.lr == 1e-5}
    assert {lr: {r.status for r in runs} for lr, runs in _stored_by_lr(store).items()} == \
        {1e-3: {"solved"}, 1e-2: {"completed"}, 1e-5: {"pruned"}}
    fresh = Store(tmp_path / "fresh.db")
    for seed in (0, 1):
        fresh.put(_result(1e-3, seed, "solved", [(10, 0.3), (30, 0.995)], steps_to_threshold=30))
    two = [c for c in configs if c.train.lr != 1e-5]
    trained = halve_cell(two, fresh)  # trains lr 1e-2 for real to the budget, where lr 1e-3 wins
    assert [(r.config.train.lr, r.status, r.steps) for r in trained.results] == [(1e-2, "completed", 40)] * 2
    assert trained.cut_at == {}


def test_an_lr_whose_seeds_all_solved_wins_and_the_others_stop_at_that_rung(tmp_path):
    store = Store(tmp_path / "runs.db")
    configs = SweepSpec.build(SPEC).expand()
    for seed in (0, 1):
        store.put(_result(1e-3, seed, "solved", [(10, 0.995)], steps_to_threshold=10))
    outcome = run_halving(configs, store)
    assert outcome.steps == 3 * 2 * 10
    for lr, runs in _stored_by_lr(store).items():
        expected = {("solved", 10)} if lr == 1e-3 else {("pruned", 10)}
        assert {(r.status, r.steps) for r in runs} == expected
    (cell,) = select_lr(store.results()).itertuples()
    assert cell.best_lr == 1e-3 and cell.solved


def test_a_stored_grid_run_that_solved_after_the_rung_does_not_win_it(tmp_path):
    store = Store(tmp_path / "runs.db")
    configs = SweepSpec.build(SPEC).expand()
    for seed in (0, 1):
        store.put(_result(1e-3, seed, "solved", [(10, 0.3), (20, 0.6), (30, 0.995)], steps_to_threshold=30))
    outcome = run_halving(configs, store, finalists=1)
    assert outcome.steps == 3 * 2 * 10 + 2 * 10
    assert sorted(outcome.cut_at.values()) == [10, 10, 10, 10, 20, 20]
    assert {r.status for r in store.results() if r.config.train.lr != 1e-3} == {"pruned"}


def test_two_finalists_keep_a_learning_rate_that_rises_later_and_ends_better(tmp_path):
    curves = {3e-2: [(10, 0.5), (20, 0.7), (30, 0.72), (40, 0.75)], 1e-2: [(10, 0.4), (20, 0.6), (30, 0.85), (40, 0.9)],
              1e-3: [(10, 0.1), (20, 0.2), (30, 0.3), (40, 0.4)], 1e-5: [(10, 0.05), (20, 0.05), (30, 0.05), (40, 0.05)]}
    configs = SweepSpec.build(SPEC).expand()
    best = {}
    for finalists in (1, 2):
        store = Store(tmp_path / f"finalists{finalists}.db")
        for lr, curve in curves.items():
            for seed in (0, 1):
                store.put(_result(lr, seed, "completed", curve))
        outcome = halve_cell(configs, store, finalists=finalists)
        assert outcome.steps == 0  # every run was stored: the search replays its decisions on their curves
        (cell,) = select_lr([r for r in store.results() if r.config_hash not in outcome.cut_at]).itertuples()
        best[finalists] = (cell.best_lr, cell.best_accuracy)
    assert best == {1: (3e-2, 0.75), 2: (1e-2, 0.9)}


def test_pruned_runs_never_count_as_unsolved():
    pruned = [_result(1e-3, seed, "pruned", [(10, 0.3)]) for seed in range(3)]
    finished = [_result(1e-2, seed, "completed", [(10, 0.2), (40, 0.5)]) for seed in range(3)]
    (cell,) = select_lr(pruned + finished).itertuples()
    assert cell.best_lr == 1e-2 and cell.learning_rates == 1 and cell.median_accuracy == 0.5
    (stopped,) = select_lr(pruned).itertuples()
    assert (stopped.verdict, stopped.solved, stopped.seeds) == ("undecided", False, 0)
    assert stopped.reason == "every learning rate of 1 was cut by a search on some seed"
    (row,) = min_width_table(pruned, SolvedRule(0.99, 1, 3)).itertuples()
    assert pd.isna(row.min_width)
    assert row.reason == "none solved: 1 undecided cell (every learning rate of 1 was cut by a search on some seed)"


def test_a_width_whose_every_rate_was_cut_on_some_seed_leaves_the_next_width_up_inexact():
    def at(width: int, lr: float, seed: int, status: str, accuracy: float) -> RunResult:
        run = _result(lr, seed, status, [(10, accuracy)])
        cfg = run.config.model_copy(update={"model": run.config.model.model_copy(update={"width": width})})
        return run.model_copy(update={"config": cfg, "config_hash": cfg.config_hash()})

    runs = [at(4, 1e-2, seed, "completed", 0.2) for seed in range(3)]
    runs += [at(8, 1e-2, 0, "pruned", 0.3)] + [at(8, 1e-2, seed, "completed", 1.0) for seed in (1, 2)]
    runs += [at(16, 1e-2, seed, "completed", 1.0) for seed in range(3)]
    (row,) = min_width_table(runs, SolvedRule(0.99, 2, 3)).itertuples()
    assert (row.min_width, row.exact) == (16, False)
    assert row.reason == "at most 16: width 8 undecided (every learning rate of 1 was cut by a search on some seed)"


def test_a_rate_cut_on_some_seed_is_not_ranked_on_the_seeds_trained_since():
    full = [_result(1e-2, seed, "completed", [(10, 0.5), (40, a)]) for seed, a in enumerate([0.96, 0.97, 0.95])]
    part = [_result(1e-3, 0, "pruned", [(10, 0.3)]), _result(1e-3, 1, "pruned", [(10, 0.3)]),
            _result(1e-3, 2, "completed", [(10, 0.3), (40, 0.99)])]
    (cell,) = select_lr(full + part, SolvedRule(0.95, 3, 3)).itertuples()
    assert (cell.best_lr, cell.learning_rates, cell.seeds, cell.verdict) == (1e-2, 1, 3, "solved")
    assert cell.best_accuracy == pytest.approx(0.96)


@pytest.mark.parametrize("data, fragment", [
    ({"lr_search": "foo"}, "lr_search: Input should be 'grid' or 'halving'"),
    ({"lr_grid": None}, "lr_search: halving needs an lr_grid"),
    ({"halving_eta": 1}, "halving_eta = 1: Input should be greater than 1"),
    ({"halving_eta": float("inf")}, "halving_eta = inf: Input should be a finite number"),
    ({"halving_finalists": 0}, "halving_finalists = 0: Input should be greater than or equal to 1"),
])
def test_bad_lr_search_fails_with_one_line(data, fragment):
    with pytest.raises(ConfigError) as caught:
        SweepSpec.build({**SPEC, **data})
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("eta", ["nan", "inf", "1"])
def test_minwidth_refuses_an_eta_that_is_not_a_finite_number_above_1(eta, tmp_path):
    shown = runner.invoke(app, ["minwidth", "--task", "index_lookup", "--model", "transformer", "--lengths", "10",
                                "--widths", "8", "--lrs", "1e-3,1e-2", "--lr-search", "halving", "--eta", eta,
                                "--store", str(tmp_path / "runs.db")])
    assert shown.exit_code == 2 and f"--eta must be a finite number > 1, got {eta}" in shown.stderr
    assert not (tmp_path / "runs.db").exists()


def test_the_search_method_does_not_change_any_config_hash():
    grid = SweepSpec.build({**SPEC, "lr_search": "grid"}).expand()
    assert [c.config_hash() for c in grid] == [c.config_hash() for c in SweepSpec.build(SPEC).expand()]


def test_sweep_cli_halves_resumes_and_refuses_ray(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"name: h\nbase: {BASE}\nlr_grid: {LRS}\nseeds: [0]\nlr_search: halving\n")
    store = tmp_path / "runs.db"
    for dry_run in ([], ["--dry-run"]):
        ray = runner.invoke(app, ["sweep", str(spec), "--store", str(store), "--backend", "ray", *dry_run])
        assert ray.exit_code == 2 and "halving runs on the local backend only" in ray.stderr and not store.exists()
        assert len(ray.stderr.strip().splitlines()) == 1
    first = runner.invoke(app, ["sweep", str(spec), "--store", str(store)], terminal_width=300)
    assert first.exit_code == 0, first.output
    assert "by successive halving" in first.stdout and "2 pruned" in first.stdout
    assert "100 steps trained of 160" in first.stdout  # 4 lrs to step 10, the two finalists to 40
    again = runner.invoke(app, ["sweep", str(spec), "--store", str(store)], terminal_width=300)
    assert again.exit_code == 0 and "4 already in" in again.stdout and "0 steps trained" in again.stdout


def test_minwidth_searches_lrs_by_halving(tmp_path):
    store = tmp_path / "runs.db"
    args = ["minwidth", "--task", "index_lookup", "--model", "lstm", "--lengths", "12", "--widths", "16",
            "--steps", "40", "--device", "cpu", "--store", str(store), "--m", "1", "--k", "1",
            "--set", "train.eval_every=10", "--set", "train.eval_samples=100", "--set", "train.batch_size=32",
            "--set", "task.options.alphabet_size=8", "--set", "train.warmup_steps=5"]
    missing = runner.invoke(app, args + ["--lr-search", "halving"])
    assert missing.exit_code == 2 and "--lr-search halving needs --lrs" in missing.stderr and not store.exists()
    result = runner.invoke(app, args + ["--lrs", ",".join(map(str, LRS)), "--lr-search", "halving"],
                           terminal_width=300)
    assert result.exit_code == 0, result.output
    assert "best of 4 lrs (halving)" in result.stdout and "trained 4 new runs (100 steps)" in result.stdout
    assert sorted(Store(store).query().status) == ["completed", "completed", "pruned", "pruned"]
    elsewhere = [str(tmp_path / "one.db") if a == str(store) else a for a in args]
    one = runner.invoke(app, elsewhere + ["--lrs", ",".join(map(str, LRS)), "--lr-search", "halving",
                                          "--finalists", "1"], terminal_width=300)
    assert one.exit_code == 0, one.output
    assert sorted(Store(tmp_path / "one.db").query().status) == ["completed", "pruned", "pruned", "pruned"]


@pytest.mark.slow
def test_cells_halve_in_parallel_workers_as_they_do_inline(tmp_path):
    """Slow for its two spawned workers' start-up (importing torch), not for training."""
    spec = {**SPEC, "base": apply_overrides(BASE, {"train.steps": 20}), "seeds": [0], "lr_grid": [1e-2, 1e-3],
            "grid": {"model.width": [8, 16]}}
    configs = SweepSpec.build(spec).expand()
    inline, parallel = Store(tmp_path / "inline.db"), Store(tmp_path / "parallel.db")
    run_halving(configs, inline, workers=1, finalists=1)
    outcome = run_halving(configs, parallel, workers=2, finalists=1)
    assert len(outcome.results) == 4 and outcome.steps == 2 * (2 * 10 + 10)
    summary = lambda s: sorted((r.config_hash, r.status, r.steps, r.accuracy) for r in s.results())  # noqa: E731
    assert summary(parallel) == summary(inline)


def _stored_cell(tmp_path, name: str, curves: dict[float, list[tuple[int, float]]]) -> Store:
    store = Store(tmp_path / f"{name}.db")
    for lr, curve in curves.items():
        for seed in (0, 1):
            store.put(_result(lr, seed, "completed", [(step, acc + 0.01 * seed) for step, acc in curve]))
    return store


def test_keeping_ties_trains_on_every_rate_a_rung_cannot_rank(tmp_path):
    """All four rates at chance (0.47-0.52, 100 evaluation strings: a standard error of ~0.035 on a mean of two
    seeds): the plain search cuts two at step 10 on noise, the tie-keeping one cuts none."""
    chance = {3e-2: 0.50, 1e-2: 0.47, 1e-3: 0.52, 1e-5: 0.48}
    curves = {lr: [(step, acc) for step in (10, 20, 30, 40)] for lr, acc in chance.items()}
    configs = SweepSpec.build(SPEC).expand()
    plain = halve_cell(configs, _stored_cell(tmp_path, "plain", curves))
    kept = halve_cell(configs, _stored_cell(tmp_path, "kept", curves), keep_ties=True)
    assert sorted(set(plain.cut_at.values())) == [10] and len(plain.cut_at) == 4  # two rates x two seeds
    assert kept.cut_at == {}


def test_keeping_ties_still_cuts_a_rate_clearly_behind(tmp_path):
    curves = {3e-2: [(10, 0.9), (20, 0.95), (30, 0.96), (40, 0.97)], 1e-2: [(10, 0.88), (20, 0.9), (30, 0.92), (40, 0.95)],
              1e-3: [(10, 0.5), (20, 0.5), (30, 0.5), (40, 0.5)], 1e-5: [(10, 0.49), (20, 0.5), (30, 0.5), (40, 0.5)]}
    configs = SweepSpec.build(SPEC).expand()
    outcome = halve_cell(configs, _stored_cell(tmp_path, "clear", curves), keep_ties=True)
    cut_rates = {r.config.train.lr for r in Store(tmp_path / "clear.db").results() if r.config_hash in outcome.cut_at}
    assert cut_rates == {1e-3, 1e-5} and set(outcome.cut_at.values()) == {10}


def test_a_tie_keeping_search_trains_the_tied_rates_to_the_budget_unpruned(halved, tmp_path):
    """Real training (LSTM, 40 steps, 8 symbols: every rate at 0.02-0.18 at step 10, 100 strings each): where the
    plain search stores two rates as pruned, the tie-keeping one trains all four to the budget."""
    _, plain, _ = halved
    assert sum(r.status == "pruned" for r in plain.results()) == 4
    spec = SweepSpec.build({**SPEC, "halving_keep_ties": True})
    store = Store(tmp_path / "runs.db")
    outcome = run_halving(spec.expand(), store, keep_ties=spec.halving_keep_ties)
    assert outcome.cut_at == {} and len(store) == 8
    assert {(r.status, r.steps) for r in store.results()} == {("completed", 40)}


def test_keeping_ties_cuts_nothing_at_the_budget_where_every_rate_trained_in_full(tmp_path):
    """Tied at the first rung (all four kept), apart at the budget: the rates that trained to it are not pruned."""
    curves = {lr: [(10, 0.50), (20, 0.6 + d), (30, 0.7 + d), (40, 0.8 + d)]
              for lr, d in {3e-2: 0.15, 1e-2: 0.1, 1e-3: -0.2, 1e-5: -0.3}.items()}
    configs = SweepSpec.build(SPEC).expand()
    assert [rung.step for rung in schedule(40, len(LRS), 2, 10)] == [10, 40]
    assert halve_cell(configs, _stored_cell(tmp_path, "apart", curves), keep_ties=True).cut_at == {}
    assert len(halve_cell(configs, _stored_cell(tmp_path, "plain", curves)).cut_at) == 4
