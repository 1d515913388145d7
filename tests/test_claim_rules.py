"""The verdict rules added for faithful claims: rates of learning, runs still learning, O(log N) widths, growth
orders, and the exploratory claims kept out of the tally."""
from __future__ import annotations

import pytest

from sepbench.claims import select
from sepbench.claims.evaluate import evaluate_runs
from sepbench.claims.series_rules import evaluate_series
from sepbench.claims.verdicts import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, ClaimVerdict, combine
from sepbench.claims.learning import trend
from sepbench.claims.report import draw, tally
from sepbench.config import RunConfig
from sepbench.store import Store
from sepbench.train.result import EvalPoint, RunResult

EVAL = {"train.eval_samples": 1000}


@pytest.fixture(autouse=True)
def on_a_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The schedules under test are the CPU's (one run to a stack): ``device: auto`` resolves to the CPU even
    where CUDA is visible, here and in any process started from here."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def _run(cfg, points, status="completed"):
    """A stored run with its curve: ``points`` are (step, accuracy, loss)."""
    curve = [EvalPoint(step=s, accuracy=a, loss=l, seconds=0.0) for s, a, l in points]
    final = {"accuracy": points[-1][1]} if status in ("completed", "solved") else {}
    return RunResult(config=cfg, config_hash=cfg.config_hash(), status=status, metrics=final, curve=curve,
                     steps=points[-1][0], wall_seconds=1.0)


def _evaluate(tmp_path, claim_id, make_run, two_sided=False):
    """The claim's quick-scale verdicts on runs ``make_run`` builds; ``two_sided`` judges its conditions as if the
    quick grid reached the sizes the text names (no ``one_sided`` gate), to test a rule on a claim that has one."""
    (claim,) = select(None, claim_id)
    if two_sided:
        claim = claim.model_copy(update={"conditions": [c.model_copy(update={"one_sided": None})
                                                        for c in claim.conditions]})
    configs = claim.configs("quick", EVAL)
    store = Store(tmp_path / "s.db")
    for cfg in configs:
        store.put(make_run(cfg))
    return claim, evaluate_runs(claim, "quick", configs, {r.config_hash: r for r in store.results()})


STEPS = [250, 500, 750, 1000, 1250, 1500]
RISING = [(s, 0.3 + 0.1 * i, 1.0 - 0.1 * i) for i, s in enumerate(STEPS)]
FLAT = [(s, 0.8, 0.45) for s in STEPS]
NOISY_FLAT = [(s, 0.8 + (0.05 if i % 2 else -0.05), 0.45 + (0.03 if i % 2 else -0.03)) for i, s in enumerate(STEPS)]


def test_trend_on_stored_curves(tmp_path):
    (claim,) = select(None, "dyck-depth")
    cfg = claim.configs("quick", EVAL)[0]
    rising = trend(_run(cfg, RISING))
    assert rising.learning and rising.slope == pytest.approx(0.1 / 250)
    assert rising.steps_to(0.95) == pytest.approx(1500 + 0.15 / (0.1 / 250))
    assert not trend(_run(cfg, FLAT)).learning
    assert not trend(_run(cfg, NOISY_FLAT)).learning
    assert trend(_run(cfg, RISING, status="diverged")) is None
    assert trend(_run(cfg, RISING[:2])) is None  # too few evaluations to tell


@pytest.mark.parametrize("curve, verdict", [(RISING, INCONCLUSIVE), (FLAT, NOT_REPRODUCED),
                                            (NOISY_FLAT, NOT_REPRODUCED), ("diverged", INCONCLUSIVE),
                                            (FLAT[-2:], INCONCLUSIVE)])
def test_a_run_still_learning_makes_not_reproduced_inconclusive(tmp_path, curve, verdict):
    def make(cfg):
        if cfg.model.name == "lstm":
            return _run(cfg, [(250, 0.6, 0.5), (500, 0.99, 0.01)], status="solved")
        if cfg.model.layers == 1:
            return _run(cfg, [(s, 0.5, 0.69) for s in STEPS])
        return _run(cfg, RISING, status="diverged") if curve == "diverged" else _run(cfg, curve)

    claim, (deep, shallow) = _evaluate(tmp_path, "dyck-depth", make)
    assert shallow.verdict == REPRODUCED
    assert deep.verdict == verdict, deep.reasons
    label = ClaimVerdict(claim, "quick", combine([deep.verdict, shallow.verdict]), [deep, shallow]).label
    if curve is RISING:
        assert label == "inconclusive: still learning at 1500 steps"
        assert any("0.95 needs ~1,875 steps" in r for r in deep.reasons), deep.reasons
    if curve == "diverged":
        assert any("diverged" in r for r in deep.reasons) and label == INCONCLUSIVE
    if curve == FLAT[-2:]:  # a smoke test's budget: two evaluations cannot show a plateau
        assert label == "inconclusive: too few evaluations to tell whether the runs stopped learning"
        assert any("2 evaluations in 1500 steps, at least 3 needed" in r for r in deep.reasons), deep.reasons


@pytest.mark.parametrize("curve, verdict", [(RISING, INCONCLUSIVE), (FLAT, REPRODUCED), (NOISY_FLAT, REPRODUCED)])
def test_a_run_still_rising_on_the_side_that_must_stay_below_makes_reproduced_inconclusive(tmp_path, curve, verdict):
    """TF-(1, 256) must stay below 0.95 on Dyck: at 0.8 and rising it has not shown that it cannot get there."""
    def make(cfg):
        if cfg.model.name == "lstm" or cfg.model.layers == 2:
            return _run(cfg, [(250, 0.6, 0.5), (500, 0.99, 0.01)], status="solved")
        return _run(cfg, curve)

    claim, (deep, shallow) = _evaluate(tmp_path, "dyck-depth", make)
    assert deep.verdict == REPRODUCED and shallow.verdict == verdict, shallow.reasons
    if curve is RISING:
        assert any("still learning at 1500 steps" in r and "on the side that must stay below 0.95" in r
                   for r in shallow.reasons), shallow.reasons
        assert ClaimVerdict(claim, "quick", INCONCLUSIVE, [deep, shallow]).label == (
            "inconclusive: still learning at 1500 steps")


@pytest.mark.parametrize("mamba_rises", [True, False])
def test_a_compare_waits_on_its_losing_side_still_rising_toward_the_margin(tmp_path, mamba_rises):
    def make(cfg):
        if cfg.model.name == "transformer":
            return _run(cfg, [(250, 0.6, 0.5), (500, 0.99, 0.01)], status="solved")
        return _run(cfg, [(s, 0.2 + 0.05 * i, 1.0 - 0.1 * i) for i, s in enumerate(STEPS)]
                    if mamba_rises else [(s, 0.2, 2.0) for s in STEPS])

    _, (outcome,) = _evaluate(tmp_path, "mamba-wide-vs-transformer", make, two_sided=True)
    assert outcome.verdict == (INCONCLUSIVE if mamba_rises else REPRODUCED), outcome.reasons
    if mamba_rises:  # Mamba at 0.45 must stay below 0.99 - 0.3
        assert any("on the side that must stay below 0.69" in r for r in outcome.reasons), outcome.reasons


@pytest.mark.parametrize("mamba, verdict", [(0.2, INCONCLUSIVE), (0.9, NOT_REPRODUCED)])
def test_a_grid_short_of_the_texts_width_decides_only_the_verdict_it_can_show(tmp_path, mamba, verdict):
    """L886 is about Mamba at width 1024; the quick grid ends at 64. Mamba far behind at 64 does not show it far
    behind at 1024 (its accuracy rises with width), but Mamba close at 64 is close at 1024 too."""
    def make(cfg):
        if cfg.model.name == "transformer":
            return _run(cfg, [(250, 0.6, 0.5), (500, 0.99, 0.01)], status="solved")
        return _run(cfg, [(s, mamba, 2.0) for s in STEPS])

    claim, (outcome,) = _evaluate(tmp_path, "mamba-wide-vs-transformer", make)
    assert outcome.verdict == verdict, outcome.reasons
    if verdict == INCONCLUSIVE:
        assert any("short of the text's 1024" in r for r in outcome.reasons), outcome.reasons
        assert ClaimVerdict(claim, "quick", INCONCLUSIVE, [outcome]).label == (
            "inconclusive: this scale stops short of the size the text names")


def test_a_grid_short_of_the_texts_width_says_which_verdict_more_steps_could_bring(tmp_path):
    """Mamba still rising toward the margin: more steps at width 64 could refute L886, never reproduce it."""
    def make(cfg):
        if cfg.model.name == "transformer":
            return _run(cfg, [(250, 0.6, 0.5), (500, 0.99, 0.01)], status="solved")
        return _run(cfg, [(s, 0.2 + 0.05 * i, 1.0 - 0.1 * i) for i, s in enumerate(STEPS)])

    claim, (outcome,) = _evaluate(tmp_path, "mamba-wide-vs-transformer", make)
    assert outcome.verdict == INCONCLUSIVE, outcome.reasons
    assert any("on the side that must stay below 0.69" in r for r in outcome.reasons), outcome.reasons
    assert any("short of the text's 1024" in r and "can make it not reproduced here, and only the text's size can "
               "make it reproduced" in r for r in outcome.reasons), outcome.reasons
    assert ClaimVerdict(claim, "quick", INCONCLUSIVE, [outcome]).label.startswith("inconclusive: still learning at")


