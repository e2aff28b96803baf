"""The two kinds of rule a claim's comparison is judged by, each stating its question and its edge.

In:  an `Interval` (`rnnlm.study.stats`: estimate, 95% bounds, n, standard error, degrees of freedom).
Out: the rule's sentence ("> +0.05"), the one-sided p-value of the claimed direction and of the
     other, the verdict of the 95% interval alone, and the signed distance to the edge that decides.

- `Above(edge)`: the claim "the quantity exceeds `edge`" (a margin: the smallest difference that
  counts). Supported when the interval lies wholly above the edge, contradicted when wholly below.
- `Within(low, high)`: the claim "the quantity lies inside [low, high]" (agreement within a
  tolerance). Supported when the interval lies wholly inside (two one-sided tests), contradicted when
  wholly outside.

A claim's rows are then decided together (`decide`): each row's directional test (the smaller of its
two one-sided p-values, doubled, which is below 0.05 exactly when its 95% interval clears the edge)
goes through Holm's step-down over the claim's rows, so a claim's row verdicts hold at a family-wise
error of 5% together, not 5% each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rnnlm.study.stats import CONTRADICTED, INCONCLUSIVE, SUPPORTED, Interval, holm, one_sided_p


@dataclass(frozen=True)
class Above:
    """The quantity exceeds `edge`."""

    edge: float

    def sentence(self) -> str:
        return f"> {self.edge:+.2f}"

    def p(self, interval: Interval) -> float | None:
        """One-sided p of the claim (against "at most the edge")."""
        return one_sided_p(interval, self.edge, above=True)

    def p_against(self, interval: Interval) -> float | None:
        """One-sided p of the opposite (against "at least the edge")."""
        return one_sided_p(interval, self.edge, above=False)

    def verdict(self, interval: Interval) -> str:
        """What the 95% interval alone says."""
        if interval.one_run:
            return f"{INCONCLUSIVE} at n = 1"
        if interval.low > self.edge:
            return SUPPORTED
        if interval.high < self.edge:
            return CONTRADICTED
        return f"{INCONCLUSIVE} at n = {interval.n}"

    def distance(self, interval: Interval) -> float:
        """How far the estimate lies from the edge (the difference more seeds must resolve)."""
        return interval.estimate - self.edge


@dataclass(frozen=True)
class Within:
    """The quantity lies inside [low, high]."""

    low: float
    high: float

    def sentence(self) -> str:
        return f"inside [{self.low:+.2f}, {self.high:+.2f}]"

    def p(self, interval: Interval) -> float | None:
        """Two one-sided tests: the larger of the p-values against "at most low" and "at least high"."""
        below, above = one_sided_p(interval, self.low, above=True), one_sided_p(interval, self.high, above=False)
        return None if below is None or above is None else max(below, above)

    def p_against(self, interval: Interval) -> float | None:
        """The smaller of the p-values against "at least low" and "at most high" (outside, either side)."""
        below, above = one_sided_p(interval, self.low, above=False), one_sided_p(interval, self.high, above=True)
        return None if below is None or above is None else min(below, above)

    def verdict(self, interval: Interval) -> str:
        if interval.one_run:
            return f"{INCONCLUSIVE} at n = 1"
        if self.low <= interval.low and interval.high <= self.high:
            return SUPPORTED
        if interval.high < self.low or interval.low > self.high:
            return CONTRADICTED
        return f"{INCONCLUSIVE} at n = {interval.n}"

    def distance(self, interval: Interval) -> float:
        """How far the estimate lies from the nearer edge."""
        x = interval.estimate
        return min(x - self.low, self.high - x) if self.low <= x <= self.high else min(abs(x - self.low),
                                                                                      abs(x - self.high))


Rule = Above | Within


def decide(rule_intervals: Sequence[tuple[Rule, Interval]]) -> list[str]:
    """The verdicts of one claim's rows under Holm's step-down at a family-wise 5% (module docstring):
    supported or contradicted where a row's directional test survives the adjustment, else
    inconclusive at its n. A row of one run is inconclusive at n = 1 and left out of the family."""
    tests: list[float | None] = []
    for rule, interval in rule_intervals:
        p, p_against = rule.p(interval), rule.p_against(interval)
        tests.append(None if p is None or p_against is None else min(1.0, 2 * min(p, p_against)))
    rejected = holm(tests)
    verdicts = []
    for (rule, interval), test, decided in zip(rule_intervals, tests, rejected):
        if test is None:
            verdicts.append(f"{INCONCLUSIVE} at n = {interval.n}")
        elif decided:
            verdicts.append(SUPPORTED if rule.p(interval) < rule.p_against(interval) else CONTRADICTED)
        else:
            verdicts.append(f"{INCONCLUSIVE} at n = {interval.n}")
    return verdicts
