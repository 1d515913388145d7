"""Whether a run was still learning when its budget ran out: a short budget is not a refutation.

A run is still learning when, over the last quarter of its steps (at least its last three evaluations), the
least-squares line through its evaluation points gains more accuracy than the noise of one evaluation (the
half-width of its stored interval, else a binomial 95% half-width) and than twice the fitted gain's standard
error; or when its loss falls by more than 1% of its level and twice the fall's standard error. Only runs that used
their whole budget have a trend: a run that stopped at its threshold is done, and one that did not train (failed,
diverged) is a gap, never "not solved". A run that used its budget with fewer than three evaluations (a smoke test's
``train.steps=20``) cannot show that it stopped learning, so it cannot refute a claim either. The budget a run
points to is where its fitted accuracy line reaches the level; read off a gain within the noise (a run that is
learning by its loss alone), it is marked as a rough guide.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from sepbench.claims.verdicts import STILL_LEARNING, TOO_FEW_EVALUATIONS
from sepbench.results import ran_its_budget
from sepbench.sweep.ties import evaluation_noise
from sepbench.train.result import RunResult
from sepbench.wording import counted

QUARTER = 0.25
MIN_POINTS = 3
LOSS_FLOOR = 0.01
"""A loss fall counts when above this fraction of the loss (and above its noise)."""
ROUND_OFF = 1e-6
"""A fitted accuracy rise below this over the whole budget is a flat curve's round-off, not a slope."""


@dataclass(frozen=True)
class Trend:
    """The last quarter of one run's curve."""

    budget: int
    slope: float
    """Fitted accuracy gained per step."""
    gain: float
    gain_noise: float
    loss_fall: float
    loss_noise: float
    last: float
    """Fitted accuracy at the budget."""
    loss_now: float = math.nan
    """The loss at the budget."""
    loss_before: float = math.nan
    """The lowest loss before the last quarter (nan when no evaluation came before it)."""

    @property
    def rising(self) -> bool:
        """The accuracy gain is beyond its noise."""
        return self.gain > self.gain_noise

    @property
    def learning(self) -> bool:
        return self.rising or self.loss_fall > self.loss_noise

    @property
    def new_low(self) -> bool:
        """The loss at the budget is more than ``LOSS_FLOOR`` below its lowest before the last quarter."""
        return self.loss_now < (1 - LOSS_FLOOR) * self.loss_before

    @property
    def leaving_its_level(self) -> bool:
        """Accuracy rising beyond its noise to a loss lower than any before the last quarter: what a run that is
        learning shows, and a run at chance whose evaluations dip and recover does not (its loss returns to where
        it was)."""
        return self.rising and self.new_low

    def steps_to(self, target: float) -> float | None:
        """Steps at which the fitted accuracy line reaches ``target`` (None when it does not rise)."""
        if self.last >= target:
            return float(self.budget)
        return self.budget + (target - self.last) / self.slope if self.slope * self.budget > ROUND_OFF else None

    def text(self, target: float | None = None) -> str:
        rate = (f"accuracy {self.slope * 1000:+.3f} per 1k steps, {self.gain:+.3f} over the last quarter "
                f"(noise {self.gain_noise:.3f})")
        if self.loss_fall > self.loss_noise:
            rate += f", loss falling {self.loss_fall:.3f} (noise {self.loss_noise:.3f})"
        elif self.new_low:
            rate += f", loss at a new low ({self.loss_now:.3f}; {self.loss_before:.3f} before the last quarter)"
        if target is None:
            return rate
        steps = self.steps_to(target)
        where = f"~{steps:,.0f} steps" if steps is not None else "a budget the accuracy slope cannot tell"
        if steps is not None and steps > self.budget and not self.rising:
            where += ", read off a gain within its noise: a rough guide"
        return f"{rate}; at that rate {target:.3g} needs {where}"


def _fit(steps: np.ndarray, values: np.ndarray) -> tuple[float, float, float]:
    """Slope, intercept and the slope's standard error of the least-squares line."""
    slope, intercept = np.polyfit(steps, values, 1)
    residuals = values - (slope * steps + intercept)
    dof = max(len(steps) - 2, 1)
    spread = float(np.sum((steps - steps.mean()) ** 2))
    error = math.sqrt(float(np.sum(residuals**2)) / dof / spread) if spread > 0 else math.inf
    return float(slope), float(intercept), error