LONG = [250 * k for k in range(1, 17)]
LEAVING_CHANCE = [(s, 0.5 + max(0, s - 2750) / 5000, 0.69 - max(0, s - 2750) / 5000) for s in LONG]  # 0.75 at 4000
_DIP = {3000: 0.40, 3250: 0.45, 3500: 0.50, 3750: 0.55, 4000: 0.56}
DIP_AT_CHANCE = [(s, _DIP.get(s, 0.5), 0.69 + 0.1 * (0.5 - _DIP.get(s, 0.5))) for s in LONG]  # the loss moves with it


@pytest.mark.parametrize("other_rate, verdict", [(LEAVING_CHANCE, INCONCLUSIVE), (DIP_AT_CHANCE, NOT_REPRODUCED)])
def test_another_rate_leaving_its_level_may_overtake_the_pick_so_not_reproduced_waits(tmp_path, other_rate, verdict):
    """TF-(2, 64) must reach 0.95: its picked rate (1e-3) is flat at 0.8; at 5e-3 one seed is still rising. It may
    overtake the pick only if its loss falls too: a dip and recovery at chance does not count."""
    (claim,) = select(None, "dyck-depth")
    cfg = claim.configs("quick", EVAL)[0]
    assert trend(_run(cfg, LEAVING_CHANCE)).leaving_its_level
    assert trend(_run(cfg, DIP_AT_CHANCE)).rising and not trend(_run(cfg, DIP_AT_CHANCE)).leaving_its_level

    def make(cfg):
        if cfg.model.name == "lstm":
            return _run(cfg, [(250, 0.6, 0.5), (500, 0.99, 0.01)], status="solved")
        if cfg.model.layers == 1:
            return _run(cfg, [(s, 0.5, 0.69) for s in LONG])
        if cfg.train.lr == 0.001:
            return _run(cfg, [(s, 0.8, 0.45) for s in LONG])
        return _run(cfg, other_rate if cfg.seed == 0 else [(s, 0.5, 0.69) for s in LONG])

    _, (deep, shallow) = _evaluate(tmp_path, "dyck-depth", make)
    assert shallow.verdict == REPRODUCED and deep.verdict == verdict, deep.reasons
    assert "lr 0.001" in deep.evidence[0]
    if verdict == INCONCLUSIVE:
        assert any("still learning at 4000 steps" in r and "lr 0.005 seed 0" in r for r in deep.reasons), deep.reasons


@pytest.mark.parametrize("rising_member, verdict", [("mamba", INCONCLUSIVE), ("dss", NOT_REPRODUCED)])
def test_with_pick_worst_only_the_picked_members_other_rates_may_overtake(tmp_path, rising_member, verdict):
    """Eq-random's worst of TF, DSS and Mamba must reach 0.95: Mamba, the worst, is flat at 0.8 at lr 1e-3; a rate
    of Mamba's still leaving its level may lift it, one of DSS (already above Mamba) cannot lift the worst."""
    def make(cfg):
        if cfg.model.name in ("transformer", "dss") and not (cfg.model.name == rising_member and cfg.train.lr == 0.005):
            return _run(cfg, [(250, 0.6, 0.5), (500, 0.99, 0.01)], status="solved")
        if cfg.model.name == rising_member and cfg.train.lr == 0.005:
            return _run(cfg, LEAVING_CHANCE if cfg.seed == 0 else [(s, 0.5, 0.69) for s in LONG])
        if cfg.model.name == "mamba":
            return _run(cfg, [(s, 0.8, 0.45) for s in LONG])
        return _run(cfg, [(s, 0.5, 0.69) for s in LONG])

    _, (worst, _) = _evaluate(tmp_path, "eq-random", make)
    assert "mamba-(1, 64) lr 0.001" in worst.evidence[0], worst.evidence
    assert worst.verdict == verdict, worst.reasons


@pytest.mark.parametrize("wide_rises", [True, False])
def test_a_compare_below_waits_on_its_a_side_still_rising_toward_b_plus_the_margin(tmp_path, wide_rises):
    """mamba-width's LSTM at the wider width must not beat the narrower by 0.1: at 0.03-0.08 and learning it may."""
    def make(cfg):
        if cfg.model.name == "mamba":
            return _run(cfg, [(s, 0.2 if cfg.model.width == 16 else 0.5, 1.0) for s in LONG])
        if cfg.model.width == 64 and wide_rises and cfg.train.lr == 0.001:
            return _run(cfg, [(s, 0.03 + max(0, s - 2750) / 25000, 4.0 - max(0, s - 2750) / 1000) for s in LONG])
        return _run(cfg, [(s, 0.02, 4.1) for s in LONG])

    _, (_, no_gain, _) = _evaluate(tmp_path, "mamba-width", make, two_sided=True)
    assert no_gain.verdict == (INCONCLUSIVE if wide_rises else REPRODUCED), no_gain.reasons
    if wide_rises:
        assert any("on the side that must stay below 0.12" in r for r in no_gain.reasons), no_gain.reasons


def test_a_run_already_past_the_line_does_not_make_a_straddle_still_learning(tmp_path):
    def make(cfg):
        if cfg.model.name == "transformer":  # seed 0 rises past the 0.7 the margin needs; the others stay flat below
            return _run(cfg, [(s, 0.4 + 0.08 * i, 1.0 - 0.1 * i) for i, s in enumerate(STEPS)] if cfg.seed == 0 else
                        [(s, 0.6, 0.5) for s in STEPS])
        return _run(cfg, [(s, 0.4, 0.8) for s in STEPS])

    claim, (outcome,) = _evaluate(tmp_path, "mamba-wide-vs-transformer", make)
    assert outcome.verdict == INCONCLUSIVE
    assert ClaimVerdict(claim, "quick", INCONCLUSIVE, [outcome]).label == (
        "inconclusive: seeds straddle the line, no deciding run still learning"), outcome.reasons


def test_the_budget_named_is_the_one_the_slowest_rising_run_needs(tmp_path):
    from sepbench.claims.learning import learning_reason

    (claim,) = select(None, "dyck-depth")
    cfgs = claim.configs("quick", EVAL)[:3]
    slow = [(s, 0.3 + 0.02 * i, 1.0 - 0.1 * i) for i, s in enumerate(STEPS)]  # +0.02 per 250 steps
    falling_loss_only = [(s, 0.3, 1.0 - 0.1 * i) for i, s in enumerate(STEPS)]
    runs = [_run(cfgs[0], RISING), _run(cfgs[1], slow), _run(cfgs[2], falling_loss_only)]
    reason = learning_reason(runs, 0.95)
    assert f"seed {cfgs[1].seed}:" in reason and "0.95 needs ~8,375 steps" in reason, reason
    assert "1 more with loss falling, accuracy not rising" in reason
    only_flat = learning_reason(runs[2:], 0.95)
    assert "a budget the accuracy slope cannot tell" in only_flat, only_flat


def test_a_budget_read_off_a_gain_within_the_noise_says_it_is_a_rough_guide():
    from sepbench.claims.learning import learning_reason

    (claim,) = select(None, "dyck-depth")
    cfg = claim.configs("quick", EVAL)[0]
    creeping = [(s, 0.80 + 0.002 * i, 1.0 - 0.1 * i) for i, s in enumerate(STEPS)]  # loss falls, accuracy barely moves
    creeping_trend = trend(_run(cfg, creeping))
    assert creeping_trend.learning and not creeping_trend.rising and creeping_trend.steps_to(0.95) is not None
    assert "read off a gain within its noise: a rough guide" in learning_reason([_run(cfg, creeping)], 0.95)
    assert "rough guide" not in learning_reason([_run(cfg, RISING)], 0.95)


@pytest.mark.parametrize("curve, label", [(FLAT, "inconclusive: seeds straddle the line, no deciding run still learning"),
                                          (RISING, "inconclusive: still learning at 1500 steps")])
def test_seeds_on_both_sides_of_a_level_say_why_the_claim_is_undecided(tmp_path, curve, label):
    def make(cfg):
        if cfg.model.name == "lstm" or (cfg.model.layers == 2 and cfg.seed == 0):
            return _run(cfg, [(250, 0.6, 0.5), (500, 0.99, 0.01)], status="solved")
        if cfg.model.layers == 1:
            return _run(cfg, [(s, 0.5, 0.69) for s in STEPS])
        return _run(cfg, curve)

    claim, (deep, shallow) = _evaluate(tmp_path, "dyck-depth", make)
    assert deep.verdict == INCONCLUSIVE and shallow.verdict == REPRODUCED
    assert ClaimVerdict(claim, "quick", INCONCLUSIVE, [deep, shallow]).label == label
    if curve is FLAT:
        assert any("seeds straddle 0.95 (0.8000 to 0.9900)" in r for r in deep.reasons), deep.reasons


@pytest.mark.parametrize("wide, narrow, verdict", [(("solved", 0.905), 0.874, INCONCLUSIVE),
                                                   (("completed", 0.905), 0.874, NOT_REPRODUCED),
                                                   (("solved", 0.95), 0.6, REPRODUCED)])
