"""What the study's claims are judged from and into: the runs (`Evidence`) and one quantity with its
per-run values, interval, rule, exact test, text interval and verdicts (`Comparison`); with the
builders every claim's judge uses (one model's figure, the paired difference of two figures of the
same runs, the difference of two models' figures, the seeds that would decide it).
`rnnlm_study.judging.claims` holds the claims and their judges; `rnnlm_study.judging.findings` decides them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from rnnlm.evaluation.blocks import BlockTable
from rnnlm_study.judging.exact import ExactTest, permutation, sign_flip
from rnnlm_study.judging.rules import Decision, Rule
from rnnlm_study.judging.stats import Interval, seeds_needed, t_interval, welch
from rnnlm_study.judging.text_sample import TextInterval, Weights, text_interval
from rnnlm_study.judging.verdicts import NOT_MEASURED, Verdict

FIGURE_WEIGHTS: dict[str, Weights] = {
    "stateful_bpc": {"stateful": 1.0},
    "stateless_bpc": {"stateless": 1.0},
    "gap_bpc": {"stateless": 1.0, "stateful": -1.0},
    "stateless_minus_bigram_bpc": {"stateless": 1.0, "bigram": -1.0},
    "first_epoch_stateful_bpc": {"first_epoch_stateful": 1.0},
}
"""The figures a run's validation blocks can recompute, as weights of the blocks' scorers."""


@dataclass(frozen=True)
class TextSampling:
    """How the text is resampled (the registration's `text_sample`)."""

    replicates: int
    generator_seed: int


@dataclass(frozen=True)
class Evidence:
    """What the claims are judged from."""

    frame: pd.DataFrame  # runs_frame: one row per full-scale run
    epochs: pd.DataFrame  # epochs_frame: one row per epoch of each run
    shapes: dict[str, tuple]  # model -> (cell, embd, hidden, layers), pairing the two tokenizations
    blocks: Mapping[tuple[str, int], BlockTable] = field(default_factory=dict)  # (model, seed) -> its blocks
    sampling: TextSampling | None = None  # None: no text intervals

    def models(self) -> list[str]:
        return list(dict.fromkeys(self.frame["model"]))

    def values(self, model: str, figure: str) -> list[float]:
        return self.frame.loc[self.frame["model"] == model, figure].dropna().tolist()

    def mean(self, model: str, figure: str) -> float:
        values = self.values(model, figure)
        return sum(values) / len(values) if values else math.nan

    def n(self, model: str) -> int:
        return int((self.frame["model"] == model).sum())

    def first(self, model: str, column: str):
        return self.frame.loc[self.frame["model"] == model, column].iloc[0]

    def seeds(self, model: str) -> list[int]:
        return [int(s) for s in self.frame.loc[self.frame["model"] == model, "seed"]]

    def where(self, keep: pd.Series) -> Evidence:
        """The runs `keep` selects (a boolean Series over the frame), with their epochs and blocks."""
        frame = self.frame[keep]
        runs = set(zip(frame["model"], frame["seed"]))
        kept = pd.Series([(m, s) in runs for m, s in zip(self.epochs["model"], self.epochs["seed"])],
                         index=self.epochs.index, dtype=bool)
        epochs = self.epochs[kept]
        return Evidence(frame, epochs, self.shapes, {k: v for k, v in self.blocks.items() if k in runs}, self.sampling)

    def trained(self, recipes: tuple[str, ...]) -> Evidence:
        """The runs whose training recipe (`train.state`: "reset" or "carried") is one of `recipes`."""
        return self.where(self.frame["training"].isin(recipes))

    def run_blocks(self, model: str) -> list[BlockTable] | None:
        """The block tables of every run of `model` in the frame's order, or None when one lacks them."""
        tables = [self.blocks.get((model, seed)) for seed in self.seeds(model)]
        return None if not tables or any(t is None for t in tables) else tables


@dataclass(frozen=True)
class Comparison:
    """One quantity a claim turns on: its per-run values, interval over seeds, rule, what it decides."""

    label: str
    interval: Interval
    rule: Rule
    rule_name: str  # the registered rule of the claim it is judged by
    models: tuple[str, ...]  # the one model, or the two (first − second)
    values: tuple[tuple[float, ...], ...]  # per run: one tuple (a figure or a paired difference), or two (Welch)
    needed: int | None  # seeds per model to decide it at 80% power, at the difference and spread measured
    kind: str = "one"  # "one" (one sample or paired), "welch" (two models) or "band" (claim 6's curve)
    note: str = ""
    text: TextInterval | None = None  # the interval with the text resampled too, where the runs have blocks
    decision: Decision | None = None  # after Holm's step-down over the claim's rows (`rnnlm_study.judging.findings`)
    exact_decision: Decision | None = None
    grid: tuple[tuple[float, Verdict], ...] = ()  # the verdict at each edge of the rule's sensitivity grid

    @property
    def measured(self) -> bool:
        return not math.isnan(self.interval.estimate)

    @property
    def verdict(self) -> Verdict:
        return self.decision.verdict if self.decision is not None else NOT_MEASURED

    @property
    def p(self) -> float | None:
        """One-sided p-value of the claimed direction."""
        return self.rule.p(self.interval) if self.measured else None

    @property
    def alone(self) -> Verdict:
        """The verdict of this comparison's 95% interval by itself (no adjustment)."""
        return self.rule.verdict(self.interval) if self.measured else NOT_MEASURED

    def exact(self, rule: Rule | None = None) -> ExactTest | None:
        """The exact test of the row at `rule`'s edge (the row's own by default); None for a band
        rule (no exact test covers the study's one-batch noise) or one run."""
        rule = rule or self.rule
        if self.kind == "band" or not self.measured or self.interval.one_run:
            return None
        if self.kind == "welch":
            return permutation(self.values[0], self.values[1], rule.edge)
        return sign_flip(self.values[0], rule.edge)


def rounded(x: float) -> float:
    return float(f"{x:.6g}")


def sample_sd(values: list[float]) -> float | None:
    return float(np.std(values, ddof=1)) if len(values) > 1 else None


def needed_one(values: list[float], distance: float) -> int | None:
    """Seeds for a one-sample (or paired) interval to clear `distance` at the spread of `values`."""
    spread = sample_sd(values)
    return None if spread is None else seeds_needed(distance, spread)


def needed_two(a: list[float], b: list[float], distance: float) -> int | None:
    """Seeds per model for Welch's interval to clear `distance`, each model at the spread measured
    (a model with one run assumed to spread like the other)."""
    spreads = [s for s in (sample_sd(a), sample_sd(b)) if s is not None]
    if not spreads:
        return None
    return seeds_needed(distance, math.sqrt(sum(s * s for s in spreads) / len(spreads)), models=2)


def _text(evidence: Evidence, label: str, figure: str, first: str, second: str | None = None,
          second_figure: str | None = None) -> TextInterval | None:
    """The seeds-and-text interval of a row, where the figure is one the blocks recompute and every
    run has its blocks."""
    weights = FIGURE_WEIGHTS.get(figure)
    other = FIGURE_WEIGHTS.get(second_figure or figure)
    if evidence.sampling is None or weights is None or other is None:
        return None
    tables = evidence.run_blocks(first)
    others = evidence.run_blocks(second) if second is not None else []
    if tables is None or others is None:
        return None
    s = evidence.sampling
    return text_interval(label, tables, weights, s.replicates, s.generator_seed, others, other)


def single(evidence: Evidence, model: str, figure: str, label: str, rule: Rule, rule_name: str) -> Comparison:
    """One model's figure over its seeds, one sample."""
    values = evidence.values(model, figure)
    if not values:
        return Comparison(label, Interval(math.nan, math.nan, math.nan, 0), rule, rule_name, (model,), ((),), None)
    interval = t_interval(values)
    return Comparison(label, interval, rule, rule_name, (model,), (tuple(values),),
                      needed_one(values, rule.distance(interval)), text=_text(evidence, label, figure, model))


def paired(evidence: Evidence, model: str, figure: str, minus: str, label: str, rule: Rule,
           rule_name: str) -> Comparison | None:
    """Per run of `model`, `figure` − `minus` (two figures of the same runs), or None when no run has both."""
    rows = evidence.frame[(evidence.frame["model"] == model) & evidence.frame[figure].notna()
                          & evidence.frame[minus].notna()]
    if rows.empty:
        return None
    differences = (rows[figure] - rows[minus]).tolist()
    interval = t_interval(differences)
    text = None
    tables = [evidence.blocks.get((model, int(s))) for s in rows["seed"]]
    if evidence.sampling is not None and all(t is not None for t in tables) and figure in FIGURE_WEIGHTS \
            and minus in FIGURE_WEIGHTS:
        weights = dict(FIGURE_WEIGHTS[figure])
        for name, w in FIGURE_WEIGHTS[minus].items():
            weights[name] = weights.get(name, 0.0) - w
        text = text_interval(label, tables, weights, evidence.sampling.replicates, evidence.sampling.generator_seed)
    return Comparison(label, interval, rule, rule_name, (model,), (tuple(differences),),
                      needed_one(differences, rule.distance(interval)), text=text)


def between(evidence: Evidence, larger: str, smaller: str, figure: str, label: str, rule: Rule, rule_name: str,
            unit: str) -> Comparison:
    """mean(larger's figure) − mean(smaller's figure), Welch."""
    a, b = evidence.values(larger, figure), evidence.values(smaller, figure)
    interval = welch(a, b)
    full = f"{label}: {larger} − {smaller} ({unit})"
    return Comparison(full, interval, rule, rule_name, (larger, smaller), (tuple(a), tuple(b)),
                      needed_two(a, b, rule.distance(interval)), kind="welch",
                      text=_text(evidence, full, figure, larger, smaller))


def span(values: list[float]) -> str:
    if not values:
        return "—"
    return f"{min(values):.0f}" if min(values) == max(values) else f"{min(values):.0f}–{max(values):.0f}"


def grus(evidence: Evidence) -> list[str]:
    """The GRU models among the runs: claims 1, 2 and 6 are the study's words about its GRUs, so a
    model of another cell (Leviathan's LSTM, the tanh RNN, a new cell) is outside them by their
    text; the runs are those of the study's recipe (`Claim.recipes`)."""
    return [m for m in evidence.models() if evidence.first(m, "cell") == "gru"]


def families(evidence: Evidence) -> dict[str, list[str]]:
    """The GRU models per tokenization, smallest to largest by parameters (families of two or more)."""
    grouped: dict[str, list[str]] = {}
    for model in grus(evidence):
        grouped.setdefault(evidence.first(model, "tokens"), []).append(model)
    return {k: sorted(v, key=lambda m: evidence.first(m, "parameters")) for k, v in sorted(grouped.items())
            if len(v) > 1}
