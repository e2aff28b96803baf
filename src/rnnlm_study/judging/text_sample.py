"""The validation text as a sample too: a comparison's interval when both the seeds and the text are
drawn again.

Every t-interval of the study is over training seeds; the validation split is one fixed text. Each
run's reports/validation_blocks.csv (`rnnlm.evaluation.blocks`) holds each scorer's nats per block of
2,048 characters, so a figure in bits per character can be recomputed on any multiset of blocks. A
replicate draws the blocks with replacement (the same draw for every run of the comparison, both
models and both figures of a run) and each model's seeds with replacement, and recomputes the
comparison: each run's figure on the drawn blocks (its nats summed over them over its characters
summed over them), averaged over the drawn seeds, differenced between the models. The 2.5% and
97.5% quantiles of the replicates are the joint interval; the same with the blocks held fixed is
the seeds-only bootstrap, so the ratio of the two says what sampling the text adds.

In:  per model the runs' block tables and a figure as scorer weights ({"stateless": 1, "bigram": -1}:
     stateless − bigram), the registered replicates and generator seed.
Out: `TextInterval`: the joint percentile interval, the seeds-only one, their half-widths.
A fixed generator (the registered seed and the comparison's label) gives the same bytes each time.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rnnlm.evaluation.blocks import BlockTable

Weights = Mapping[str, float]
"""A figure as a weighted sum of scorers' nats (over the same characters), in bits per character."""


@dataclass(frozen=True)
class TextInterval:
    low: float
    high: float
    seeds_low: float  # the same bootstrap with the blocks held fixed
    seeds_high: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    @property
    def seeds_half_width(self) -> float:
        return (self.seeds_high - self.seeds_low) / 2

    @property
    def wider(self) -> float:
        """How many times wider the joint interval is than the seeds-only one."""
        return self.half_width / self.seeds_half_width if self.seeds_half_width > 0 else math.inf


def _run_blocks(table: BlockTable, weights: Weights) -> tuple[np.ndarray, np.ndarray]:
    """(the figure's nats per block, the characters per block) of one run, each (K,)."""
    nats = sum(w * np.asarray(table.nats[name]) for name, w in weights.items())
    return np.asarray(nats, dtype=float), np.asarray(table.chars, dtype=float)


def _model_means(runs: Sequence[BlockTable], weights: Weights, counts: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """Per replicate, the mean over drawn seeds of each run's figure on the drawn blocks.
    counts: (R, K) how often each block is drawn; seeds: (R, n) the drawn runs. -> (R,)"""
    nats, chars = zip(*(_run_blocks(t, weights) for t in runs))
    per_run = (counts @ np.stack(nats).T) / (counts @ np.stack(chars).T) / math.log(2)  # (R, n_runs)
    return np.take_along_axis(per_run, seeds, axis=1).mean(axis=1)


def text_interval(label: str, first: Sequence[BlockTable], weights: Weights, replicates: int, generator_seed: int,
                  second: Sequence[BlockTable] = (), second_weights: Weights | None = None,
                  confidence: float = 0.95) -> TextInterval | None:
    """The joint and seeds-only percentile intervals of mean(first's figure) − mean(second's figure)
    (of the first's figure alone when `second` is empty), or None when the runs' blocks disagree
    (another number or placement of blocks)."""
    tables = [*first, *second]
    if not first or any(t.first_char != tables[0].first_char for t in tables):
        return None
    rng = np.random.default_rng([generator_seed, zlib.crc32(label.encode())])
    blocks = len(tables[0].first_char)
    counts = np.stack([np.bincount(draw, minlength=blocks)
                       for draw in rng.integers(blocks, size=(replicates, blocks))]).astype(float)  # (R, K)
    fixed = np.ones((replicates, blocks))
    draws = {}
    for name, runs in (("first", first), ("second", second)):
        if runs:
            draws[name] = rng.integers(len(runs), size=(replicates, len(runs)))

    def statistic(c: np.ndarray) -> np.ndarray:
        value = _model_means(first, weights, c, draws["first"])
        if second:
            value = value - _model_means(second, second_weights or weights, c, draws["second"])
        return value

    tail = (1 - confidence) / 2
    low, high = np.quantile(statistic(counts), [tail, 1 - tail])
    seeds_low, seeds_high = np.quantile(statistic(fixed), [tail, 1 - tail])
    return TextInterval(float(low), float(high), float(seeds_low), float(seeds_high))