def test_a_side_that_stopped_early_short_of_the_line_leaves_the_verdict_open(tmp_path, wide, narrow, verdict):
    """yang-lis-sparse-rising's runs stop at 0.9: a wide width stopped there cannot show the 0.1 it must gain on a
    narrow one at 0.874, where one that trained its whole budget and ended there does."""
    def make(cfg):
        if cfg.model.width == 32:
            return _run(cfg, [(s, narrow, 0.3) for s in STEPS])
        status, reached = wide
        return _run(cfg, [(s, reached if s == STEPS[-1] or status == "completed" else 0.7, 0.2) for s in STEPS],
                    status=status)

    claim, (rising,) = _evaluate(tmp_path, "yang-lis-sparse-rising", make)
    assert rising.verdict == verdict, rising.reasons
    stopped = [r for r in rising.reasons if "stopped early at train.threshold 0.9, short of the line 0.974" in r]
    assert len(stopped) == (2 if verdict == INCONCLUSIVE else 0), rising.reasons
    if verdict == INCONCLUSIVE:
        assert stopped[0].startswith("N=6: 3 seeds of ") and "(train them with a higher train.threshold)" in stopped[0]
        label = ClaimVerdict(claim, "quick", INCONCLUSIVE, [rising]).label
        assert label == "inconclusive: seeds stopped early at their train.threshold, short of the line"


@pytest.mark.parametrize("sparse_seeds, verdict", [((0.95, 0.92, 0.5), REPRODUCED), ((0.95, 0.5, 0.5), NOT_REPRODUCED)])
def test_a_level_with_seeds_needed_asks_k_of_the_seeds_of_its_worst_member(tmp_path, sparse_seeds, verdict):
    """Yang's "solved" (2 of 3 seeds at 0.9). Linear, at 0.91 on two seeds and 0 on the third, has the lowest
    mean but is solved; Sparse with one seed at the level is the worst member by its second-best seed."""
    def make(cfg):
        accuracy = {"sparse_transformer": sparse_seeds, "linear_transformer": (0.91, 0.91, 0.0)}.get(
            cfg.model.name, (0.95, 0.95, 0.95))[cfg.seed]
        return _run(cfg, [(s, accuracy, 0.2) for s in STEPS])

    _, (outcome,) = _evaluate(tmp_path, "yang-arithmetic-512", make, two_sided=True)
    assert outcome.verdict == verdict, outcome.reasons
    if verdict == NOT_REPRODUCED:
        assert all("sparse_transformer-(3, 96)" in e for e in outcome.evidence), outcome.evidence


def test_a_rate_claim_waits_on_a_transformer_rate_the_search_cut_on_a_tie(tmp_path):
    """Every trained TF rate plateaus at 0.9, short of 0.95; lr 5e-3 was cut at step 500 level with lr 1e-3:
    it might have reached 0.95, so 'the Transformer never reaches it' is not decided."""
    def make(cfg):
        if cfg.model.name != "transformer":
            return _run(cfg, [(s, 0.1, 3.0) for s in range(250, 2750, 250)])
        if cfg.train.lr == 0.005:
            return _run(cfg, [(250, 0.5, 0.7), (500, 0.5, 0.7)], status="pruned")
        return _run(cfg, [(s, 0.5, 0.7) for s in range(250, 1250, 250)]
                    + [(s, 0.9, 0.3) for s in range(1250, 2750, 250)])

    _, (_, rate) = _evaluate(tmp_path / "fast", "il-tf-vs-recurrent", make)
    assert rate.verdict == INCONCLUSIVE, (rate.evidence, rate.reasons)
    assert any("the rate search cut transformer-(1, 64) lr 0.005 at step 500" in r for r in rate.reasons), rate.reasons
    assert rate.waits_on

    def recurrent_cut(cfg):  # the Transformer solves at 250 steps; an LSTM rate cut level with the kept one
        if cfg.model.name == "lstm" and cfg.train.lr == 0.005:
            return _run(cfg, [(250, 0.1, 3.0), (500, 0.1, 3.0)], status="pruned")
        return _rate_runs(250, lstm_learns=False)(cfg)

    _, (_, rate) = _evaluate(tmp_path / "slow", "il-tf-vs-recurrent", recurrent_cut)
    assert rate.verdict == INCONCLUSIVE and any("cut lstm-(1, 64) lr 0.005" in r for r in rate.reasons), rate.reasons


@pytest.mark.parametrize("tf, mamba, verdict, decides", [
    (0.96, (0.999, 0.999, 0.90), INCONCLUSIVE, "mamba-(1, 64)"),  # Mamba's mean is the highest, one seed short
    (0.96, (0.97, 0.97, 0.97), REPRODUCED, "0.960"),
    (0.94, (0.5, 0.999, 0.999), NOT_REPRODUCED, "transformer-(1, 64)"),  # TF short on every seed, Mamba's mean lower
])
def test_the_worst_member_is_the_one_whose_seeds_decide_not_the_lowest_mean(tmp_path, tf, mamba, verdict, decides):
    """'The worst of TF, DSS and Mamba reaches 0.95' needs every member on every seed: the member read is the one
    whose seeds decide that, not the one of lowest mean."""
    def make(cfg):
        accuracy = {"transformer": (tf,) * 3, "dss": (0.96,) * 3, "mamba": mamba}.get(cfg.model.name, (0.5,) * 3)
        return _run(cfg, [(s, accuracy[cfg.seed], 0.2) for s in STEPS])

    _, (worst, *_) = _evaluate(tmp_path, "eq-random", make)
    assert worst.verdict == verdict and decides in worst.evidence[0], (worst.evidence, worst.reasons)


def test_a_wider_width_still_learning_where_a_narrower_one_solves_does_not_make_the_claim_wait(tmp_path):
    """Every model solves every size at widths 32 and 64; width 96 is short and rising. Whatever 96 does, the
    smallest solving width stays {below the grid, 32} on both sides: a tie only a narrower grid can order."""
    def make(cfg):
        if cfg.model.width < 96:
            return _run(cfg, [(250, 0.5, 0.6), (500, 0.95, 0.1)], status="solved")
        return _run(cfg, [(s, 0.2 + 0.2 * k, 1.0 - 0.2 * k) for k, s in enumerate((500, 1000, 1500, 2000))])

    claim, outcomes = _evaluate(tmp_path, "yang-efficient-larger", make)
    assert all(o.verdict == INCONCLUSIVE for o in outcomes)
    assert not any("still learning" in r for o in outcomes for r in o.reasons), [o.reasons for o in outcomes]
    assert ClaimVerdict(claim, "quick", INCONCLUSIVE, outcomes).label == (
        "inconclusive: tied at the grid's smallest width, which no budget orders")


def test_seeds_needed_is_for_a_level_that_must_be_reached():
    from pydantic import ValidationError

    from sepbench.claims.catalogue import Level
    from sepbench.claims.verdicts import level_verdict

    assert level_verdict([0.95, 0.92, 0.5], 0.9, seeds_needed=2) == REPRODUCED
    assert level_verdict([0.95, 0.5, 0.5], 0.9, seeds_needed=2) == NOT_REPRODUCED
    with pytest.raises(ValidationError, match="seeds_needed applies to direction at_least only"):
        Level(kind="level", text="t", group={}, threshold=0.9, direction="below", seeds_needed=2)


def _rate_runs(fast_step: int, lstm_learns: bool, slow_lr_fails: bool = False):
    def make(cfg):
        if cfg.model.name == "transformer":
            if slow_lr_fails and cfg.train.lr == 0.005:
                return _run(cfg, [(s, 0.5, 0.7) for s in range(250, 2750, 250)])
            return _run(cfg, [(s, 0.5, 0.7) for s in range(250, fast_step, 250)] + [(fast_step, 0.99, 0.01)],
                        status="solved")
        if cfg.model.name == "lstm" and lstm_learns:
            return _run(cfg, [(s, 0.1, 3.0) for s in range(250, 2000, 250)] + [(2000, 0.97, 0.1)], status="solved")
        return _run(cfg, [(s, 0.1, 3.0) for s in range(250, 2750, 250)])
    return make


def test_rate_claim_reads_the_recurrent_curves_at_k_times_the_transformers_steps(tmp_path):
    _, (level, rate) = _evaluate(tmp_path / "a", "il-tf-vs-recurrent", _rate_runs(250, lstm_learns=False))
    assert (level.verdict, rate.verdict) == (REPRODUCED, REPRODUCED), rate.reasons
    assert "T = 250 steps" in rate.evidence[0] and "10 x T = 2500 steps" in rate.evidence[0]
    _, (_, rate) = _evaluate(tmp_path / "b", "il-tf-vs-recurrent", _rate_runs(250, lstm_learns=True))
    assert rate.verdict == NOT_REPRODUCED and "lstm-(1, 64)" in rate.evidence[0]
    _, (_, rate) = _evaluate(tmp_path / "c", "il-tf-vs-recurrent", _rate_runs(500, lstm_learns=False))
    assert rate.verdict == INCONCLUSIVE
    assert any("stopped at 2500 steps, before 10 x T = 5000" in r for r in rate.reasons), rate.reasons
    _, (level, _) = _evaluate(tmp_path / "d", "il-tf-vs-recurrent", _rate_runs(250, False, slow_lr_fails=True))
    assert level.verdict == NOT_REPRODUCED and "2nd best of 2 lr" in level.evidence[0]


