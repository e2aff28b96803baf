"""Exact tests beside the t-intervals: nothing assumed of the seeds' distribution but symmetry or
exchangeability, at the price of a smallest attainable p.

- `sign_flip(values, edge)`: one sample (or the per-run differences of a paired figure) against
  `edge`. Under "the mean is the edge" with a distribution symmetric about it, every assignment of
  signs to the values minus the edge is as likely; the p-value is the share of all 2^n assignments
  whose mean is at least (at most) the one observed. n = 5 gives p ≥ 1/32 one-sided.
- `permutation(a, b, edge)`: two models, mean(a) − mean(b) against `edge`. Under "the difference is
  the edge" with a − edge and b exchangeable, every split of the pooled runs into groups of the two
  sizes is as likely; the p-value is the share of all C(n_a + n_b, n_a) splits whose difference is at
  least (at most) the one observed. 5 against 5 gives p ≥ 1/252.

Both enumerate every assignment (n ≤ 20 per side here), so the same values give the same p on
every machine. Out: an `ExactTest`, the one-sided p-values of the claimed direction and of the other,
the same shape of result as a t-interval's (`rnnlm_study.judging.rules.decide` takes either).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

TIES = 1e-12
"""Means this close to the observed one count as equal to it (sums of floats in another order)."""


@dataclass(frozen=True)
class ExactTest:
    """One-sided p-values of an exact test: `above`, of "the quantity exceeds the edge" (against at
    most the edge), and `below`, of the opposite; `smallest`, the least one-sided p this n allows."""

    above: float
    below: float
    smallest: float
    n: int


def _p_values(statistics: np.ndarray, observed: float) -> tuple[float, float]:
    scale = max(1.0, abs(observed))
    above = float(np.mean(statistics >= observed - TIES * scale))
    below = float(np.mean(statistics <= observed + TIES * scale))
    return above, below


def sign_flip(values: Sequence[float], edge: float = 0.0) -> ExactTest:
    """The sign-flip test of the mean of `values` against `edge` (module docstring)."""
    x = np.asarray(values, dtype=float) - edge
    if x.size > 20:
        raise ValueError(f"{x.size} values: the exact sign-flip test enumerates 2^n assignments, n at most 20")
    above, below = _p_values(_signs(x.size) @ x / x.size, float(x.mean()))
    return ExactTest(above, below, 1 / 2**x.size, int(x.size))


def permutation(a: Sequence[float], b: Sequence[float], edge: float = 0.0) -> ExactTest:
    """The permutation test of mean(a) − mean(b) against `edge` (module docstring)."""
    x, y = np.asarray(a, dtype=float) - edge, np.asarray(b, dtype=float)
    pooled, total = np.concatenate([x, y]), x.size + y.size
    if math.comb(total, x.size) > 200_000:
        raise ValueError(f"{x.size} against {y.size} runs: too many splits to enumerate")
    first = _splits(total, x.size)
    sums = first @ pooled
    differences = sums / x.size - (pooled.sum() - sums) / y.size
    above, below = _p_values(differences, float(x.mean() - y.mean()))
    return ExactTest(above, below, 1 / len(first), int(min(x.size, y.size)))


# The report asks for the same few shapes hundreds of times (every row at every edge of its grid), so
# each table of assignments is built once; they are read-only, and their rows keep
# itertools' order, so the sums, and the p-values, are the same bytes as without the cache.


@functools.cache
def _signs(n: int) -> np.ndarray:
    """Every assignment of signs to n values, in itertools.product's order: (2^n, n) of ±1.0."""
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=n))).reshape(2**n, n)
    signs.flags.writeable = False
    return signs


@functools.cache
def _splits(total: int, first: int) -> np.ndarray:
    """Every split of `total` pooled runs that gives `first` of them to the first model, in
    itertools.combinations' order: (C(total, first), total) of bool, True where the run is the first's."""
    chosen = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(total), first)),
                         dtype=np.intp).reshape(-1, first)  # (splits, first)
    table = np.zeros((len(chosen), total), dtype=bool)
    table[np.arange(len(chosen))[:, None], chosen] = True
    table.flags.writeable = False
    return table
