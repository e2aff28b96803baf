"""The two kinds of rule a claim's comparison is judged by, and how one claim's rows are decided
together.

In:  an `Interval` (`rnnlm_study.judging.stats`: estimate, 95% bounds, n, standard error, degrees of
     freedom), or an exact test's one-sided p-values (`rnnlm_study.judging.exact`).
Out: the rule's sentence ("> +0.05 bits/char"), the one-sided p-values of the claimed direction and
     of the other, the verdict of the 95% interval alone, and the signed distance to the edge.

- `Above(edge, unit)`: the claim "the quantity exceeds `edge`" (a margin: the smallest difference
  that counts). Supported when the interval lies wholly above the edge, contradicted when wholly
  below.
- `Within(low, high, unit)`: the claim "the quantity lies inside [low, high]" (agreement within a
  tolerance). Supported when the interval lies wholly inside (two one-sided tests), contradicted
  when wholly outside.

A claim's rows are decided together (`decide`): each row's directional p (the smaller of its two
one-sided p-values, doubled, which is below 0.05 exactly when its 95% interval clears the edge)
goes through Holm's step-down over the claim's rows, so a claim's row verdicts hold at a family-wise
error of 5% together; the adjusted p is the one that decides. The edges and the level come from the
registered rules (`rnnlm_study.registration`); `at(edge)` gives the same rule at another edge (the
sensitivity grid).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from rnnlm_study.judging.stats import CONFIDENCE, Interval, holm_adjusted, one_sided_p
from rnnlm_study.judging.verdicts import CONTRADICTED, SUPPORTED, Verdict, inconclusive

UNITS = {"bits per character": "bits/char", "nats per character": "nats/char", "nats per token": "nats/token"}
"""The registered units, as a rule's sentence writes them."""


@dataclass(frozen=True)
class Above:
    """The quantity exceeds `edge` (in `unit`)."""

    edge: float
    unit: str = ""

    def sentence(self) -> str:
        return f"> {self.edge:+.2f}" + (f" {UNITS.get(self.unit, self.unit)}" if self.unit else "")

    def at(self, edge: float) -> Above:
        return replace(self, edge=edge)

    def p(self, interval: Interval) -> float | None:
        """One-sided p of the claim (against "at most the edge")."""
        return one_sided_p(interval, self.edge, above=True)

    def p_against(self, interval: Interval) -> float | None:
        """One-sided p of the opposite (against "at least the edge")."""
        return one_sided_p(interval, self.edge, above=False)

    def verdict(self, interval: Interval) -> Verdict:
        """What the 95% interval alone says."""
        if interval.one_run:
            return inconclusive(1)
        if interval.low > self.edge:
            return SUPPORTED
        if interval.high < self.edge:
            return CONTRADICTED
        return inconclusive(interval.n)

    def distance(self, interval: Interval) -> float:
        """How far the estimate lies from the edge (the difference more seeds must resolve)."""
        return interval.estimate - self.edge


@dataclass(frozen=True)
class Within:
    """The quantity lies inside [low, high] (in `unit`)."""

    low: float
    high: float
    unit: str = ""

    def sentence(self) -> str:
        return f"inside [{self.low:+.2f}, {self.high:+.2f}]" + (f" {UNITS.get(self.unit, self.unit)}" if self.unit else "")

    def at(self, half_width: float) -> Within:
        """The band ±`half_width` (the registered grid gives half-widths)."""
        return replace(self, low=-half_width, high=half_width)

    def p(self, interval: Interval) -> float | None:
        """Two one-sided tests: the larger of the p-values against "at most low" and "at least high"."""
        below, above = one_sided_p(interval, self.low, above=True), one_sided_p(interval, self.high, above=False)
        return None if below is None or above is None else max(below, above)

    def p_against(self, interval: Interval) -> float | None:
        """The smaller of the p-values against "at least low" and "at most high" (outside, either side)."""
        below, above = one_sided_p(interval, self.low, above=False), one_sided_p(interval, self.high, above=True)
        return None if below is None or above is None else min(below, above)

    def verdict(self, interval: Interval) -> Verdict:
        if interval.one_run:
            return inconclusive(1)
        if self.low <= interval.low and interval.high <= self.high:
            return SUPPORTED
        if interval.high < self.low or interval.low > self.high:
            return CONTRADICTED
        return inconclusive(interval.n)

    def distance(self, interval: Interval) -> float:
        """How far the estimate lies from the nearer edge."""
        x = interval.estimate
        return min(x - self.low, self.high - x) if self.low <= x <= self.high else min(abs(x - self.low),
                                                                                      abs(x - self.high))


Rule = Above | Within


def directional(p: float | None, p_against: float | None) -> float | None:
    """A row's two-sided test of "on one side of the edge": the smaller one-sided p, doubled."""
    return None if p is None or p_against is None else min(1.0, 2 * min(p, p_against))


@dataclass(frozen=True)
class Decision:
    """One row's verdict after Holm's step-down, and the adjusted p that decided it."""

    verdict: Verdict
    adjusted_p: float | None


def decide(tests: Sequence[tuple[float | None, float | None, int]], level: float = 1 - CONFIDENCE) -> list[Decision]:
    """The verdicts of one claim's rows under Holm's step-down at family-wise `level`, from each row's
    (p of the claim, p of the opposite, n): supported or contradicted where a row's directional test
    survives the adjustment, else inconclusive at its n. A row without p-values (one run) is
    inconclusive at its n and left out of the family."""
    adjusted = holm_adjusted([directional(p, against) for p, against, _ in tests])
    decisions = []
    for (p, against, n), q in zip(tests, adjusted):
        if q is not None and q <= level:
            decisions.append(Decision(SUPPORTED if p < against else CONTRADICTED, q))
        else:
            decisions.append(Decision(inconclusive(n), q))
    return decisions


def interval_tests(rule_intervals: Sequence[tuple[Rule, Interval]]) -> list[tuple[float | None, float | None, int]]:
    """`decide`'s input for rows judged by their t-intervals."""
    return [(rule.p(interval), rule.p_against(interval), interval.n) for rule, interval in rule_intervals]
