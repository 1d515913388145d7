"""Reconstruction-level expectations of the reconstruction for R1-R3, fixed seeds, tolerance 0.05.

Where a point is cheap the trial count is raised above 100-200 so that +-0.05 is at least about 2.3 binomial
standard errors; the expectations are the reconstruction's rough values (docs/softmax_vs_linear.md).
"""
import pytest

from sepbench.theory.softmax_vs_linear import Setting, run_point


def frequency(model, trials, seed=0, **params):
    return run_point(Setting.from_flat(model, params), trials, seed)


@pytest.mark.parametrize("m, expected", [(1, 0.5), (2, 0.75), (4, 0.9375), (8, 0.996)])
def test_r1_success_tracks_one_minus_two_to_minus_m(m, expected):
    result = frequency("toy", 1000, seed=m, n=500, C=2.0, tau=0.5, m=m)
    assert result.frequency == pytest.approx(expected, abs=0.05)
    assert result.lin_d1_zero == result.trials and result.exp_d0_zero == result.trials


def test_r1_linear_never_detects_the_spike_and_success_rises_with_n():
    low, middle = frequency("toy", 1000, n=10, m=8).frequency, frequency("toy", 1000, n=20, m=8).frequency
    assert 0.25 <= low <= 0.55 and low + 0.2 <= middle <= 0.9
    for n in [50, 200, 1000]:
        result = frequency("toy", 1000, seed=n, n=n, m=8)
        assert result.frequency >= 0.98
        assert result.lin_d1_zero >= 0.99 * result.trials
        assert result.exp_d1_positive / result.trials == pytest.approx(1 - 2 ** -8, abs=0.02)


def test_r2_self_attention_separates_for_n_at_least_64():
    assert frequency("self", 400, n=64, d=256, k=16, C=4.0, tau=1.5, m=8).frequency >= 0.9
    assert frequency("self", 100, n=256, d=256, k=16, C=4.0, tau=1.5, m=8).frequency >= 0.95


@pytest.mark.parametrize("m", [1, 4])
def test_r2_m_sweep_tracks_one_minus_two_to_minus_m(m):
    result = frequency("self", 500, seed=m, n=128, d=256, k=16, C=4.0, tau=1.5, m=m)
    assert result.frequency == pytest.approx(1 - 2 ** -m, abs=0.05)


def test_r2_appendix_e_variant_separates_once_n_is_large():
    assert frequency("self", 100, n=256, d=256, k=16, tau=1.5, m=8, variant="E").frequency >= 0.9


def test_r3_cross_attention_transition_between_d_and_4d():
    assert frequency("cross", 1000, n=64, d=64, m=8).frequency <= 0.1
    for n in [256, 4096]:
        assert frequency("cross", 1000, seed=n, n=n, d=64, m=8).frequency >= 0.95
    assert frequency("cross", 1000, n=64, d=32, m=8).frequency == pytest.approx(0.45, abs=0.15)
    assert frequency("cross", 1000, n=256, d=32, m=8).frequency == pytest.approx(0.96, abs=0.05)
    assert frequency("cross", 1000, n=1024, d=32, m=8).frequency >= 0.94


def test_r3_small_d_plateaus_and_tau_at_least_one_never_succeeds():
    for n in [256, 4096]:
        assert frequency("cross", 2000, seed=n, n=n, d=16, m=8).frequency == pytest.approx(0.75, abs=0.05)
    for tau in [1.0, 1.5]:
        result = frequency("cross", 200, n=1024, d=32, m=8, tau=tau)
        assert result.successes == 0 and result.exp_d1_positive == 0


def test_same_seed_same_counts_and_another_seed_differs():
    setting = Setting.from_flat("self", dict(n=32, d=64, k=8, tau=1.5, m=2))
    first, again = run_point(setting, 60, seed=5), run_point(setting, 60, seed=5)
    assert first.as_dict() | {"seconds": 0} == again.as_dict() | {"seconds": 0}
    others = {run_point(setting, 60, seed=s).successes for s in range(6, 12)}
    assert len(others | {first.successes}) > 1
