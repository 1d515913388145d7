"""The claims catalogue, its verdict rules on stored runs, and `sepbench reproduce`."""
from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from sepbench.claims import SCALES, catalogue, select
from sepbench.claims.checks import CHECKS
from sepbench.claims.evaluate import evaluate_runs
from sepbench.claims.verdicts import (INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, ClaimVerdict, combine, compare_verdict,
                                      level_verdict, order_verdict)
from sepbench.claims.width_rules import possible_widths
from sepbench.cli import app
from sepbench.config import ConfigError
from sepbench.store import Store
from sepbench.train.result import EvalPoint, RunResult

runner = CliRunner()
SMOKE = {"train.steps": 1, "train.eval_samples": 16, "train.eval_every": 1}


def test_every_claim_expands_to_valid_runs_at_both_scales():
    claims = catalogue()
    assert {c.paper for c in claims} == {"bhattamishra2024", "yang2024", "deng2023"}
    for claim in claims:
        for scale in SCALES:
            if claim.kind == "theory":
                assert claim.check in CHECKS and claim.at(scale).params
            elif claim.at(scale).not_run is not None:
                assert claim.configs(scale) == [] and scale == "cpu", (claim.id, scale)
            else:
                configs = claim.configs(scale)
                assert configs and len({c.config_hash() for c in configs}) == len(configs)
                seeds = {c.seed for c in configs}
                assert len(seeds) >= claim.min_seeds, (claim.id, scale)


@pytest.mark.parametrize("scale", SCALES)
def test_set_changes_every_run_of_every_claim_even_where_its_spec_sweeps_the_key(scale):
    forced = {"train.steps": 20, "seed": 7, "width": 24, "lr": 0.002}
    for claim in catalogue():
        if claim.kind == "theory" or claim.at(scale).not_run is not None:
            continue
        configs = claim.configs(scale, forced)
        assert configs and {(c.train.steps, c.seed, c.model.width, c.train.lr) for c in configs} == {
            (20, 7, 24, 0.002)}, claim.id
        assert not {c.config_hash() for c in configs} & {c.config_hash() for c in claim.configs(scale)}, claim.id


def test_unknown_claim_or_paper_is_one_line():
    with pytest.raises(ConfigError, match="unknown claim 'nope'.*allowed: il-tf-vs-recurrent"):
        select("bhattamishra2024", "nope")
    with pytest.raises(ConfigError, match="unknown paper"):
        select("vaswani2017")


def test_rules():
    assert compare_verdict([0.99, 1.0, 0.98], [0.5, 0.6, 0.55], 0.3) == REPRODUCED
    assert compare_verdict([0.7, 0.73, 0.75], [0.9, 0.95, 0.94], 0.3) == NOT_REPRODUCED
    assert compare_verdict([0.9, 0.99, 0.6], [0.5, 0.55, 0.52], 0.3) == INCONCLUSIVE
    assert compare_verdict([0.5, 0.52], [0.5, 0.51], 0.1, "below") == REPRODUCED
    assert level_verdict([1.0, 0.99], 0.95) == REPRODUCED
    assert level_verdict([0.5, 0.99], 0.95) == INCONCLUSIVE
    assert level_verdict([0.5, 0.6], 0.95) == NOT_REPRODUCED
    assert order_verdict([32], [64, 96]) == REPRODUCED
    assert order_verdict([64], [64]) == NOT_REPRODUCED
    assert order_verdict([32, 64], [64]) == INCONCLUSIVE
    assert possible_widths({32: "unsolved", 64: "undecided", 96: "solved"}) == [64, 96]
    assert possible_widths({32: "solved", 64: "solved"}) == [0, 32]  # may lie below the grid
    assert possible_widths({32: "unsolved", 64: "unsolved"}) == [float("inf")]
    assert combine([REPRODUCED, INCONCLUSIVE]) == INCONCLUSIVE
    assert combine([NOT_REPRODUCED, INCONCLUSIVE]) == NOT_REPRODUCED


def _store_runs(store: Store, configs, accuracy) -> None:
    for cfg in configs:
        run = _plain_run(cfg, accuracy)
        if run is not None:
            store.put(run)


def two_sided(claim):
    """``claim`` judged as if the quick grid reached the sizes its text names (no ``one_sided`` gate): its rules
    tested on their own."""
    return claim.model_copy(update={"conditions": [c.model_copy(update={"one_sided": None}) for c in claim.conditions]})


def _outcomes(tmp_path, claim_id, accuracy, overrides=SMOKE, store_run=None):
    (claim,) = select(None, claim_id)
    claim = two_sided(claim)
    configs = claim.configs("quick", overrides)
    store = Store(tmp_path / "s.db")
    for cfg in configs:
        run = (store_run or _plain_run)(cfg, accuracy)
        if run is not None:
            store.put(run)
    return evaluate_runs(claim, "quick", configs, {r.config_hash: r for r in store.results()})