def test_a_rate_claim_whose_slow_seeds_straddle_the_line_says_so(tmp_path):
    def make(cfg):
        return _rate_runs(250, lstm_learns=cfg.model.name == "lstm" and cfg.seed == 0)(cfg)

    claim, (_, rate) = _evaluate(tmp_path, "il-tf-vs-recurrent", make)
    assert rate.verdict == INCONCLUSIVE
    assert any("seeds straddle 0.95 at 10 x T (0.1000 to 0.9700)" in r for r in rate.reasons), rate.reasons
    assert ClaimVerdict(claim, "quick", INCONCLUSIVE, [rate]).label.endswith("seeds straddle the line, no deciding "
                                                                             "run still learning")


def test_a_rate_claim_reads_the_whole_set_accuracy_where_k_times_t_is_the_recurrent_runs_end(tmp_path):
    """At 10 x T = 2500, the recurrent runs' last step, the final accuracy (every evaluation example) is read, not
    the last curve point (which the adaptive budget may have scored on 256 examples)."""
    def make(cfg):
        run = _rate_runs(250, lstm_learns=False)(cfg)
        if cfg.model.name != "transformer":
            run.metrics["accuracy"] = 0.125 + 0.001 * cfg.seed  # the curve's last point reads 0.1
        return run

    _, (_, rate) = _evaluate(tmp_path, "il-tf-vs-recurrent", make)
    assert rate.verdict == REPRODUCED and "0.126 [0.125, 0.127]" in rate.evidence[0], rate.evidence


def test_a_rate_claim_bounds_the_fast_sides_steps_where_the_text_does(tmp_path):
    (claim,) = select(None, "il-tf-vs-recurrent")
    rate = claim.conditions[1]
    assert rate.fast_within == 10000  # "within a few thousand steps" (L196)
    bounded = claim.model_copy(update={"conditions": [rate.model_copy(update={"fast_within": 500})]})
    configs = bounded.configs("quick", EVAL)

    def judge(folder, make_run):
        store = Store(tmp_path / folder / "s.db")
        for cfg in configs:
            store.put(make_run(cfg))
        (outcome,) = evaluate_runs(bounded, "quick", configs, {r.config_hash: r for r in store.results()})
        return outcome

    assert judge("fast", _rate_runs(250, lstm_learns=False)).verdict == REPRODUCED
    late = judge("late", _rate_runs(500, lstm_learns=False))
    assert late.verdict == NOT_REPRODUCED and "reaches it at T = 500 steps (slowest seed): not below 500" in late.evidence[0]

    def never(cfg):
        return _run(cfg, [(s, 0.5, 0.7) for s in range(250, 2750, 250)])

    missed = judge("never", never)
    assert missed.verdict == NOT_REPRODUCED and "never reaches it: not below 500 steps" in missed.evidence[0]


def test_log_growth_of_a_constructions_width():
    (claim,) = select(None, "construct-index-lookup")
    accuracy = {64: [1.0] * 3, 1024: [1.0] * 3}
    exact, logarithmic, unmeasured = evaluate_series(claim, "quick", {"accuracy": accuracy,
                                                                     "model width": {64: [40.0] * 3, 1024: [70.0] * 3}})
    assert unmeasured.verdict == INCONCLUSIVE  # no precision series
    assert (exact.verdict, logarithmic.verdict) == (REPRODUCED, REPRODUCED)
    _, linear, _ = evaluate_series(claim, "quick", {"accuracy": accuracy, "model width": {64: [40.0] * 3,
                                                                                         1024: [400.0] * 3}})
    assert linear.verdict == NOT_REPRODUCED and "x6.00" in linear.evidence[-1]
    assert "N^a with a <= 0.43 would pass too" in logarithmic.evidence[-1]
    short = {"accuracy": {64: [1.0] * 3, 512: [1.0] * 3}, "model width": {64: [40.0] * 3, 512: [400.0] * 3}}
    _, unspanned, _ = evaluate_series(claim, "quick", short)
    assert unspanned.verdict == INCONCLUSIVE and "span x8, under the x16" in unspanned.reasons[0]


@pytest.mark.parametrize("lis_large, verdict", [(96, REPRODUCED), (64, NOT_REPRODUCED)])
def test_growth_order_compares_growth_factors_across_tasks(tmp_path, lis_large, verdict):
    need = {("edit_distance", 4): 64, ("edit_distance", 6): 64, ("lis", 6): 64, ("lis", 14): lis_large}

    def make(cfg):
        solved = cfg.model.width >= need.get((cfg.task.name, cfg.task.length), 999)
        if solved:
            return _run(cfg, [(2000, 0.95, 0.5)], status="solved")
        return _run(cfg, [(s, 0.3, 0.5) for s in (500, 1000, 1500, 2000)])

    _, (order,) = _evaluate(tmp_path, "yang-locality-order", make)
    assert order.verdict == verdict, order.evidence + order.reasons


def test_two_widths_beyond_the_grid_have_no_order():
    from sepbench.claims.verdicts import INF, at_most_verdict, order_verdict

    assert order_verdict([INF], [96, INF]) == INCONCLUSIVE and at_most_verdict([96, INF], [INF]) == INCONCLUSIVE
    assert order_verdict([64], [INF]) == REPRODUCED and order_verdict([INF], [64]) == NOT_REPRODUCED
    assert at_most_verdict([64], [96, INF]) == REPRODUCED and at_most_verdict([INF], [96]) == NOT_REPRODUCED


def test_growth_beyond_the_grid_on_both_tasks_is_no_order(tmp_path):
    """No width solves the largest size of either task: both growths are past the grid, neither known larger."""
    def make(cfg):
        small = (cfg.task.name, cfg.task.length) in {("edit_distance", 4), ("lis", 6)}
        if small and cfg.model.width >= 64:
            return _run(cfg, [(250, 0.5, 0.7), (500, 0.95, 0.1)], status="solved")
        return _run(cfg, [(s, 0.2, 2.0) for s in STEPS])

    _, (order,) = _evaluate(tmp_path, "yang-locality-order", make)
    assert order.verdict == INCONCLUSIVE, order.evidence + order.reasons


def test_exploratory_claims_stay_out_of_the_tally():
    r1, learned = select(None, ["deng-learned", "deng-r1"])  # catalogue order
    verdicts = [ClaimVerdict(learned, "quick", NOT_REPRODUCED, []), ClaimVerdict(r1, "quick", REPRODUCED, [])]
    assert learned.exploratory and not r1.exploratory
    assert tally(verdicts) == "1 reproduced, 0 not reproduced, 0 inconclusive; 1 exploratory (not the paper's claims)"


def test_a_figure_whose_ranges_are_lost_is_exploratory_and_says_where_it_holds():
    (claim,) = select(None, "deng-fig3b")
    assert claim.exploratory and "swept values are lost" in claim.exploratory_reason
    rising = {float(m): [1 - 2.0 ** -m] * 3 for m in range(1, 9)}
    event, silent = evaluate_series(claim, "cpu", {"E": rising, "linear silent on D1": {1.0: [1.0] * 3, 2.0: [0.5] * 3}},
                                    swept="m")
    assert event.verdict == NOT_REPRODUCED and event.evidence[0].startswith("m=1: E 0.500")
    assert event.evidence[-1] == "holds at 5 of 8 swept values: m = 4 to 8"
    assert silent.evidence[-1] == "holds at 1 of 2 swept values: m = 1"
    assert draw(ClaimVerdict(claim, "cpu", NOT_REPRODUCED, [event, silent])).axes[0].get_xlabel() == "m"
    gaps = evaluate_series(claim, "cpu", {"E": {1.0: [0.95] * 3, 2.0: [0.5] * 3, 3.0: [0.99] * 3},
                                          "linear silent on D1": {1.0: [0.0] * 3}}, swept="tau")
    assert gaps[0].evidence[-1] == "holds at 2 of 3 swept values: tau = 1, 3"
    assert len(gaps[1].evidence) == 1


def test_a_claims_cost_gives_the_cpu_time_of_the_runs_that_counted_it():
    (claim,) = select(None, ["il-tf-vs-recurrent"])
    assert ClaimVerdict(claim, "cpu", INCONCLUSIVE, [], 90.0, 3).cost == "90 s"
    assert ClaimVerdict(claim, "cpu", INCONCLUSIVE, [], 7200.0, 3, 5400.0, 3).cost == "120.0 min, CPU 1.50 core-h"
    assert (ClaimVerdict(claim, "cpu", INCONCLUSIVE, [], 7200.0, 3, 3600.0, 2).cost
            == "120.0 min, CPU 1.00 core-h (2 of 3 runs)")


@pytest.mark.parametrize("ed_at_64, verdict", [(FLAT, REPRODUCED), (RISING, INCONCLUSIVE)])
def test_an_unsolved_width_still_learning_is_undecided(tmp_path, ed_at_64, verdict):
    def make(cfg):
        if cfg.model.width == 96 or (cfg.task.name == "ed_local" and cfg.model.width == 64):
            return _run(cfg, [(250, 0.5, 0.7), (500, 0.95, 0.1)], status="solved")
        if cfg.task.name == "edit_distance" and cfg.model.width == 64:
            return _run(cfg, ed_at_64)
        return _run(cfg, [(s, 0.2, 2.0) for s in STEPS])

    _, (linear, _) = _evaluate(tmp_path, "yang-ed-local", make)
    assert linear.verdict == verdict, linear.evidence + linear.reasons
    if verdict == INCONCLUSIVE:
        assert any("width 64: still learning at 1500 steps" in r for r in linear.reasons), linear.reasons


