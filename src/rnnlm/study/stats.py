"""Intervals over seeds, and the three verdict words they decide.

In:  a figure's values over a model's seeds (or the per-seed differences of two figures of the
     same weights, or two models' values).
Out: an `Interval` (estimate, 95% bounds, n) and, against a rule, one of *supported*,
     *contradicted* or *inconclusive at n = k*.

- `t_interval(values)`: Student's t-interval of the mean (scipy.stats), right for the 3-10 seeds
  a study affords (a bootstrap has too few resamples there).
- `paired(a, b)`: the t-interval of the per-run differences a - b, for two figures of the same
  weights (stateless and stateful of one checkpoint, epoch 1 and the last epoch of one run).
- `welch(a, b)`: Welch's interval of mean(a) - mean(b), for two models (unequal spreads and n).
- One run gives no spread: its interval is the value alone, flagged `one_run`, and every rule
  calls it inconclusive at n = 1. All runs equal (no spread at all) give a zero-width interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95

SUPPORTED, CONTRADICTED, MIXED, INCONCLUSIVE, NOT_MEASURED = (
    "supported", "contradicted", "mixed", "inconclusive", "not measured yet")


@dataclass(frozen=True)
class Interval:
    """A 95% interval around `estimate`, from `n` runs (for two models, the smaller n)."""

    estimate: float
    low: float
    high: float
    n: int

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
        return Interval(mean, mean, mean, int(x.size))
    low, high = stats.ttest_1samp(x, 0.0).confidence_interval(CONFIDENCE)
    return Interval(mean, float(low), float(high), int(x.size))


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
        return Interval(difference, other.low - y[0], other.high - y[0], n)
    if np.ptp(x) == 0:  # the same, mirrored: mean(a) - mean(b) = -(mean(b) - mean(a))
        mirrored = welch(b, a)
        return Interval(difference, -mirrored.high, -mirrored.low, n)
    low, high = stats.ttest_ind(x, y, equal_var=False).confidence_interval(CONFIDENCE)
    return Interval(difference, float(low), float(high), n)


def sign_verdict(interval: Interval, above: float = 0.0, strict: bool = True) -> str:
    """The claim "the quantity is above `above`" (or at least `above` when not `strict`)."""
    if interval.one_run:
        return f"{INCONCLUSIVE} at n = 1"
    holds = interval.low > above if strict else interval.low >= above
    fails = interval.high <= above if strict else interval.high < above
    return SUPPORTED if holds else CONTRADICTED if fails else f"{INCONCLUSIVE} at n = {interval.n}"


def band_verdict(interval: Interval, low: float, high: float) -> str:
    """The claim "the quantity lies within [low, high]": supported when the whole interval does,
    contradicted when the whole interval lies outside, inconclusive when it straddles an edge."""
    if interval.one_run:
        return f"{INCONCLUSIVE} at n = 1"
    if low <= interval.low and interval.high <= high:
        return SUPPORTED
    if interval.high < low or interval.low > high:
        return CONTRADICTED
    return f"{INCONCLUSIVE} at n = {interval.n}"


def combine(verdicts: Sequence[str]) -> str:
    """A claim's verdict from its comparisons' (those not measured yet left out): all supported, all
    contradicted, supported beside contradicted (mixed), else inconclusive at the smallest n that
    left one undecided."""
    verdicts = [v for v in verdicts if v != NOT_MEASURED]
    if not verdicts:
        return NOT_MEASURED
    if all(v == SUPPORTED for v in verdicts):
        return SUPPORTED
    if all(v == CONTRADICTED for v in verdicts):
        return CONTRADICTED
    if SUPPORTED in verdicts and CONTRADICTED in verdicts:
        return MIXED
    ns = [int(v.rsplit(" ", 1)[-1]) for v in verdicts if v.startswith(INCONCLUSIVE)]
    return f"{INCONCLUSIVE} at n = {min(ns)}"


def seeds_needed(difference: float, spread: float, models: int = 1, most: int = 1000) -> int | None:
    """How many seeds (per model) a 95% t-interval needs for its half-width to fall below
    |difference|, when each model's seeds spread with standard deviation `spread`: the smallest n
    with t(0.975, df) * spread * sqrt(models / n) < |difference| (`models` 2 for Welch between two
    models of equal n and spread, df = 2n - 2; 1 for a one-sample or paired interval, df = n - 1).
    None when not even `most` seeds would do; 2 when there is no spread."""
    if spread == 0:
        return 2
    if difference == 0 or not math.isfinite(difference):
        return None
    for n in range(2, most + 1):
        df = models * n - models
        if stats.t.ppf((1 + CONFIDENCE) / 2, df) * spread * math.sqrt(models / n) < abs(difference):
            return n
    return None
