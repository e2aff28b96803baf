"""The study's own logged validation curves (`study_logs.tsv`, transcribed from its notebook) against
ours: the one-batch estimator's noise measured on our runs, the study's curve minus our seed mean
with its interval, and where the study's estimator would land for a new seed of ours. Claim 6
(`rnnlm_study.judging.findings`) is judged with them.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from rnnlm_study.judging.evidence import Evidence, grus
from rnnlm_study.judging.stats import CONFIDENCE, Interval

STUDY_LOGS = Path(__file__).with_name("study_logs.tsv")
"""The study's logged curves: model, epoch, training loss, one-batch validation loss."""

SIMULATIONS = 20_000
"""Draws of the prediction check for a best-over-epochs figure (a fixed generator: same bytes each time)."""


def study_logs(path: Path = STUDY_LOGS) -> pd.DataFrame:
    """The study's logged validation losses: model, epoch, train_loss, val_loss."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    rows = list(csv.DictReader(lines, delimiter="\t"))
    return pd.DataFrame({"model": [r["model"] for r in rows], "epoch": [int(r["epoch"]) for r in rows],
                         "train_loss": [float(r["train_loss"]) for r in rows],
                         "val_loss": [float(r["val_loss"]) for r in rows]})



@dataclass(frozen=True)
class OneBatchNoise:
    """The study's estimator against the whole split, measured on our own character GRU runs: one
    batch minus the whole split at every epoch that recorded both."""

    mean: float
    sd: float
    count: int


def one_batch_noise(evidence: Evidence) -> OneBatchNoise | None:
    char_grus = [m for m in grus(evidence) if evidence.first(m, "tokens") == "char"]
    rows = evidence.epochs[evidence.epochs["model"].isin(char_grus)].dropna(subset=["val_batch_loss"])
    residual = (rows["val_batch_loss"] - rows["val_loss"]).to_numpy()
    if residual.size < 3:
        return None
    return OneBatchNoise(float(residual.mean()), float(residual.std(ddof=1)), int(residual.size))


def curve_comparison(evidence: Evidence, model: str, logs: pd.DataFrame, noise: OneBatchNoise
                     ) -> tuple[Interval, tuple[float, ...]]:
    """The study's logged curve minus our seed-mean whole-split curve, averaged over the epochs it
    logged, and per seed of ours the study's curve minus that run's, averaged alike. The interval's
    variance: the study's one-batch noise over those epochs (sd²/E, the batches drawn independently)
    plus the seed effect of the study's one run and of our mean (s²(1 + 1/n), s the spread over our
    seeds of the curve averaged over those epochs); degrees of freedom by Welch-Satterthwaite.
    n = our seeds."""
    theirs = logs[logs["model"] == model].set_index("epoch")["val_loss"]
    ours = evidence.epochs[(evidence.epochs["model"] == model) & evidence.epochs["epoch"].isin(theirs.index)]
    per_seed = ours.groupby("seed")["val_loss"].mean()  # each run's level over the logged epochs
    seed_mean_curve = ours.groupby("epoch")["val_loss"].mean()
    epochs = [e for e in theirs.index if e in seed_mean_curve.index]
    estimate = float(np.mean([theirs[e] - seed_mean_curve[e] for e in epochs]))
    differences = tuple(float(np.mean([theirs[e] for e in epochs])) - level for level in per_seed)
    n = len(per_seed)
    if n < 2:
        return Interval(estimate, estimate, estimate, n), differences
    noise_var, seed_var = noise.sd**2 / len(epochs), float(per_seed.var(ddof=1)) * (1 + 1 / n)
    half, total, df = _welch_satterthwaite(noise_var, noise.count - 1, seed_var, n - 1)
    return Interval(estimate, estimate - half, estimate + half, n, math.sqrt(total), df), differences


def _welch_satterthwaite(a: float, df_a: float, b: float, df_b: float) -> tuple[float, float, float]:
    """The 95% half-width, variance and degrees of freedom of a sum of two independent variance
    estimates `a` and `b` of `df_a` and `df_b` degrees of freedom (Welch-Satterthwaite)."""
    total = a + b
    df = total**2 / (a**2 / df_a + b**2 / df_b)
    return float(scipy_stats.t.ppf((1 + CONFIDENCE) / 2, df)) * math.sqrt(total), total, df


def prediction_range(evidence: Evidence, model: str, which: str, epochs: int, noise: OneBatchNoise
                     ) -> tuple[float, float] | None:
    """Where the study's estimator would land for a new seed of ours, 95% of the time. "last": our
    last-epoch whole-split mean plus the one-batch noise plus the seed spread, with the degrees of
    freedom of the sum of the two variance estimates (Welch-Satterthwaite: the one-batch noise is
    measured over many epochs, the seed spread over n - 1); "best": the minimum over the study's
    first `epochs` epochs of one of our runs' curves plus independent one-batch noise at each epoch,
    simulated (a fixed generator)."""
    runs = evidence.epochs[evidence.epochs["model"] == model]
    if which == "last":
        last = runs[runs["epoch"] == runs["epoch"].max()]["val_loss"].to_numpy()
        if last.size < 2:
            return None
        half, _, _ = _welch_satterthwaite(noise.sd**2, noise.count - 1, last.var(ddof=1) * (1 + 1 / last.size),
                                          last.size - 1)
        centre = float(last.mean()) + noise.mean
        return centre - half, centre + half
    curves = [group.sort_values("epoch")["val_loss"].to_numpy()[:epochs] for _, group in runs.groupby("seed")]
    curves = [c for c in curves if c.size == epochs]
    if len(curves) < 2:
        return None
    generator = np.random.default_rng(20261126)
    picks = generator.integers(len(curves), size=SIMULATIONS)
    draws = np.stack(curves)[picks] + generator.normal(noise.mean, noise.sd, size=(SIMULATIONS, epochs))
    low, high = np.quantile(draws.min(axis=1), [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])
    return float(low), float(high)
