"""Intervals over seeds, and the three verdict words they decide.

In:  a figure's values over a model's seeds (or the per-seed differences of two figures of the
     same weights, or two models' values).
Out: an `Interval` (estimate, 95% bounds, n, standard error, degrees of freedom), which a rule
     (`rnnlm_study.judging.rules`) turns into one-sided p-values and a verdict (`rnnlm_study.judging.verdicts`).

- `t_interval(values)`: Student's t-interval of the mean (scipy.stats), right for the 3-10 seeds
  a study affords (a bootstrap has too few resamples there).
- `paired(a, b)`: the t-interval of the per-run differences a - b, for two figures of the same
  weights (stateless and stateful of one checkpoint, epoch 1 and the last epoch of one run).
- `welch(a, b)`: Welch's interval of mean(a) - mean(b), for two models (unequal spreads and n).
- One run gives no spread: its interval is the value alone, flagged `one_run`, and every rule
  calls it inconclusive at n = 1. All runs equal (no spread at all) give a zero-width interval.
- `one_sided_p`, `holm` and `holm_adjusted`: the p-value of a one-sided question, Holm's step-down
  over the comparisons of one claim and its adjusted p-values; `seeds_needed` plans seeds at 80%
  power (noncentral t).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """A 95% interval around `estimate`, from `n` runs (for two models, the smaller n), with the
    standard error and t degrees of freedom it was built from (for the one-sided p-values)."""

    estimate: float
    low: float
    high: float
    n: int
    se: float = 0.0
    df: float = math.inf

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    @property
    def one_run(self) -> bool:
        return self.n < 2

    def __str__(self) -> str:
        if self.one_run:
            return f"{self.estimate:+.3f} (n = 1)"
        return f"{self.estimate:+.3f} ± {self.half_width:.3f} (n = {self.n})"


def _values(values: Sequence[float]) -> np.ndarray:
    array = np.asarray([float(v) for v in values], dtype=float)
    if array.size == 0 or not np.all(np.isfinite(array)):
        raise ValueError("an interval needs at least one finite value")
    return array


def t_interval(values: Sequence[float]) -> Interval:
    """The 95% t-interval of the mean of `values`."""
    x = _values(values)
    mean = float(x.mean())
    if x.size < 2 or np.ptp(x) == 0:
        return Interval(mean, mean, mean, int(x.size), 0.0, max(int(x.size) - 1, 0))
    low, high = stats.ttest_1samp(x, 0.0).confidence_interval(CONFIDENCE)
    return Interval(mean, float(low), float(high), int(x.size), float(x.std(ddof=1) / math.sqrt(x.size)),
                    int(x.size) - 1)


def paired(a: Sequence[float], b: Sequence[float]) -> Interval:
    """The t-interval of the per-run differences a[i] - b[i] (both from the same runs, in order)."""
    if len(a) != len(b):
        raise ValueError("paired figures need one value of each per run")
    return t_interval([x - y for x, y in zip(a, b)])


def welch(a: Sequence[float], b: Sequence[float]) -> Interval:
    """Welch's 95% interval of mean(a) - mean(b); n is the smaller of the two counts."""
    x, y = _values(a), _values(b)
    difference = float(x.mean() - y.mean())
    n = int(min(x.size, y.size))
    if n < 2:
        return Interval(difference, difference, difference, n)
    # One side without spread (every seed at a horizon of 8 tokens, say) adds nothing to Welch's
    # standard error or degrees of freedom: the interval is the other side's t-interval, shifted.
    # scipy would give the same bounds, after warning of "catastrophic cancellation" in a variance
    # that is exactly zero.
    if np.ptp(y) == 0:
        other = t_interval(x)
        return Interval(difference, other.low - y[0], other.high - y[0], n, other.se, other.df)
    if np.ptp(x) == 0:  # the same, mirrored: mean(a) - mean(b) = -(mean(b) - mean(a))
        mirrored = welch(b, a)
        return Interval(difference, -mirrored.high, -mirrored.low, n, mirrored.se, mirrored.df)
    va, vb = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    df = (va + vb) ** 2 / (va**2 / (x.size - 1) + vb**2 / (y.size - 1))  # Welch-Satterthwaite, as scipy's
    low, high = stats.ttest_ind(x, y, equal_var=False).confidence_interval(CONFIDENCE)
    return Interval(difference, float(low), float(high), n, float(math.sqrt(va + vb)), float(df))


def one_sided_p(interval: Interval, edge: float, above: bool = True) -> float | None:
    """The one-sided p-value against "the quantity is at most `edge`" (for `above`; "at least" for
    not `above`): the t distribution of the interval's degrees of freedom at (estimate - edge) / se.
    None for one run (no spread to test against); 0 or 1 when the runs agree exactly."""
    if interval.one_run:
        return None
    distance = interval.estimate - edge if above else edge - interval.estimate
    if interval.se == 0:
        return 0.0 if distance > 0 else 1.0
    return float(stats.t.sf(distance / interval.se, interval.df))


def holm_adjusted(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's adjusted p-values: the i-th smallest of k tests times (k - i + 1), never below an
    adjusted p of a smaller test, at most 1. A test is rejected at family-wise level alpha exactly
    when its adjusted p is at most alpha (the step-down of `holm`). None stays None."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[i] = running
    return adjusted


def holm(p_values: Sequence[float | None], alpha: float = 1 - CONFIDENCE) -> list[bool]:
    """Holm's step-down over a family of tests: which are rejected at family-wise level `alpha`
    (the smallest p against alpha / k, the next against alpha / (k - 1), ..., stopping at the first
    that fails). A None (a test that could not be run) is neither counted nor rejected."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    rejected = [False] * len(p_values)
    for rank, (p, i) in enumerate(tested):
        if p > alpha / (len(tested) - rank):
            break
        rejected[i] = True
    return rejected


POWER = 0.8
"""The chance a planned number of seeds decides a comparison, if the difference and spread are as
measured: the planners' usual 80%, not the coin flip of a half-width that merely equals the distance."""


def power(distance: float, spread: float, n: int, models: int = 1) -> float:
    """The chance that a 95% interval from n seeds per model lies wholly on the far side of an edge
    `distance` away, when each model's seeds spread with standard deviation `spread`: the noncentral
    t, df n - 1 (one model or paired) or 2n - 2 (two models of equal n and spread, Welch)."""
    df = models * (n - 1)
    ncp = abs(distance) / (spread * math.sqrt(models / n))
    return float(stats.nct.sf(stats.t.ppf((1 + CONFIDENCE) / 2, df), df, ncp))


def seeds_needed(difference: float, spread: float, models: int = 1, most: int = 1000,
                 chance: float = POWER) -> int | None:
    """The fewest seeds (per model) whose 95% interval lies clear of an edge `difference` away with
    probability `chance` (`power`), each model's seeds spreading with standard deviation `spread`.
    None when not even `most` seeds would do; 2 when there is no spread."""
    if spread == 0:
        return 2
    if difference == 0 or not math.isfinite(difference):
        return None
    if power(difference, spread, most, models) < chance:
        return None
    low, high = 2, most  # power grows with n: bisect for the first n that reaches `chance`
    while low < high:
        middle = (low + high) // 2
        low, high = (middle + 1, high) if power(difference, spread, middle, models) < chance else (low, middle)
    return low