def trend(result: RunResult) -> Trend | None:
    """The run's last-quarter trend; None unless it ran its whole budget with ``MIN_POINTS`` evaluations."""
    if not ran_its_budget(result) or not result.curve:
        return None
    budget = max(result.steps, result.curve[-1].step)
    finite = [p for p in result.curve if math.isfinite(p.accuracy)]
    tail = [p for p in finite if p.step >= (1 - QUARTER) * budget]
    tail = tail if len(tail) >= MIN_POINTS else finite[-MIN_POINTS:]
    if len(tail) < MIN_POINTS:
        return None
    steps = np.array([p.step for p in tail], dtype=float)
    accuracy = np.array([p.accuracy for p in tail])
    span = steps[-1] - steps[0]
    slope, intercept, error = _fit(steps, accuracy)
    noise = max(evaluation_noise(tail[-1], result.config.train.eval_samples), 2 * error * span)
    losses = np.array([p.loss for p in tail])
    earlier = [p.loss for p in finite if p.step < tail[0].step and math.isfinite(p.loss)]
    fall, loss_noise = 0.0, math.inf
    if np.all(np.isfinite(losses)):
        loss_slope, _, loss_error = _fit(steps, losses)
        fall = -loss_slope * span
        loss_noise = max(LOSS_FLOOR * float(np.abs(losses).mean()), 2 * loss_error * span)
    return Trend(budget, slope, slope * span, noise, fall, loss_noise, slope * steps[-1] + intercept,
                 float(losses[-1]), min(earlier, default=math.nan))


def too_few_evaluations(result: RunResult) -> bool:
    """The run used its whole budget but has fewer than ``MIN_POINTS`` evaluations to fit a trend to."""
    return ran_its_budget(result) and _finite_points(result) < MIN_POINTS


def _finite_points(result: RunResult) -> int:
    return sum(math.isfinite(p.accuracy) for p in result.curve)


def still_learning(results: Sequence[RunResult]) -> list[tuple[RunResult, Trend]]:
    """The runs among ``results`` that were still learning at their budget, with their trends."""
    found = []
    for result in results:
        found_trend = trend(result)
        if found_trend is not None and found_trend.learning:
            found.append((result, found_trend))
    return found


def learning_reason(results: Sequence[RunResult], target: float | None) -> str | None:
    """'still learning at B steps: ...' for the run still learning among ``results`` whose accuracy slope needs the
    most steps to reach ``target`` (without a target, or where no slope rises, the steepest), else None."""
    learning = still_learning(results)
    if not learning:
        return _too_few_reason(results)
    rising = [(r, t) for r, t in learning if target is not None and t.steps_to(target) is not None]
    result, chosen = (max(rising, key=lambda item: item[1].steps_to(target)) if rising
                      else max(learning, key=lambda item: item[1].slope))
    flat = len(learning) - len(rising) if rising else 0
    others = f"; {flat} more with loss falling, accuracy not rising" if flat else ""
    return (f"{STILL_LEARNING} {chosen.budget} steps ({len(learning)} of {len(results)} deciding runs; "
            f"lr {result.config.train.lr:g} seed {result.config.seed}: {chosen.text(target)}{others})")


def _too_few_reason(results: Sequence[RunResult]) -> str | None:
    """'too few evaluations to tell ...' when a deciding run used its budget with too few evaluations, else None."""
    short = [r for r in results if too_few_evaluations(r)]
    if not short:
        return None
    first = short[0]
    count = _finite_points(first)
    evaluations = counted(count, "evaluation")
    return (f"{TOO_FEW_EVALUATIONS} whether the runs stopped learning ({len(short)} of {len(results)} deciding runs; "
            f"lr {first.config.train.lr:g} seed {first.config.seed}: {evaluations} in {first.steps} steps, at least "
            f"{MIN_POINTS} needed: train longer or evaluate more often)")