def _plain_run(cfg, accuracy):
    acc = accuracy(cfg)
    if acc is None:
        return None
    steps = cfg.train.steps
    plateau = [EvalPoint(step=steps * k // 4, accuracy=acc, loss=1.0 - acc, seconds=float(k)) for k in range(1, 5)]
    return RunResult(config=cfg, config_hash=cfg.config_hash(), status="completed", metrics={"accuracy": acc},
                     curve=plateau, steps=steps, wall_seconds=1.0)


def _tf_vs_wide_mamba(tmp_path, accuracy):
    (outcome,) = _outcomes(tmp_path, "mamba-wide-vs-transformer", accuracy)
    return outcome


def _transformer(cfg) -> bool:
    return cfg.model.name == "transformer"


def test_compare_on_stored_runs_reproduced(tmp_path):
    outcome = _tf_vs_wide_mamba(tmp_path, lambda c: (0.99 if c.train.lr == 0.001 else 0.5) if _transformer(c) else
                                0.55 + 0.01 * c.seed)
    assert outcome.verdict == REPRODUCED
    assert "best of 2 lr" in outcome.evidence[0] and "lr 0.001" in outcome.evidence[0]


def test_compare_on_stored_runs_not_reproduced(tmp_path):
    outcome = _tf_vs_wide_mamba(tmp_path, lambda c: 0.6 if _transformer(c) else 0.55)
    assert outcome.verdict == NOT_REPRODUCED


def test_lengths_where_both_sides_reach_the_stop_level_are_outside_a_compare(tmp_path):
    def sparse_lis(solved_at):
        return lambda c: 0.91 if c.task.length in solved_at else 0.8 if c.model.width > 32 else 0.5

    (both_solve_everywhere,) = _outcomes(tmp_path / "a", "yang-lis-sparse-rising", sparse_lis({6, 14}))
    assert both_solve_everywhere.verdict == INCONCLUSIVE
    assert any("every length is outside the claim" in r for r in both_solve_everywhere.reasons)
    (rises_at_14,) = _outcomes(tmp_path / "b", "yang-lis-sparse-rising", sparse_lis({6}))
    assert rises_at_14.verdict == REPRODUCED
    assert "outside the claim: both reach 0.9" in rises_at_14.evidence[0] and "N=14" in rises_at_14.evidence[1]
    (flat_at_14,) = _outcomes(tmp_path / "c", "yang-lis-sparse-rising",
                              lambda c: 0.91 if c.task.length == 6 else 0.5)
    assert flat_at_14.verdict == NOT_REPRODUCED


def test_spread_or_missing_runs_are_inconclusive(tmp_path):
    straddle = _tf_vs_wide_mamba(tmp_path / "a", lambda c: (0.99 if c.seed else 0.6) if _transformer(c) else 0.5)
    assert straddle.verdict == INCONCLUSIVE
    missing = _tf_vs_wide_mamba(tmp_path / "b", lambda c: None if c.seed == 2 else 1.0 if _transformer(c) else 0.5)
    assert missing.verdict == INCONCLUSIVE and any("runs missing (no result to judge)" in r for r in missing.reasons)
    (claim,) = select(None, "mamba-wide-vs-transformer")
    assert ClaimVerdict(claim, "quick", INCONCLUSIVE, [missing]).label == "inconclusive: runs missing"
    assert ClaimVerdict(claim, "quick", INCONCLUSIVE, [straddle]).label != "inconclusive: runs missing"
    one = _tf_vs_wide_mamba(tmp_path / "c", lambda c: None if (c.seed, c.train.lr, _transformer(c)) == (2, 0.001, False)
                            else 1.0 if _transformer(c) else 0.5)
    assert "N=200: 1 run missing (no result to judge)" in one.reasons


def test_yang_width_conditions_on_stored_runs(tmp_path):
    (claim,) = select("yang2024", "yang-width-flops")
    configs = claim.configs("quick", SMOKE)
    need = {("sparse_transformer", "arithmetic"): {2: 64, 3: 96}, ("sparse_transformer", "edit_distance"): {4: 64, 6: 96},
            ("linear_transformer", "arithmetic"): {2: 96}, ("linear_transformer", "edit_distance"): {4: 64, 6: 96},
            ("linear_transformer", "lis"): {6: 64}}

    def smallest(c):
        return 32 if c.model.name == "transformer" else need.get((c.model.name, c.task.name), {}).get(c.task.length, 999)

    store = Store(tmp_path / "s.db")
    _store_runs(store, configs, lambda c: 0.95 if c.model.width >= smallest(c) else 0.3)
    results = {r.config_hash: r for r in store.results()}
    growth, fixed, flops_sparse, flops_linear = evaluate_runs(claim, "quick", configs, results)
    assert [o.verdict for o in (growth, fixed, flops_sparse, flops_linear)] == [REPRODUCED] * 4
    assert any("transformer/lis: width 32 solves N = 6, 14" in e for e in fixed.evidence), fixed.evidence
    assert any("N=3 {beyond the grid}" in e for e in growth.evidence)
    store.put(RunResult(config=configs[0].model_copy(update={"seed": 0}), config_hash=configs[0].config_hash(),
                        status="failed", error="out of memory"))
    results = {r.config_hash: r for r in store.results()}
    assert evaluate_runs(claim, "quick", configs, results)[1].verdict == INCONCLUSIVE


def test_flops_tied_at_the_smallest_width_say_no_budget_orders_them(tmp_path):
    (claim,) = select("yang2024", "yang-width-flops")
    configs = claim.configs("quick", SMOKE)
    store = Store(tmp_path / "s.db")
    _store_runs(store, configs, lambda c: 0.95)
    *_, flops_sparse, flops_linear = evaluate_runs(claim, "quick", configs, {r.config_hash: r for r in store.results()})
    assert flops_sparse.verdict == flops_linear.verdict == INCONCLUSIVE
    assert "arithmetic N=2: transformer and linear_transformer both solve at the grid's smallest width: a tie that " \
        "only narrower widths can order, whatever the budget" in flops_linear.reasons, flops_linear.reasons


def test_flops_are_compared_at_one_depth_per_model(tmp_path):
    """A model with runs at two depths solves at one width by either, but its FLOPs there differ by depth."""
    (claim,) = select("yang2024", "yang-width-flops")
    configs = claim.configs("quick", SMOKE)
    deeper = [c.model_copy(update={"model": c.model.model_copy(update={"layers": c.model.layers + 1})})
              for c in configs if c.model.name == "transformer"]
    store = Store(tmp_path / "s.db")
    _store_runs(store, configs + deeper, lambda c: 0.95 if c.model.width >= 64 else 0.3)
    results = {r.config_hash: r for r in store.results()}
    *_, flops_sparse, flops_linear = evaluate_runs(claim, "quick", configs + deeper, results)
    assert flops_sparse.verdict == flops_linear.verdict == INCONCLUSIVE
    layers = configs[0].model.layers
    assert (f"arithmetic N=2: transformer has runs at depths {layers}, {layers + 1}; FLOPs are compared at one "
            "depth per model") in flops_linear.reasons, flops_linear.reasons
    fixed = evaluate_runs(claim, "quick", configs + deeper, results)[1]
    assert fixed.verdict == INCONCLUSIVE
    assert f"transformer/arithmetic: cells at depths {layers}, {layers + 1}; one width is judged at one depth" \
        in fixed.reasons, fixed.reasons
    *_, one_depth = evaluate_runs(claim, "quick", configs, results)
    assert not any("depths" in r for r in one_depth.reasons)


def test_fixed_width_fails_when_every_width_up_to_its_bound_misses_a_size(tmp_path):
    """At the paper scale (widths 32-512) Standard solves Arithmetic 6 only at 256 and the larger sizes only up to
    128: no width <= 256 solves every size."""
    (claim,) = select("yang2024", "yang-width-flops")
    configs = claim.configs("paper", SMOKE)
    store = Store(tmp_path / "s.db")
    _store_runs(store, configs, lambda c: 0.95 if c.task.name != "arithmetic" or c.model.width > 256
                or (c.model.width == 256 if c.task.length == 6 else c.model.width <= 128) else 0.3)
    fixed = evaluate_runs(claim, "paper", configs, {r.config_hash: r for r in store.results()})[1]
    assert fixed.verdict == NOT_REPRODUCED, fixed.evidence + fixed.reasons
    assert any("transformer/arithmetic: every width <= 256" in e for e in fixed.evidence), fixed.evidence


def test_fixed_width_below_its_bound_is_open_where_the_grid_ends_short_of_it(tmp_path):
    """The quick grid ends at 96: every width it tried missing a size leaves 128 and 256 untried, not refuted."""
    (claim,) = select("yang2024", "yang-width-flops")
    configs = claim.configs("quick", SMOKE)
    store = Store(tmp_path / "s.db")
    # Standard solves arithmetic 2 only at 96 and 3 only at 32-64: no width tried solves both sizes
    _store_runs(store, configs, lambda c: 0.95 if (c.task.length, c.model.width) in {(2, 96), (3, 32), (3, 64)}
                or c.task.name != "arithmetic" else 0.3)
    fixed = evaluate_runs(claim, "quick", configs, {r.config_hash: r for r in store.results()})[1]
    assert fixed.verdict == INCONCLUSIVE
    assert "transformer/arithmetic: widths above 96 up to 256 are not in the grid" in fixed.reasons, fixed.reasons


def test_fixed_width_waits_on_unsolved_runs_still_learning(tmp_path):
    """The same sizes missed, but the missing runs still rising over their last quarter: not a refutation."""
    (claim,) = select("yang2024", "yang-width-flops")
    configs = claim.configs("quick", {**SMOKE, "train.steps": 800})
    store = Store(tmp_path / "s.db")
    solved = {(2, 96), (3, 32), (3, 64)}
    for cfg in configs:
        if cfg.task.name != "arithmetic" or (cfg.task.length, cfg.model.width) in solved:
            store.put(_plain_run(cfg, lambda c: 0.95))
            continue
        steps = cfg.train.steps
        curve = [EvalPoint(step=steps * k // 8, accuracy=0.3 + 0.07 * k, loss=2.0 - 0.2 * k, seconds=float(k))
                 for k in range(1, 9)]
        store.put(RunResult(config=cfg, config_hash=cfg.config_hash(), status="completed", curve=curve,
                            metrics={"accuracy": curve[-1].accuracy}, steps=steps, wall_seconds=1.0))
    fixed = evaluate_runs(claim, "quick", configs, {r.config_hash: r for r in store.results()})[1]
    assert fixed.verdict == INCONCLUSIVE, fixed.evidence
    assert any("still learning" in r for r in fixed.reasons), fixed.reasons


def test_a_tie_at_the_smallest_width_is_not_a_refutation(tmp_path):
    (claim,) = select("yang2024", "yang-ed-local")
    configs = claim.configs("quick", SMOKE)

    def outcome(need):
        store = Store(tmp_path / f"{len(list(tmp_path.iterdir()))}.db")
        _store_runs(store, configs, lambda c: 0.95 if c.model.width >= need(c) else 0.3)
        return evaluate_runs(claim, "quick", configs, {r.config_hash: r for r in store.results()})

    linear, sparse = outcome(lambda c: 32)  # both tasks solved at the smallest width tried, every size
    assert linear.verdict == sparse.verdict == INCONCLUSIVE
    assert ClaimVerdict(claim, "quick", INCONCLUSIVE, [linear, sparse]).label == \
        "inconclusive: tied at the grid's smallest width, which no budget orders"
    assert any("below the grid" in e for e in linear.evidence)
    assert "N=4: both sides solve at the grid's smallest width, 32: a tie that only narrower widths can order, " \
        "whatever the budget" in linear.reasons, linear.reasons
    linear, _ = outcome(lambda c: 32 if c.task.name == "ed_local" else 64 if c.task.length == 4 else 96)
    assert linear.verdict == REPRODUCED
    linear, _ = outcome(lambda c: 64)  # the same smallest width on both tasks, known exactly: no order
    assert linear.verdict == NOT_REPRODUCED
    linear, _ = outcome(lambda c: 96 if c.task.name == "ed_local" else 64)
    assert linear.verdict == NOT_REPRODUCED


def test_cli_list_dry_run_and_bad_claim(tmp_path):
    listed = runner.invoke(app, ["reproduce", "--list"], terminal_width=300)
    assert listed.exit_code == 0 and "il-tf-vs-recurrent" in listed.stdout and "deng-learned" in listed.stdout
    for claim in catalogue():  # every claim with the line of the paper it comes from
        assert f"{claim.id}  {claim.paper}, {claim.where}" in listed.stdout
        assert re.search(r"\bL\d+", claim.where), claim.where
    dry = runner.invoke(app, ["reproduce", "bhattamishra2024", "--claim", "dyck-depth", "--dry-run", "--store",
                              str(tmp_path / "s.db")], terminal_width=300)
    assert dry.exit_code == 0 and "18 runs to train" in dry.stdout and "core-hours" in dry.stdout
    assert "in all; per claim at most" in dry.stdout
    assert not (tmp_path / "s.db").exists()
    bad = runner.invoke(app, ["reproduce", "--claim", "nope"])
    assert bad.exit_code == 2 and bad.stderr.strip().count("\n") == 0 and "unknown claim 'nope'" in bad.stderr
    both = runner.invoke(app, ["reproduce", "--claim", "eq-one", "--claim", "dyck-depth", "--dry-run", "--store",
                               str(tmp_path / "s.db")], terminal_width=300)
    assert both.exit_code == 0 and "48 runs to train" in both.stdout  # eq-one 30 + dyck-depth 18
    half_bad = runner.invoke(app, ["reproduce", "--claim", "dyck-depth", "--claim", "nope", "--dry-run"])
    assert half_bad.exit_code == 2 and "unknown claim 'nope'" in half_bad.stderr


def test_cli_theory_claim_end_to_end(tmp_path):
    args = ["reproduce", "bhattamishra2024", "--claim", "bound-8k", "--store", str(tmp_path / "s.db"),
            "--out", str(tmp_path / "rep")]
    result = runner.invoke(app, args, terminal_width=300)
    assert result.exit_code == 0, result.output
    assert "first length 8193\n" in result.stdout and "N=0" not in result.stdout and "1 reproduced" in result.stdout
    assert (tmp_path / "rep" / "figures" / "claim-bound-8k.png").is_file()
    assert (tmp_path / "s.claims.json").is_file()


def test_cli_tiny_sweep_claim_resumes(tmp_path):
    args = ["reproduce", "bhattamishra2024", "--claim", "dyck-depth", "--store", str(tmp_path / "s.db"),
            "--out", str(tmp_path / "rep"), *[f"--set={k}={v}" for k, v in SMOKE.items()]]
    first = runner.invoke(app, args, terminal_width=300)
    assert first.exit_code == 0, first.output
    assert "18 runs to train" in first.stdout and "dyck-depth" in first.stdout
    assert len(Store(tmp_path / "s.db")) == 18
    again = runner.invoke(app, args, terminal_width=300)
    assert "0 runs to train" in again.stdout
    text = (tmp_path / "rep" / "reproduction.md").read_text()
    assert "`dyck-depth`" in text and "train.steps=1" in text


def test_cli_sweep_claim_trains_stacked_groups_when_asked(tmp_path, monkeypatch):
    from sepbench.train import group

    sizes = []
    real = group.train_group
    monkeypatch.setattr(group, "train_group", lambda configs, **kw: sizes.append(len(configs)) or real(configs, **kw))
    args = ["reproduce", "bhattamishra2024", "--claim", "dyck-depth", "--store", str(tmp_path / "s.db"),
            "--out", str(tmp_path / "rep"), "--group-size", "6", *[f"--set={k}={v}" for k, v in SMOKE.items()]]
    result = runner.invoke(app, args, terminal_width=300)
    assert result.exit_code == 0, result.output
    assert sorted(sizes) == [6, 6, 6] and len(Store(tmp_path / "s.db")) == 18


def test_claim_figure_draws_accuracies_on_0_1_with_the_level_line_and_the_picked_member(tmp_path):
    from sepbench.claims.verdicts import ClaimVerdict
    from sepbench.claims.report import draw

    (claim,) = select("bhattamishra2024", "mamba-width")
    configs = claim.configs("quick", SMOKE)
    store = Store(tmp_path / "s.db")
    accuracy = {("mamba", 64): 0.6, ("mamba", 16): 0.2, ("lstm", 64): 0.04, ("lstm", 16): 0.03}
    _store_runs(store, configs, lambda c: accuracy[c.model.name, c.model.width] + 0.01 * c.seed)
    outcomes = evaluate_runs(claim, "quick", configs, {r.config_hash: r for r in store.results()})
    figure = draw(ClaimVerdict(claim, "quick", REPRODUCED, outcomes))
    rising, flat, chance = figure.axes
    assert rising.get_ylim() == flat.get_ylim() == chance.get_ylim() == (-0.03, 1.03)
    assert [line.get_ydata()[0] for line in chance.get_lines() if line.get_linestyle() == "--"] == [0.1]
    legend = [text.get_text() for text in chance.get_legend().get_texts()]
    assert any(": lstm-(1, 64) lr" in label for label in legend), legend


def test_per_scale_selectors_pick_the_runs_of_that_scale(tmp_path):
    (claim,) = select("bhattamishra2024", "mamba-width")
    claim = two_sided(claim)
    configs = claim.configs("quick", SMOKE)
    store = Store(tmp_path / "s.db")
    _store_runs(store, configs, lambda c: {("mamba", 64): 0.6, ("mamba", 16): 0.2}.get((c.model.name, c.model.width), 0.03))
    mamba, lstm, chance = evaluate_runs(claim, "quick", configs, {r.config_hash: r for r in store.results()})
    assert (mamba.verdict, lstm.verdict, chance.verdict) == (REPRODUCED,) * 3, mamba.reasons + lstm.reasons
    assert "width=64 mamba-(2, 64)" in mamba.evidence[0] and "width=16" in mamba.evidence[0]


def test_a_theory_check_that_raises_is_an_inconclusive_verdict_with_its_reason(tmp_path, monkeypatch):
    from sepbench.claims import checks
    from sepbench.claims.reproduce import judge

    def broken(params):
        raise ValueError("codes too narrow")

    (claim,) = select("bhattamishra2024", "construct-equality")
    monkeypatch.setitem(checks.CHECKS, claim.check, broken)
    verdict = judge(claim, "quick", Store(tmp_path / "s.db"))
    assert verdict.verdict == INCONCLUSIVE
    assert verdict.outcomes[0].reasons == [f"the check {claim.check} failed: ValueError: codes too narrow"]


PAST = {"il-tf-vs-recurrent": 100, "mamba-wide-vs-transformer": 100, "dyck-depth": 100, "eq-random": 100,
        "eq-ncp": 400}
"""The length past which each separation's text places it (001 L196, L886, L198, L908, L916)."""


@pytest.mark.parametrize("scale", SCALES)
def test_separations_are_judged_only_past_the_lengths_the_text_names(scale):
    for claim in catalogue():
        bounds = [(c, PAST[claim.id]) for c in claim.conditions if claim.id in PAST]
        if claim.id == "mamba-width":  # the LSTM "for lengths above 100" (L886)
            bounds = [(c, 100) for c in claim.conditions if "LSTM" in c.text]
        for condition, bound in bounds:
            lengths = condition.lengths_at(scale)
            assert lengths and min(lengths) > bound, (claim.id, condition.text, scale, lengths)
            if claim.at(scale).not_run is None:
                assert set(lengths) <= {cfg.task.length for cfg in claim.configs(scale)}, (claim.id, scale)


def test_a_claim_trains_only_the_runs_its_only_names_and_shares_them_with_the_whole_spec():
    (whole,) = select("yang2024", "yang-efficient-larger")
    (rising,) = select("yang2024", "yang-lis-sparse-rising")
    (widest,) = select("yang2024", "yang-arithmetic-512")
    every = {c.config_hash() for c in whole.configs("quick")}
    picked = rising.configs("quick")
    assert {(c.model.name, c.task.name) for c in picked} == {("sparse_transformer", "lis")}
    assert {c.model.width for c in picked} == {32, 96} and {c.model.width for c in rising.configs("cpu")} == {32, 128}
    assert {c.config_hash() for c in picked} <= every
    longer = rising.configs("cpu")  # its own spec: the same runs as yang_fig1.yaml's but 28 000 steps
    assert {c.train.steps for c in longer} == {28000} and not {c.config_hash() for c in longer} & {
        c.config_hash() for c in whole.configs("cpu")}
    assert {(c.task.name, c.model.width) for c in widest.configs("paper")} == {("arithmetic", 512)}


def test_an_only_that_matches_no_run_is_one_line():
    from sepbench.claims.catalogue import SpecRef

    ref = SpecRef(spec="claims/cpu/yang_fig1.yaml", only={"model.widht": 64})
    with pytest.raises(ConfigError, match="matches none of its 108 runs at the cpu scale"):
        ref.runs("cpu")


def _with_cpu(claim_id: str, cpu: dict):
    from sepbench.claims.catalogue import Claim

    (claim,) = select(None, claim_id)
    data = claim.model_dump(by_alias=True, exclude_none=True)
    return Claim.model_validate({**data, "cpu": cpu})


def test_a_claim_not_run_at_a_scale_is_inconclusive_there_with_its_reason_and_trains_nothing(tmp_path):
    from sepbench.claims.reproduce import judge, plan_claim
    from sepbench.claims.tables import dry_run

    claim = _with_cpu("yang-ed-local", {"not_run": "ED needs > 8000 steps"})
    store = Store(tmp_path / "s.db")
    assert claim.configs("cpu") == [] and claim.configs("quick")
    verdict = judge(claim, "cpu", store)
    assert verdict.verdict == INCONCLUSIVE and store.results() == []
    assert all(o.reasons == ["not run at the cpu scale: ED needs > 8000 steps"] for o in verdict.outcomes)
    assert verdict.label == "inconclusive: not run at the cpu scale"
    (row,) = dry_run([plan_claim(claim, "cpu", store)], store).rows
    assert row[1] == "0" and row[-1] == "not run at the cpu scale (why: below)"


def test_not_run_and_specs_at_one_scale_are_refused():
    with pytest.raises(ValueError, match="has specs and not_run"):
        _with_cpu("yang-ed-local", {"not_run": "why", "specs": [{"spec": "claims/cpu/yang_fig1.yaml"}]})
    with pytest.raises(ValueError, match=r"needs specs \(or not_run: why\) at the cpu scale"):
        _with_cpu("yang-ed-local", {})


def test_list_and_dry_run_say_which_claims_the_cpu_scale_does_not_run(tmp_path):
    listed = runner.invoke(app, ["reproduce", "--list", "--scale", "cpu", "--claim", "yang-ed-local"],
                           terminal_width=400)
    assert listed.exit_code == 0 and "; not run at the cpu scale" in listed.stdout
    assert "not run at the cpu scale: Edit Distance is not learned within a cpu budget" in listed.stdout
    dry = runner.invoke(app, ["reproduce", "--scale", "cpu", "--claim", "yang-locality-order", "--dry-run", "--store",
                              str(tmp_path / "s.db")], terminal_width=400)
    assert dry.exit_code == 0 and "0 runs to train" in dry.stdout
    assert "yang-locality-order: not run at the cpu scale: Edit Distance is not learned" in dry.stdout


def test_an_inconclusive_verdict_without_reasons_is_not_called_unshipped():
    from sepbench.claims.verdicts import ClaimVerdict, Outcome

    (claim,) = select(None, "il-tf-vs-recurrent")
    straddling = Outcome("TF-(1, 64) reaches >= 0.95 at two learning rates", INCONCLUSIVE)
    assert ClaimVerdict(claim, "cpu", INCONCLUSIVE, [straddling]).label == INCONCLUSIVE
    unshipped = Outcome("the same", INCONCLUSIVE, reasons=["no evidence shipped for the cpu scale"])
    assert ClaimVerdict(claim, "cpu", INCONCLUSIVE, [unshipped]).label == "inconclusive: no evidence shipped"


def test_at_the_cpu_scale_a_claim_trains_only_runs_its_conditions_read():
    from sepbench.claims.catalogue import group_at, in_group

    for claim in catalogue():
        if claim.kind == "theory":
            continue
        reads = []
        for condition in claim.conditions:
            lengths = condition.lengths_at("cpu")
            for name in ("a", "b", "group", "fast", "slow"):
                group = getattr(condition, name, None)
                if isinstance(group, (dict, list)):
                    reads.append((group_at(group, "cpu"), lengths))
        unread = [cfg for cfg in claim.configs("cpu")
                  if not any(in_group(cfg, group) and (lengths is None or cfg.task.length in lengths)
                             for group, lengths in reads)]
        assert not unread, (claim.id, sorted({(c.task.name, c.task.length, c.model.name, c.model.width)
                                              for c in unread}))


def test_a_claim_spec_that_searches_learning_rates_by_halving_is_trained_by_halving(tmp_path, monkeypatch):
    from sepbench.claims.catalogue import SpecRef
    from sepbench.claims.reproduce import judge

    loaded = SpecRef.load

    def halving(self, overrides=None):
        return loaded(self, overrides).model_copy(update={"lr_search": "halving", "lr_grid": [1e-2, 3e-3, 1e-3, 1e-4]})

    monkeypatch.setattr(SpecRef, "load", halving)
    (claim,) = select(None, "eq-one")
    store = Store(tmp_path / "s.db")
    smoke = {"train.steps": 8, "train.eval_every": 2, "train.eval_samples": 16}
    verdict = judge(claim, "quick", store, smoke)
    statuses = store.query().status.value_counts().to_dict()
    cells = len({(c.model.name, c.seed) for c in claim.configs("quick", smoke)})
    assert statuses.get("pruned", 0) == 2 * cells and sum(statuses.values()) == 4 * cells, statuses
    assert verdict.runs == 4 * cells and all(o.points for o in verdict.outcomes)
    assert all(len(p.values) == len({c.seed for c in claim.configs("quick", smoke)}) for o in verdict.outcomes
               for p in o.points)
    from sepbench.claims.reproduce import plan_claim

    assert plan_claim(claim, "quick", store, smoke).todo == []  # a pruned run answers the halving search
    again = judge(claim, "quick", store, smoke)
    assert len(store) == 4 * cells and again.verdict == verdict.verdict


def test_a_halving_claim_is_estimated_at_the_steps_its_search_plans(tmp_path, monkeypatch):
    from sepbench.claims.reproduce import plan_claim
    from sepbench.claims.tables import dry_run
    from sepbench.sweep import costs
    from sepbench.sweep.halving import planned_steps, schedule

    (claim,) = select(None, "dyck-depth")
    store = Store(tmp_path / "s.db")
    planned = plan_claim(claim, "cpu", store)
    lrs = {c.train.lr for c in planned.todo}
    assert len(lrs) == 7 and set(planned.shares) == {c.config_hash() for c in planned.todo}
    share = planned_steps(schedule(4000, 7, 2.0, 250, 2), 7) / (7 * 4000)
    assert all(abs(v - share) < 1e-12 for v in planned.shares.values()) and share < 0.45
    fixed = costs.ShapeCost(0.1, 1.0, "timed")
    monkeypatch.setattr(costs, "timed_cost", lambda cfg: fixed)
    full = sum(fixed.run_seconds(c) for c in planned.todo)
    result = dry_run([planned], store)
    assert abs(result.total.seconds - share * full) < 1e-6 * full
    assert "of a successive-halving search, at the steps it plans" in result.rows[0][-1]


def test_the_progress_workload_of_a_search_is_its_planned_steps_less_what_stored_runs_and_checkpoints_hold(tmp_path):
    from sepbench.claims.reproduce import plan_claim, workload
    from sepbench.sweep.halving import group_cells, planned_steps, schedule

    (claim,) = select(None, "dyck-depth")
    store = Store(tmp_path / "s.db")
    cells = group_cells(plan_claim(claim, "cpu", store).todo)
    per_cell = planned_steps(schedule(4000, 7, 2.0, 250, 2), 7) * 3  # seven rates, three seeds

    def left(cell: list) -> float:
        found = workload([plan_claim(claim, "cpu", store)], store)
        hashes = {cfg.config_hash() for cfg in cell}
        return sum(c.steps_left for c in found.cells if set(c.runs) <= hashes)

    first, other = cells[0], cells[1]
    assert left(first) == pytest.approx(per_cell) and left(other) == pytest.approx(per_cell)
    cut = [cfg for cfg in first if cfg.train.lr == first[0].train.lr]
    for cfg in cut:
        store.put(RunResult(config=cfg, config_hash=cfg.config_hash(), status="pruned", steps=500,
                            metrics={"accuracy": 0.5}))
    resuming = next(cfg for cfg in first if cfg not in cut)
    store.put_running(RunResult(config=resuming, config_hash=resuming.config_hash(), status="completed", steps=750))
    store.checkpoints.mkdir()
    (store.checkpoints / f"{resuming.config_hash()}.pt").write_bytes(b"")
    found = workload([plan_claim(claim, "cpu", store)], store)
    assert found.resumed_at[resuming.config_hash()] == 750
    assert left(first) == pytest.approx(per_cell - 3 * 500 - 750) and left(other) == pytest.approx(per_cell)
    assert not any(cut[0].config_hash() in c.runs for c in found.cells)


def test_a_dry_run_says_whether_the_runs_to_train_fit_the_cpu_scales_core_hour_targets(tmp_path, monkeypatch):
    from sepbench.claims.reproduce import plan_claim
    from sepbench.claims.tables import dry_run
    from sepbench.sweep import costs

    store = Store(tmp_path / "s.db")
    plans = [plan_claim(c, "cpu", store) for c in select(None, "dyck-depth") + select(None, "yang-lis-sparse-rising")]
    unit = costs.ShapeCost(1.0, 0.0, "timed")
    monkeypatch.setattr(costs, "timed_cost", lambda cfg: unit)
    seconds = dry_run(plans, store).claim_seconds  # at one second a step
    dyck, lis = seconds["dyck-depth"], seconds["yang-lis-sparse-rising"]

    def verdict(step: float) -> str:
        monkeypatch.setattr(costs, "timed_cost", lambda cfg: costs.ShapeCost(step, 0.0, "timed"))
        return dry_run(plans, store).against_targets("cpu")

    larger, smaller = sorted([("dyck-depth", dyck), ("yang-lis-sparse-rising", lis)], key=lambda c: -c[1])
    assert verdict(5.0 * 3600 / larger[1]).endswith("the runs still to train fit both")
    one_past = verdict(7.0 * 3600 / larger[1])
    assert smaller[1] * 7.0 / larger[1] <= 6.0
    assert one_past.startswith("the cpu scale aims at <= 6 core-hours a claim and <= 30 in all")
    assert one_past.endswith(f"do not fit: past 6 a claim: {larger[0]} 7.00")
    step = 32.0 * 3600 / (dyck + lis)  # past 6 each and past 30 in all
    assert verdict(step).endswith(f"past 6 a claim: dyck-depth {step * dyck / 3600:.2f}, yang-lis-sparse-rising "
                                  f"{step * lis / 3600:.2f}; 32.00 in all, past 30")
    assert dry_run(plans, store).against_targets("quick") is None
    dry = runner.invoke(app, ["reproduce", "--scale", "cpu", "--claim", "dyck-depth", "--dry-run", "--store",
                              str(tmp_path / "t.db")], terminal_width=400)
    assert dry.exit_code == 0 and "the cpu scale aims at <= 6 core-hours a claim" in dry.stdout


def test_with_model_skips_a_claim_not_run_at_the_scale_with_a_note(tmp_path):
    placed = runner.invoke(app, ["reproduce", "--scale", "cpu", "--claim", "yang-ed-local", "--with-model", "lstm",
                                 "--dry-run", "--store", str(tmp_path / "s.db")], terminal_width=300)
    assert placed.exit_code == 0, placed.output
    assert "yang-ed-local is not run at the cpu scale" in placed.stderr and "0 claims at the cpu scale" in placed.stdout


def test_with_model_does_not_ask_for_the_report_folder_it_never_writes(tmp_path, monkeypatch):
    monkeypatch.chdir("/proc")  # the default --out, reports/reproduction, cannot be made here
    placed = runner.invoke(app, ["reproduce", "--scale", "cpu", "--claim", "yang-ed-local", "--with-model", "lstm",
                                 "--store", str(tmp_path / "s.db")], terminal_width=300)
    assert placed.exit_code == 0 and "0 claims at the cpu scale" in placed.stdout, placed.output


def test_the_grid_runs_of_several_claims_train_as_one_sweep(tmp_path, monkeypatch):
    from sepbench.claims import reproduce

    sweeps: list[set[str]] = []
    real_sweep = reproduce.run_sweep

    def recorded(configs, *args, **kwargs):
        sweeps.append({cfg.config_hash() for cfg in configs})
        return real_sweep(configs, *args, **kwargs)

    monkeypatch.setattr(reproduce, "run_sweep", recorded)
    claims = select(None, ["dyck-one-layer-short", "il-tf-vs-recurrent"])
    smoke = {"train.steps": 4, "train.eval_every": 2, "train.eval_samples": 16, "model.width": 8}
    store = Store(tmp_path / "s.db")
    verdicts = reproduce.judge_all(claims, "quick", store, smoke)
    wanted = {cfg.config_hash() for claim in claims for cfg in claim.configs("quick", smoke)}
    # one sweep over both claims' runs, so that its workers (one here) are shared between them
    assert sweeps == [wanted] and len(store) == len(wanted) == 24
    assert {v.claim.id: v.runs for v in verdicts} == {"dyck-one-layer-short": 6, "il-tf-vs-recurrent": 18}
