"""The evaluations' noise that decides when two learning rates are tied (``sepbench.sweep.ties``)."""
import math

import pytest

from sepbench.config import RunConfig
from sepbench.sweep.ties import evaluation_noise, mean_and_variance, standard_error
from sepbench.train.assessment import stored_interval
from sepbench.train.result import EvalPoint, RunResult
from sepbench.train.sequential import clopper_pearson, look_confidence


def point(correct: int, n: int, confidence: float | None) -> EvalPoint:
    interval = None if confidence is None else stored_interval(clopper_pearson(correct, n, confidence))
    return EvalPoint(step=100, loss=1.0, accuracy=correct / n, seconds=1.0, interval=interval)


@pytest.mark.parametrize("confidence", [0.95, 0.99, look_confidence(5000)])
def test_a_stored_interval_gives_the_binomial_standard_error_at_any_confidence(confidence):
    """The final evaluation's interval is at 99% and each sequential look's higher (Bonferroni): read as a 95% one,
    a 99.8% interval would count 1.6 standard errors as one."""
    for correct, n in ((500, 1000), (128, 256), (20, 1000)):
        binomial = math.sqrt(correct / n * (1 - correct / n) / n)
        assert standard_error(point(correct, n, confidence), n) == pytest.approx(binomial, rel=0.12)
        assert standard_error(point(correct, n, confidence), 5000) == standard_error(point(correct, n, confidence), n)


def test_without_a_stored_interval_the_noise_is_binomial_over_the_evaluation_set():
    bare = point(250, 1000, None)
    assert standard_error(bare, 1000) == pytest.approx(math.sqrt(0.25 * 0.75 / 1000))
    assert evaluation_noise(bare, 1000) == pytest.approx(1.96 * standard_error(bare, 1000), rel=1e-3)
    assert evaluation_noise(point(250, 1000, 0.99), 1000) > evaluation_noise(point(250, 1000, 0.95), 1000)


def test_the_variance_of_a_mean_over_seeds_is_the_seeds_squared_standard_errors_over_their_count_squared():
    runs = []
    for seed, correct in enumerate((500, 300)):
        cfg = RunConfig.build({"seed": seed, "device": "cpu"})
        runs.append(RunResult(config=cfg, config_hash=cfg.config_hash(), status="pruned",
                              curve=[point(correct, 1000, 0.99)], steps=100))
    mean, variance = mean_and_variance(runs, 100)
    errors = [standard_error(r.curve[0], 1000) for r in runs]
    assert mean == pytest.approx(0.4) and variance == pytest.approx((errors[0] ** 2 + errors[1] ** 2) / 4)
    assert math.sqrt(variance) == pytest.approx(math.sqrt(0.25 / 1000 + 0.21 / 1000) / 2, rel=0.12)
    assert mean_and_variance(runs, 200) is None