def test_a_width_whose_runs_are_missing_is_undecided_and_refutes_nothing(tmp_path):
    """ED_Local's width 64 not trained: its smallest width may be 64 or 96, below or tied with ED's 96, so the order
    waits. Read from the stored widths alone it would be 96, a tie at every size, and the claim refuted by runs
    never trained."""
    (claim,) = select(None, "yang-ed-local")
    configs = claim.configs("quick", EVAL)
    store = Store(tmp_path / "s.db")
    for cfg in configs:
        if cfg.task.name == "ed_local" and cfg.model.width == 64:
            continue
        if cfg.model.width == 96:
            store.put(_run(cfg, [(250, 0.5, 0.7), (500, 0.95, 0.1)], status="solved"))
        else:
            store.put(_run(cfg, [(s, 0.2, 2.0) for s in STEPS]))
    outcomes = evaluate_runs(claim, "quick", configs, {r.config_hash: r for r in store.results()})
    for outcome in outcomes:
        assert outcome.verdict == INCONCLUSIVE, outcome.evidence + outcome.reasons
        assert any("{64,96} vs name=edit_distance" in line and line.endswith("{96}") for line in outcome.evidence)
        assert any("missing" in reason for reason in outcome.reasons), outcome.reasons


@pytest.mark.parametrize("stored_rates, gap, verdict", [
    ({1e-3: [0.2, 0.2, 0.2]}, "missing", "undecided"),  # the untrained rate may solve
    ({1e-3: [0.2, 0.2, 0.2], 1e-2: [0.95, 0.95]}, "missing", "undecided"),  # solved on two seeds, the third may
    ({1e-3: [0.2, 0.2, 0.2]}, "failed", "undecided"),  # a rate that failed is a gap, not a losing rate
    ({1e-3: [0.2, 0.2, 0.2], 1e-2: [0.2, 0.2, 0.2]}, None, "unsolved"),
])
def test_a_cell_of_several_rates_with_runs_missing_or_failed_is_undecided(stored_rates, gap, verdict):
    from sepbench.claims.width_rules import decided_cells
    from sepbench.sweep.search import SolvedRule

    def config(lr, seed):
        return RunConfig.build({"task": {"name": "index_lookup", "length": 12}, "model": {"width": 32},
                                "train": {"lr": lr}, "seed": seed, "device": "cpu"})

    expected = [config(lr, seed) for lr in (1e-3, 1e-2) for seed in range(3)]
    results = [_run(config(lr, seed), [(s, a, 1.0) for s in STEPS]) for lr, accs in stored_rates.items()
               for seed, a in enumerate(accs)]
    if gap == "failed":
        results += [_run(config(1e-2, seed), [(250, 0.0, 1.0)], status="failed") for seed in range(3)]
    rule = SolvedRule(0.9, 2, 3)
    (cell,) = decided_cells(results, rule, ["model.name"], expected=expected).itertuples()
    assert cell.verdict == verdict, cell.reason
    if verdict == "undecided":
        assert "of 2 learning rates missing" in cell.reason
    (alone,) = decided_cells([r for r in results if r.config.train.lr == 1e-3], rule, ["model.name"],
                             expected=[c for c in expected if c.train.lr == 1e-3][:2]).itertuples()
    assert alone.verdict == "unsolved"  # one rate: k of m reads the seeds stored


def test_an_unsolved_width_whose_rising_seeds_could_not_make_k_of_m_is_decided(tmp_path):
    """Solved = 2 of 3 seeds: one seed still rising beside two flat far below cannot make it, nor can a seed
    already past the line whose loss still falls."""
    def make(cfg):
        if cfg.model.width == 96 or (cfg.task.name == "ed_local" and cfg.model.width == 64):
            return _run(cfg, [(250, 0.5, 0.7), (500, 0.95, 0.1)], status="solved")
        if cfg.task.name == "edit_distance" and cfg.model.width == 64 and cfg.seed == 0:
            return _run(cfg, RISING)
        return _run(cfg, [(s, 0.2, 2.0) for s in STEPS])

    _, (linear, _) = _evaluate(tmp_path, "yang-ed-local", make)
    assert linear.verdict == REPRODUCED, linear.evidence + linear.reasons


def test_a_diverged_learning_rate_beside_one_that_trained_is_a_losing_one(tmp_path):
    def make(cfg):
        if cfg.model.name == "lstm" or (cfg.model.layers == 2 and cfg.train.lr == 0.001):
            return _run(cfg, [(250, 0.6, 0.5), (500, 0.99, 0.01)], status="solved")
        if cfg.model.layers == 2:
            return _run(cfg, RISING, status="diverged")
        return _run(cfg, [(s, 0.5, 0.69) for s in STEPS])

    _, (deep, _) = _evaluate(tmp_path, "dyck-depth", make)
    assert deep.verdict == REPRODUCED and "lr 0.001" in deep.evidence[0], deep.reasons


def _searched(cfg, finalists: tuple[float, ...], at_rung: float, cut_at_rung: float, final: float):
    """One run of a halving search that cut every rate but ``finalists`` at step 500: the cut ones stored pruned
    with ``cut_at_rung`` there, the finalists at ``at_rung`` there and flat at ``final`` to the budget."""
    if cfg.train.lr not in finalists:
        return _run(cfg, [(250, cut_at_rung, 0.69), (500, cut_at_rung, 0.69)], status="pruned")
    return _run(cfg, [(250, at_rung, 0.69), (500, at_rung, 0.69)] + [(s, final, 0.3) for s in range(750, 4001, 250)])


def test_tied_cuts_are_those_within_the_evaluations_noise():
    from sepbench.claims.ties import tied_cuts
    from sepbench.train.result import EvalInterval
    from sepbench.train.sequential import clopper_pearson

    (claim,) = select(None, "dyck-depth")
    cells = [c for c in claim.configs("cpu", EVAL) if c.model.name == "lstm"]
    kept = (1e-3, 5e-3)
    ties = tied_cuts([_searched(c, kept, 0.50, 0.49, 0.6) for c in cells])
    assert sorted(t.lr for t in ties) == [1e-6, 5e-5, 1e-4, 5e-4, 1e-2]
    assert all(t.step == 500 and t.kept_lr in kept and t.budget == cells[0].train.steps for t in ties)
    assert "lr 0.01 at step 500 with mean accuracy 0.490" in next(t.text() for t in ties if t.lr == 1e-2)
    # 0.49 against 0.55 on 1000 examples a seed (2 standard errors of the difference ~0.026): no tie
    apart = [_searched(c, kept, 0.55, 0.49, 0.9) for c in cells]
    assert tied_cuts(apart) == []
    # the same accuracies read off 256 examples a seed (the stored intervals say so) are a tie
    for run in apart:
        for point in run.curve:
            interval = clopper_pearson(round(point.accuracy * 256), 256)
            point.interval = EvalInterval(n=256, low=interval.low, high=interval.high, confidence=0.95)
    assert len(tied_cuts(apart)) == 5


def test_a_verdict_resting_on_rates_the_search_cut_on_a_tie_is_inconclusive(tmp_path):
    (claim,) = select(None, "dyck-depth")
    configs = claim.configs("cpu", EVAL)

    def judged(rung_gap: float) -> list:
        store = Store(tmp_path / f"s{rung_gap}.db")
        for cfg in configs:
            if cfg.model.name == "lstm":
                store.put(_run(cfg, [(250, 0.6, 0.5), (500, 0.99, 0.01)], status="solved") if cfg.train.lr == 1e-3
                          else _run(cfg, [(250, 0.5, 0.69), (500, 0.5, 0.69)], status="pruned"))
            else:  # both Transformers: two finalists flat at 0.6 to the budget
                store.put(_searched(cfg, (1e-4, 5e-4), 0.5 + rung_gap, 0.5, 0.6))
        return evaluate_runs(claim, "cpu", configs, {r.config_hash: r for r in store.results()})

    deep, shallow = judged(rung_gap=0.0)  # every rate at chance at the rung: the cuts were a draw
    assert deep.verdict == INCONCLUSIVE and shallow.verdict == INCONCLUSIVE, (deep.reasons, shallow.reasons)
    assert any("the rate search cut transformer-(2, 64)" in r for r in deep.reasons), deep.reasons
    assert any("the rate search cut transformer-(1, 256)" in r for r in shallow.reasons), shallow.reasons
    # the reason names what would decide it: the five cut rates' three seeds each, trained to the spec's budget
    assert any("trained in full (15 runs of 4000 steps; `--settle-ties`)" in r for r in deep.reasons), deep.reasons
    label = ClaimVerdict(claim, "cpu", INCONCLUSIVE, [deep, shallow]).label
    assert label == "inconclusive: the rate search cut rates it could not rank"
    deep, shallow = judged(rung_gap=0.3)  # the finalists led clearly at the rung: the cuts stand
    assert deep.verdict == NOT_REPRODUCED and shallow.verdict == REPRODUCED, (deep.reasons, shallow.reasons)
    assert "best of 2 lr trained in full (7 searched)" in shallow.evidence[0], shallow.evidence


