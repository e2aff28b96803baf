"""What the study's claims are judged from and into: the runs (`Evidence`), one quantity with its
interval, rule and verdict (`Comparison`), a claim's comparisons and what they show (`Judgement`),
the claim itself (`Claim`) and its verdict (`Finding`); with the helpers every claim's judge uses
(one model's figure, the difference of two models' figures, the seeds that would decide it).
`rnnlm.study.findings` holds the claims and their judges.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from rnnlm.reporting.markdown import table_head
from rnnlm.study.rules import Rule
from rnnlm.study.stats import (CONTRADICTED, NOT_MEASURED, SUPPORTED, Interval, combine, seeds_needed, t_interval,
                               welch)

@dataclass(frozen=True)
class Evidence:
    """What the claims are judged from."""

    frame: pd.DataFrame  # runs_frame: one row per full-scale run
    epochs: pd.DataFrame  # epochs_frame: one row per epoch of each run
    shapes: dict[str, tuple]  # model -> (cell, embd, hidden, layers), pairing the two tokenizations

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

    def trained(self, recipes: tuple[str, ...]) -> Evidence:
        """The runs whose training recipe (`train.state`: "reset" or "carried") is one of `recipes`."""
        keep = self.frame["training"].isin(recipes)
        models = set(self.frame.loc[keep, "model"])
        return Evidence(self.frame[keep], self.epochs[self.epochs["model"].isin(models)], self.shapes)


@dataclass(frozen=True)
class Comparison:
    """One quantity a claim turns on, its interval over seeds, its rule and what it decides."""

    label: str
    interval: Interval
    rule: Rule
    needed: int | None  # seeds per model to decide it at 80% power, at the difference and spread measured
    note: str = ""
    verdict: str = ""  # after Holm's step-down over the claim's comparisons (`Finding.judged`)

    @property
    def p(self) -> float | None:
        """One-sided p-value of the claimed direction."""
        return None if math.isnan(self.interval.estimate) else self.rule.p(self.interval)

    @property
    def alone(self) -> str:
        """The verdict of this comparison's 95% interval by itself (no adjustment)."""
        return NOT_MEASURED if math.isnan(self.interval.estimate) else self.rule.verdict(self.interval)

    def row(self) -> str:
        needed = "—" if self.needed is None else f"{self.needed}"
        hw = "—" if self.interval.one_run else f"{self.interval.half_width:.3f}"
        estimate = "—" if math.isnan(self.interval.estimate) else f"{self.interval.estimate:+.3f}"
        p = "—" if self.p is None else ("< 0.001" if self.p < 0.001 else f"{self.p:.3f}")
        alone = f"; {self.alone} at 95% alone" if self.alone != self.verdict and self.verdict != NOT_MEASURED else ""
        note = "; ".join(x for x in (self.note, alone.lstrip("; ")) if x)
        return (f"| {self.label} | {estimate} | {hw} | {self.interval.n} | {self.rule.sentence()} | {p} | "
                f"{self.verdict}{f' ({note})' if note else ''} | {needed} |")

    def record(self) -> dict[str, object]:
        finite = not math.isnan(self.interval.estimate)
        return {"comparison": self.label, "rule": self.rule.sentence(),
                "estimate": rounded(self.interval.estimate) if finite else None,
                "low": rounded(self.interval.low) if finite and not self.interval.one_run else None,
                "high": rounded(self.interval.high) if finite and not self.interval.one_run else None,
                "n": self.interval.n, "p_one_sided": None if self.p is None else rounded(self.p),
                "verdict": self.verdict, "verdict_code": verdict_code(self.verdict), "verdict_95_alone": self.alone,
                "seeds_to_decide": self.needed}


COMPARISON_HEADER = table_head(["comparison", "estimate", "± (95%)", "n", "rule", "p (one-sided)",
                                "verdict (Holm, 5% per claim)", "seeds to decide (80% power)"], "lrrrlrlr")


def rounded(x: float) -> float:
    return float(f"{x:.6g}")


def verdict_code(verdict: str) -> int:
    """A verdict as a number `dvc metrics diff` can show: 1 supported, -1 contradicted, 0 otherwise."""
    return 1 if verdict == SUPPORTED else -1 if verdict == CONTRADICTED else 0


@dataclass(frozen=True)
class Judgement:
    """What one claim's judge found: its comparisons, tables and the sentence of insight."""

    comparisons: list[Comparison]
    insight: str
    table: list[str] = field(default_factory=list)  # the figures behind the comparisons
    extra: list[str] = field(default_factory=list)  # further Markdown (claim 6's curve and prediction check)
    record: dict[str, object] = field(default_factory=dict)  # further machine-readable figures


@dataclass(frozen=True)
class Claim:
    """A claim of the study as we test it: its words, the question our rule asks, the rule, why its
    edge is where it is, the judge that measures it, and the training recipes whose runs it reads (the
    study's claims are about models trained as the study trains them: each window from a zero state)."""

    text: str
    question: str
    rule: str
    why: str
    judge: Callable[[Evidence], Judgement]
    recipes: tuple[str, ...] = ("reset",)


@dataclass(frozen=True)
class Finding:
    """One claim and what the numbers say about it."""

    number: int
    claim: Claim
    judged: Judgement

    @property
    def comparisons(self) -> list[Comparison]:
        return self.judged.comparisons

    @property
    def verdict(self) -> str:
        return combine([c.verdict for c in self.comparisons])


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


def single(label: str, values: list[float], rule: Rule) -> Comparison:
    interval = t_interval(values)
    return Comparison(label, interval, rule, needed_one(values, rule.distance(interval)))


def between(evidence: Evidence, larger: str, smaller: str, figure: str, label: str, rule: Rule,
             unit: str) -> Comparison:
    a, b = evidence.values(larger, figure), evidence.values(smaller, figure)
    interval = welch(a, b)
    return Comparison(f"{label}: {larger} − {smaller} ({unit})", interval, rule,
                      needed_two(a, b, rule.distance(interval)))


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