def test_settle_ties_trains_the_rates_cut_on_a_tie_in_full_and_decides_on_them(tmp_path):
    from sepbench.claims.reproduce import judge, plan_claim

    (claim,) = select(None, "dyck-depth")
    small = {"model.width": 8, "train.steps": 4, "train.eval_every": 2, "train.eval_samples": 32,
             "train.batch_size": 8}
    configs = claim.configs("cpu", small)
    store = Store(tmp_path / "s.db")
    finalists = (1e-3, 5e-3)
    for cfg in configs:  # every rate at chance at the rung (step 2): the search's cuts were a draw
        if cfg.train.lr in finalists:
            store.put(_run(cfg, [(2, 0.5, 0.69), (4, 0.5, 0.69)]))
        else:
            store.put(_run(cfg, [(2, 0.5, 0.69)], status="pruned"))
    cut = {cfg.config_hash() for cfg in configs if cfg.train.lr not in finalists}
    shallow_cut = {cfg.config_hash() for cfg in configs if cfg.train.lr not in finalists and cfg.model.layers == 1
                   and cfg.model.name == "transformer"}
    assert plan_claim(claim, "cpu", store, small).todo == []
    plan = plan_claim(claim, "cpu", store, small, settle_ties=True)
    # the one-layer Transformer must stay below 0.95 and does: a cut rate's rise could change that
    assert shallow_cut < plan.settled <= cut and {cfg.config_hash() for cfg in plan.todo} == plan.settled
    before = judge(claim, "cpu", store, small, train=False)
    waited = [r for o in before.outcomes for r in o.reasons if "the rate search cut" in r]
    assert any(f"({len(plan.settled - shallow_cut)} runs of 4 steps; `--settle-ties`)" in r for r in waited), waited
    after = judge(claim, "cpu", store, small, settle_ties=True)
    assert all(store.get(h).status != "pruned" and store.get(h).steps == 4 for h in plan.settled)
    assert not any("the rate search cut" in r for o in after.outcomes for r in o.reasons), after.outcomes


def test_settle_ties_leaves_the_cuts_of_a_side_whose_rise_could_not_change_its_verdict(tmp_path):
    from sepbench.claims.reproduce import plan_claim

    (claim,) = select(None, "dyck-depth")
    configs = claim.configs("cpu", EVAL)
    store = Store(tmp_path / "s.db")
    for cfg in configs:  # every rate at chance at step 500; the LSTM's lr 1e-3 solves it after
        if cfg.model.name == "lstm" and cfg.train.lr == 1e-3:
            store.put(_run(cfg, [(250, 0.5, 0.69), (500, 0.5, 0.69), (750, 0.99, 0.01)], status="solved"))
        else:
            store.put(_searched(cfg, (1e-3, 5e-3), 0.5, 0.5, 0.6))
    cuts = {name: {cfg.config_hash() for cfg in configs if cfg.train.lr not in (1e-3, 5e-3)
                   and f"{cfg.model.name}{cfg.model.layers}" == name} for name in ("lstm1", "transformer2",
                                                                                 "transformer1")}
    settled = plan_claim(claim, "cpu", store, EVAL, settle_ties=True).settled
    # the LSTM reached 0.95 and the first condition picks its worse member, the two-layer Transformer
    assert settled == cuts["transformer2"] | cuts["transformer1"], settled


def test_the_verdict_table_points_at_settle_ties_where_a_search_cut_on_a_tie(tmp_path):
    from typer.testing import CliRunner

    from sepbench.claims import evidence
    from sepbench.cli import app

    (claim,) = select(None, "dyck-depth")
    store = Store(tmp_path / "s.db")
    for cfg in claim.configs("cpu"):
        store.put(_searched(cfg, (1e-3, 5e-3), 0.5, 0.5, 0.6))
    evidence.write(claim, "cpu", store, tmp_path / "evidence")
    runner = CliRunner()
    judged = runner.invoke(app, ["reproduce", "--claim", "dyck-depth", "--scale", "cpu", "--evidence",
                                 "--evidence-dir", str(tmp_path / "evidence")], terminal_width=300)
    assert judged.exit_code == 0, judged.output
    assert "dyck-depth: the rate search cut rates it could not rank" in judged.stdout
    assert "--settle-ties" in judged.stdout
    part = Store(tmp_path / "part.db")  # a run missing too: the label says so, and the hint stays
    for cfg in claim.configs("cpu")[1:]:
        part.put(_searched(cfg, (1e-3, 5e-3), 0.5, 0.5, 0.6))
    evidence.write(claim, "cpu", part, tmp_path / "part")
    partial = runner.invoke(app, ["reproduce", "--claim", "dyck-depth", "--scale", "cpu", "--evidence",
                                  "--evidence-dir", str(tmp_path / "part")], terminal_width=300)
    assert "dyck-depth: inconclusive: runs missing" in partial.stdout
    assert "dyck-depth: the rate search cut rates it could not rank" in partial.stdout
    mixed = runner.invoke(app, ["reproduce", "--evidence", "--settle-ties"])
    assert mixed.exit_code == 2 and "--settle-ties" in mixed.stderr and mixed.stderr.strip().count("\n") == 0


def test_settle_ties_trains_first_the_ties_a_condition_waits_on_alone(tmp_path):
    from sepbench.claims.reproduce import plan_claim

    (claim,) = select(None, "dyck-depth")
    configs = claim.configs("cpu", EVAL)
    store = Store(tmp_path / "s.db")
    for cfg in configs:  # every rate at chance at step 500; the two-layer Transformer's finalists still rising
        if cfg.model.name == "lstm" and cfg.train.lr == 1e-3:
            store.put(_run(cfg, [(250, 0.5, 0.69), (500, 0.5, 0.69), (750, 0.99, 0.01)], status="solved"))
        elif cfg.model.layers == 2 and cfg.train.lr in (1e-3, 5e-3):
            store.put(_run(cfg, [(250, 0.5, 0.69), (500, 0.5, 0.69)] + [(s, 0.5 + s / 10_000, 0.69 - s / 10_000)
                                                                         for s in range(750, 4001, 250)]))
        else:
            store.put(_searched(cfg, (1e-3, 5e-3), 0.5, 0.5, 0.6))
    deep_first = [cfg.model.layers for cfg in configs if cfg.model.name == "transformer"]
    assert deep_first.index(2) < deep_first.index(1)
    plan = plan_claim(claim, "cpu", store, EVAL, settle_ties=True)
    # the one-layer Transformer's condition waits on its ties alone, the two-layer's also on its rising curve
    layers = [cfg.model.layers for cfg in plan.todo]
    assert layers == [1] * 15 + [2] * 15, layers


def test_settle_ties_stops_training_a_conditions_ties_once_a_settled_rate_decides_it(tmp_path, monkeypatch):
    """Scheduling only: the trainer is replaced by one that stores set curves, as a decided condition must come
    from the data, which real training at test sizes cannot be made to give."""
    import sepbench.claims.reproduce as reproduce

    (claim,) = select(None, "dyck-depth")
    configs = claim.configs("cpu", EVAL)
    store = Store(tmp_path / "s.db")
    for cfg in configs:  # as in the test above: the one-layer Transformer's condition waits on its ties alone
        if cfg.model.name == "lstm" and cfg.train.lr == 1e-3:
            store.put(_run(cfg, [(250, 0.5, 0.69), (500, 0.5, 0.69), (750, 0.99, 0.01)], status="solved"))
        elif cfg.model.layers == 2 and cfg.train.lr in (1e-3, 5e-3):
            store.put(_run(cfg, [(250, 0.5, 0.69), (500, 0.5, 0.69)] + [(s, 0.5 + s / 10_000, 0.69 - s / 10_000)
                                                                         for s in range(750, 4001, 250)]))
        else:
            store.put(_searched(cfg, (1e-3, 5e-3), 0.5, 0.5, 0.6))
    rounds = []

    def trained(todo, db, **_):
        """The one-layer Transformer solves at every rate it is trained at; every other run stays at chance."""
        rounds.append([(cfg.model.layers, cfg.train.lr) for cfg in todo])
        level = 0.97 if cfg_is_shallow(todo[0]) else 0.5
        for cfg in todo:
            db.put(_run(cfg, [(s, level, 0.3) for s in range(250, 4001, 250)]))

    def cfg_is_shallow(cfg):
        return cfg.model.name == "transformer" and cfg.model.layers == 1

    monkeypatch.setattr(reproduce, "run_sweep", trained)
    reproduce.train_claims([claim], "cpu", store, EVAL, settle_ties=True)
    # one rate a round on one CPU worker: the one-layer Transformer's first tied rate reaching 0.97 decides its
    # condition (it must stay below 0.95), so its four other tied rates are never trained
    assert rounds[0] == [(1, 1e-2)] * 3 and all(layers == 2 for r in rounds[1:] for layers, _ in r), rounds
    assert sorted({lr for r in rounds[1:] for _, lr in r}) == [1e-6, 5e-5, 1e-4, 5e-4, 1e-2], rounds
    still_cut = {(cfg.model.layers, cfg.train.lr) for cfg in configs
                 if cfg.model.name == "transformer" and store.get(cfg.config_hash()).status == "pruned"}
    assert still_cut == {(1, lr) for lr in (5e-4, 1e-4, 5e-5, 1e-6)}, still_cut


def test_settle_ties_settles_in_the_same_invocation_the_ties_a_fresh_search_cut(tmp_path, monkeypatch):
    """Scheduling only, from an empty store: the searches (replaced by one that cuts every rate but two at chance,
    a draw) run first, and the ties they cut are trained by the same call, not left for a rerun."""
    import sepbench.claims.reproduce as reproduce
    import sepbench.sweep.halving as halving

    (claim,) = select(None, "dyck-depth")
    store = Store(tmp_path / "s.db")
    searched, swept = [], []

    def search(runs, db, **_):
        searched.append(len(runs))
        for cfg in runs:
            db.put(_searched(cfg, (1e-3, 5e-3), 0.5, 0.5, 0.6))

    def sweep(todo, db, **_):
        swept.extend(todo)
        for cfg in todo:
            db.put(_run(cfg, [(s, 0.5, 0.69) for s in range(250, 4001, 250)]))

    monkeypatch.setattr(halving, "run_halving", search)
    monkeypatch.setattr(reproduce, "run_sweep", sweep)
    reproduce.train_claims([claim], "cpu", store, EVAL, settle_ties=True)
    configs = claim.configs("cpu", EVAL)
    assert sum(searched) == len(configs), searched
    assert swept and all(cfg.train.lr not in (1e-3, 5e-3) for cfg in swept)
    assert len({cfg.config_hash() for cfg in swept}) == len(swept)
    assert reproduce.plan_claim(claim, "cpu", store, EVAL, settle_ties=True).todo == []
    assert any(store.get(cfg.config_hash()).status == "pruned" for cfg in configs)  # cuts no verdict waits on


@pytest.mark.parametrize("status", ["failed", "diverged"])
def test_settle_ties_when_a_tied_rate_fails_or_diverges(tmp_path, monkeypatch, status):
    """Scheduling only: each condition's first tied rate (lr 1e-2) fails or diverges. A failed run is a gap the
    condition then rests on, which no further tie can change, so the same call moves to the next condition's ties;
    a diverged rate beside rates that trained is a losing rate, so the rest of the ties are settled. Either way the
    call ends with no verdict waiting on a tie it left untrained."""
    import sepbench.claims.reproduce as reproduce

    (claim,) = select(None, "dyck-depth")
    configs = claim.configs("cpu", EVAL)
    store = Store(tmp_path / "s.db")
    for cfg in configs:
        store.put(_searched(cfg, (1e-3, 5e-3), 0.5, 0.5, 0.6))
    rounds = []

    def trained(todo, db, **_):
        """lr 1e-2 fails or diverges; every other run stays at chance."""
        rounds.append(sorted({(cfg.model.name, cfg.model.layers, cfg.train.lr) for cfg in todo}))
        for cfg in todo:
            if cfg.train.lr == 1e-2:
                broken = _run(cfg, [(250, 0.5, 0.69)], status=status)
                broken.error = "loss is nan"
                db.put(broken)
            else:
                db.put(_run(cfg, [(s, 0.5, 0.69) for s in range(250, 4001, 250)]))

    monkeypatch.setattr(reproduce, "run_sweep", trained)
    reproduce.train_claims([claim], "cpu", store, EVAL, settle_ties=True)
    cut = (1e-2, 5e-4, 1e-4, 5e-5, 1e-6)
    if status == "failed":
        assert rounds == [[("lstm", 1, 1e-2)], [("transformer", 1, 1e-2)]], rounds
    else:
        assert rounds == [[(name, 1, lr)] for name in ("lstm", "transformer") for lr in cut], rounds
    outcomes = reproduce.judge(claim, "cpu", store, EVAL, train=False).outcomes
    gap = "3 runs failed or diverged (failed: loss is nan)"
    assert all(any(gap in r for r in o.reasons) == (status == "failed") for o in outcomes), outcomes
    assert not any(o.waits_on for o in outcomes)
    assert reproduce.plan_claim(claim, "cpu", store, EVAL, settle_ties=True).settle_first == []


def test_settle_ties_on_two_workers_trains_two_rates_a_round_so_no_worker_waits(tmp_path, monkeypatch):
    """Scheduling only: three seeds a rate on two CPU workers. A round of one rate (three runs) would leave a
    worker idle for its second wave; two rates (six runs) fill three waves."""
    import sepbench.claims.reproduce as reproduce

    (claim,) = select(None, "dyck-depth")
    store = Store(tmp_path / "s.db")
    for cfg in claim.configs("cpu", EVAL):
        store.put(_searched(cfg, (1e-3, 5e-3), 0.5, 0.5, 0.6))
    rounds = []

    def trained(todo, db, workers, **_):
        rounds.append((workers, [(cfg.model.name, cfg.train.lr) for cfg in todo]))
        for cfg in todo:
            db.put(_run(cfg, [(s, 0.5, 0.69) for s in range(250, 4001, 250)]))

    monkeypatch.setattr(reproduce, "run_sweep", trained)
    reproduce.train_claims([claim], "cpu", store, EVAL, workers=2, settle_ties=True)
    cut = (1e-2, 5e-4, 1e-4, 5e-5, 1e-6)
    expected = [(2, [(name, lr) for lr in lrs for _ in range(3)])
                for name in ("lstm", "transformer") for lrs in (cut[:2], cut[2:4], cut[4:])]
    assert rounds == expected, rounds


def test_a_settling_stopped_part_way_trains_the_rest_of_a_half_settled_rate(tmp_path, monkeypatch):
    """A stop (Ctrl-C) after one seed of a tied rate trained in full leaves that rate a cut on a tie until its other
    seeds train: the next call trains those two, not the third seed again, and not nothing."""
    import sepbench.claims.reproduce as reproduce
    from sepbench.claims.ties import tied_cuts

    (claim,) = select(None, "dyck-depth")
    configs = claim.configs("cpu", EVAL)
    store = Store(tmp_path / "s.db")
    for cfg in configs:
        store.put(_searched(cfg, (1e-3, 5e-3), 0.5, 0.5, 0.6))
    half = [cfg for cfg in configs if cfg.model.name == "lstm" and cfg.train.lr == 1e-2]
    store.put(_run(half[0], [(s, 0.5, 0.69) for s in range(250, 4001, 250)]))

    def lstm_cuts():
        return [t for t in tied_cuts([store.get(c.config_hash()) for c in configs])
                if t.model.startswith("lstm") and t.lr == 1e-2]

    (cut,) = lstm_cuts()
    assert cut.hashes == tuple(c.config_hash() for c in half[1:]) and cut.step == 500
    rounds = []

    def trained(todo, db, **_):
        rounds.append(sorted((cfg.model.name, cfg.train.lr, cfg.seed) for cfg in todo))
        for cfg in todo:
            db.put(_run(cfg, [(s, 0.5, 0.69) for s in range(250, 4001, 250)]))

    monkeypatch.setattr(reproduce, "run_sweep", trained)
    reproduce.train_claims([claim], "cpu", store, EVAL, settle_ties=True)
    assert rounds[0] == [("lstm", 1e-2, c.seed) for c in half[1:]], rounds
    assert all(store.get(c.config_hash()).status == "completed" for c in half)
    assert lstm_cuts() == []


def test_a_table_of_several_claims_shows_three_reasons_a_condition_and_says_where_the_rest_are():
    from sepbench.claims.tables import verdict_rows
    from sepbench.claims.verdicts import Outcome

    claims = select(None, "yang-width-flops") + select(None, "yang-efficient-larger")
    verdicts = [ClaimVerdict(c, "cpu", INCONCLUSIVE, [Outcome("t", INCONCLUSIVE, reasons=[f"r{i}" for i in range(5)])])
                for c in claims]
    several = verdict_rows(verdicts)[0][2]
    assert "inconclusive: r2" in several and "r3" not in several
    assert "(2 more reasons: `--claim yang-width-flops` shows every one)" in several
    alone = verdict_rows(verdicts[:1])[0][2]
    assert "inconclusive: r4" in alone and "more reason" not in alone


def test_a_cut_rate_a_settling_trained_on_some_seeds_only_is_neither_ranked_nor_counted_as_trained_in_full():
    """lr 1e-3's seeds 0 and 1 trained in full lead every rate, but its seed 2 is still cut: the pick is the best
    rate trained in full on every seed, not a mean over two seeds of a rate the search may yet rank otherwise."""
    from sepbench.claims.groups import Slot, group_point

    (claim,) = select(None, "dyck-depth")
    cell = [c for c in claim.configs("cpu", EVAL) if c.model.name == "transformer" and c.model.layers == 2]
    runs = [_run(c, [(500, 0.5, 0.69), (1000, 0.5, 0.69)], status="pruned") if c.train.lr < 1e-5
            or (c.train.lr == 1e-3 and c.seed == 2)
            else _run(c, [(2000, 0.9, 0.1), (4000, 0.99 if c.train.lr == 1e-3 else 0.95 - c.train.lr, 0.05)])
            for c in cell]
    point = group_point(Slot(cell, runs), "TF-2", 200, [], "best")
    assert point.member == "transformer-(2, 64) lr 5e-05" and point.values == [pytest.approx(0.95 - 5e-5)] * 3
    assert point.detail == ", best of 5 lr trained in full (7 searched)"


def test_a_half_settled_rate_that_leads_on_its_settled_seed_is_settled_in_full(tmp_path, monkeypatch):
    """A settling stopped after one seed of TF-(1, 256)'s tied lr 1e-2, which ended above the rates trained in
    full: the condition waits on that rate's other seeds, and ``--settle-ties`` trains them."""
    import sepbench.claims.reproduce as reproduce

    (claim,) = select(None, "dyck-depth")
    configs = claim.configs("cpu", EVAL)
    store = Store(tmp_path / "s.db")
    for cfg in configs:
        store.put(_searched(cfg, (1e-3, 5e-3), 0.5, 0.5, 0.6))
    half = [cfg for cfg in configs if cfg.model.name == "transformer" and cfg.model.layers == 1
            and cfg.train.lr == 1e-2]
    store.put(_run(half[0], [(250, 0.5, 0.69), (500, 0.5, 0.69)] + [(s, 0.7, 0.5) for s in range(750, 4001, 250)]))
    waiting = set().union(*(o.waits_on for o in evaluate_runs(claim, "cpu", configs,
                                                              {r.config_hash: r for r in store.results()})))
    assert {c.config_hash() for c in half[1:]} <= waiting
    rounds = []

    def trained(todo, db, **_):
        rounds.append(sorted((cfg.model.name, cfg.model.layers, cfg.train.lr, cfg.seed) for cfg in todo))
        for cfg in todo:
            db.put(_run(cfg, [(s, 0.5, 0.69) for s in range(250, 4001, 250)]))

    monkeypatch.setattr(reproduce, "run_sweep", trained)
    reproduce.train_claims([claim], "cpu", store, EVAL, settle_ties=True)
    assert all(store.get(c.config_hash()).status == "completed" for c in half), rounds


def _evaluate_with(tmp_path, claim_id, make_run, overrides):
    (claim,) = select(None, claim_id)
    configs = claim.configs("quick", {**EVAL, **overrides})
    store = Store(tmp_path / "s.db")
    for cfg in configs:
        store.put(make_run(cfg))
    return claim, evaluate_runs(claim, "quick", configs, {r.config_hash: r for r in store.results()})


TO_2500 = [250 * k for k in range(1, 11)]


def test_a_run_that_reached_its_threshold_without_an_early_stop_is_read_for_a_trend():
    """With early_stop off (the Yang paper protocol) a run that touched its train.threshold is stored as solved
    but trains every step: it may still be learning. One that stopped there shows no trend."""
    (claim,) = select(None, "yang-lis-sparse-rising")
    trained_on = claim.configs("quick", {**EVAL, "train.early_stop": False})[0]
    assert trend(_run(trained_on, RISING, status="solved")).learning
    stopping = claim.configs("quick", EVAL)[0]
    assert stopping.train.early_stop and RISING[-1][0] < stopping.train.steps
    assert trend(_run(stopping, RISING, status="solved")) is None


def test_a_rate_whose_every_learning_rate_has_a_seed_short_waits_on_a_seed_still_rising(tmp_path):
    """Every rate's mean steps-to-threshold is infinite, so the pick is a tie; a seed of another rate rising fast
    toward the line may still reach it."""
    def make(cfg):
        if cfg.model.name != "transformer":
            return _run(cfg, [(s, 0.1, 3.0) for s in TO_2500])
        if cfg.seed != 2:
            return _run(cfg, [(250, 0.96, 0.05), (500, 0.995, 0.01)], status="solved")
        if cfg.train.lr == 0.001:
            return _run(cfg, [(s, 0.94, 0.2) for s in TO_2500])
        return _run(cfg, [(s, 0.5 + 0.045 * i, 1.0 - 0.09 * i) for i, s in enumerate(TO_2500)])

    _, (_, rate) = _evaluate(tmp_path, "il-tf-vs-recurrent", make)
    assert rate.verdict == INCONCLUSIVE, rate.reasons
    assert "does not reach 0.95 on every seed of any learning rate within 2500 steps" in rate.evidence[0]
    (reason,) = rate.reasons
    assert "still learning at 2500 steps" in reason and "lr 0.005 seed 2" in reason


@pytest.mark.parametrize("side", ["fast", "slow"])
def test_a_rate_claim_does_not_read_runs_stopped_early_below_its_line_as_where_they_ended(tmp_path, side):
    def make(cfg):
        if cfg.model.name == "transformer":
            if side == "fast":
                return _run(cfg, [(250, 0.5, 1.0), (500, 0.8, 0.5), (750, 0.91, 0.2)], status="solved")
            return _run(cfg, [(250, 0.96, 0.05)], status="solved")
        if side == "slow":
            return _run(cfg, [(s, 0.1 + 0.1 * i, 2.0 - 0.2 * i) for i, s in enumerate(TO_2500[:9])], status="solved")
        return _run(cfg, [(s, 0.1, 3.0) for s in TO_2500])

    claim, outcomes = _evaluate_with(tmp_path, "il-tf-vs-recurrent", make, {"train.threshold": 0.9})
    rate = outcomes[1]
    assert rate.verdict == INCONCLUSIVE, rate.reasons
    where = "at step 750, short of 0.95" if side == "fast" else "at step 2250 before 10 x T = 2500, short of 0.95"
    assert any(f"stopped early at train.threshold 0.9 {where}" in r for r in rate.reasons), rate.reasons
    label = ClaimVerdict(claim, "quick", INCONCLUSIVE, outcomes).label
    assert label == "inconclusive: seeds stopped early at their train.threshold, short of the line"


def test_seeds_straddling_a_level_because_some_stopped_early_below_it_read_stopped_early(tmp_path):
    def make(cfg):
        if cfg.seed == 0:
            return _run(cfg, [(250, 0.5, 0.7), (500, 0.97, 0.05)], status="solved")
        return _run(cfg, [(250, 0.6, 0.6), (500, 0.8, 0.4), (750, 0.91, 0.25)], status="solved")

    claim, (level,) = _evaluate_with(tmp_path, "dyck-one-layer-short", make, {"train.threshold": 0.9})
    assert level.verdict == INCONCLUSIVE
    assert not any("straddle" in r for r in level.reasons), level.reasons
    assert any("3 seeds of" in r and "stopped early at train.threshold 0.9, short of the line 0.95" in r
               for r in level.reasons), level.reasons
    label = ClaimVerdict(claim, "quick", INCONCLUSIVE, [level]).label
    assert label == "inconclusive: seeds stopped early at their train.threshold, short of the line"


def test_a_trained_run_without_an_accuracy_is_missing_data_never_a_value(tmp_path):
    """A completed run whose final metrics lack the accuracy leaves the condition open instead of counting as below
    the line (or, as NaN, reordering the rates)."""
    def make(cfg):
        if cfg.model.name == "lstm":
            run = _run(cfg, [(s, 0.97, 0.05) for s in STEPS])
            run.metrics.pop("accuracy")
            return run
        if cfg.model.name == "linear_transformer":
            return _run(cfg, [(s, 0.5, 0.69) for s in STEPS])
        return _run(cfg, [(250, 0.9, 0.1), (500, 0.995, 0.01)], status="solved")

    _, outcomes = _evaluate(tmp_path, "eq-random", make)
    stays_below = outcomes[1]
    assert stays_below.verdict == INCONCLUSIVE, stays_below.evidence
    assert any("6 trained runs with no accuracy to read (completed, lr" in r for r in stays_below.reasons)


def test_a_level_at_the_second_best_rate_says_when_fewer_rates_trained(tmp_path):
    def make(cfg):
        if cfg.model.name == "transformer":
            if cfg.train.lr == 0.001:
                return _run(cfg, [(250, 0.97, 0.05), (500, 0.995, 0.01)], status="solved")
            return _run(cfg, [(250, 0.02, 4.0)], status="pruned")
        return _run(cfg, [(s, 0.1, 3.0) for s in TO_2500])

    _, (level, _) = _evaluate(tmp_path, "il-tf-vs-recurrent", make)
    assert level.verdict == INCONCLUSIVE
    assert any("0 trained seeds, the rule needs 3 (it reads each cell's 2nd best learning rate, and at most 1 "
               "learning rate trained to the budget)" in r for r in level.reasons), level.reasons


def test_no_solving_width_leaves_growth_and_order_inconclusive_and_says_why(tmp_path):
    """A growth needs a width that solves the smallest size, and an order a side that solves: runs that plateau
    below the line everywhere refute neither."""
    def flat(cfg):
        return _run(cfg, [(s, 0.3, 1.0) for s in STEPS])

    _, (growth, *_rest) = _evaluate(tmp_path / "growth", "yang-width-flops", flat)
    assert growth.verdict == INCONCLUSIVE
    assert any(reason.endswith(": no width solves N=2") for reason in growth.reasons), growth.reasons
    _, orders = _evaluate(tmp_path / "order", "yang-efficient-larger", flat)
    for order in orders:
        assert order.verdict == INCONCLUSIVE
        assert any("no width solves either side" in reason for reason in order.reasons), order.reasons
