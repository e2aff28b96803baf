"""The study as tables: one row per run, then per model the mean, spread and 95% interval.

In:  the full-scale `StudyRun`s of `rnnlm_study.study_run`.
Out: `runs_frame`: a pandas DataFrame, one row per (model, seed): where it ran and every figure
     the study table and the findings use (`FIGURES`); `summary_frame`: per model and figure, n,
     mean, standard deviation and the 95% t-interval (`rnnlm_study.judging.stats`; training time: median
     and range), in long form; `epochs_frame`: every run's validation curve, epoch by epoch.
     `reports/study/runs.csv`, `summary.csv` and `summary.json` (per-model means and n, the
     metrics file dvc.yaml declares) are these frames written out.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from rnnlm_study.study_run import StudyRun
from rnnlm_study.judging.stats import t_interval


def _text(run: StudyRun, mode: str, key: str) -> float:
    value = run.metrics.get("text", {}).get(mode, {}).get(key)
    return math.nan if value is None else float(value)


def _first_epoch(run: StudyRun, key: str) -> float:
    value = (run.metrics.get("first_epoch") or {}).get(key)
    return math.nan if value is None else float(value)


def _column(run: StudyRun, column: str, pick: Callable[[list[float]], float]) -> float:
    """`pick` of an epochs.tsv column (NaN for runs trained before it was recorded)."""
    values = [row[column] for row in run.epochs if column in row]
    return pick(values) if len(values) == len(run.epochs) else math.nan


def _best_epoch(run: StudyRun) -> float:
    return min(run.epochs, key=lambda row: row["val_loss"])["epoch"]


def _token_gap(run: StudyRun) -> float:
    nats = run.metrics.get("reset_curve_nats_per_token", {})
    return nats["1"] - nats["never"] if "1" in nats and "never" in nats else math.nan


def _context(run: StudyRun, tokens: int) -> float:
    """Bits per character of the context curve's targets predicted from `tokens` tokens of context."""
    value = (run.metrics.get("context_curve_bpc") or {}).get(str(tokens))
    return math.nan if value is None else float(value)


def _horizon(run: StudyRun) -> float:
    value = run.metrics.get("context_horizon")
    return math.nan if value is None else float(value)


@dataclass(frozen=True)
class Figure:
    """One figure of a run, defined once: how it is computed from the run's folder, how one value is
    written, and how it is summarised over seeds ("t": the mean and its 95% t-interval; "range": the
    median and the range, for figures whose runs are no sample of one distribution)."""

    compute: Callable[[StudyRun], float]
    spec: str = ".3f"
    summary: str = "t"

    def text(self, value: float | None) -> str:
        """One value as the tables write it; a dash for none."""
        return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, self.spec)


EARLY_EPOCHS = 3
"""Claim 5's "within 3 epochs": the best validation loss over epochs 1-3 against the best after them."""


def _best_over(run: StudyRun, early: bool) -> float:
    losses = [row["val_loss"] for row in run.epochs if (row["epoch"] <= EARLY_EPOCHS) == early]
    return min(losses) if losses else math.nan


def _characters_per_epoch(run: StudyRun) -> float:
    """Training characters one epoch reads: steps per epoch x windows x tokens per window x characters
    per token (an epoch is a fixed number of steps, so models of other sizes read other amounts)."""
    train = run.params.get("train", {})
    per_token = run.metrics["val_chars"] / run.metrics["val_tokens"] if run.metrics.get("val_tokens") else 1.0
    return (run.train["steps"] / len(run.epochs)) * train.get("batch_size", math.nan) * train.get("seq_len", math.nan) \
        * per_token


FIGURES: dict[str, Figure] = {
    "parameters": Figure(lambda r: float(r.train["parameters"]), ",.0f"),
    "steps": Figure(lambda r: float(r.train["steps"]), ",.0f"),
    "epochs": Figure(lambda r: float(len(r.epochs)), ".0f"),
    "train_seconds": Figure(lambda r: float(r.train["seconds"]), ",.0f", summary="range"),
    "val_loss": Figure(lambda r: r.epochs[-1]["val_loss"]),
    "best_val_loss": Figure(lambda r: min(row["val_loss"] for row in r.epochs)),
    "best_epoch": Figure(_best_epoch, ".0f"),
    "last_minus_best_val_loss": Figure(lambda r: r.epochs[-1]["val_loss"] - min(row["val_loss"] for row in r.epochs)),
    "later_minus_early_best_val_loss": Figure(lambda r: _best_over(r, early=False) - _best_over(r, early=True)),
    "characters_per_epoch": Figure(_characters_per_epoch, ",.0f"),
    "val_batch_loss": Figure(lambda r: _column(r, "val_batch_loss", lambda v: v[-1])),
    "best_val_batch_loss": Figure(lambda r: _column(r, "val_batch_loss", min)),
    "stateful_bpc": Figure(lambda r: float(r.metrics["stateful_bpc"])),
    "stateless_bpc": Figure(lambda r: float(r.metrics["stateless_bpc"])),
    "gap_bpc": Figure(lambda r: float(r.metrics["stateless_bpc"] - r.metrics["stateful_bpc"])),
    "bigram_bpc": Figure(lambda r: float(r.metrics["bigram_bpc"])),
    "stateless_minus_bigram_bpc": Figure(lambda r: float(r.metrics["stateless_bpc"] - r.metrics["bigram_bpc"])),
    "gap_nats_per_token": Figure(_token_gap),
    "chars_per_token": Figure(lambda r: (r.metrics["val_chars"] / r.metrics["val_tokens"] if r.metrics.get("val_tokens")
                                         else math.nan), ".2f"),
    "context_horizon": Figure(_horizon, ".0f"),
    "log2_context_horizon": Figure(lambda r: math.log2(_horizon(r)) if _horizon(r) > 0 else math.nan),
    "context_256_bpc": Figure(lambda r: _context(r, 256)),
    "context_1024_bpc": Figure(lambda r: _context(r, 1024)),
    "first_epoch_stateful_bpc": Figure(lambda r: _first_epoch(r, "stateful_bpc")),
    "first_epoch_stateless_bpc": Figure(lambda r: _first_epoch(r, "stateless_bpc")),
    "known_words_stateless": Figure(lambda r: _text(r, "stateless", "known_word_share"), ".2f"),
    "known_words_stateful": Figure(lambda r: _text(r, "stateful", "known_word_share"), ".2f"),
    "repeated_4grams_stateless": Figure(lambda r: _text(r, "stateless", "repeated_4gram_share"), ".2f"),
    "repeated_4grams_stateful": Figure(lambda r: _text(r, "stateful", "repeated_4gram_share"), ".2f"),
}
"""Each run's figures, by name: what runs.csv holds beside who, where and from what, and what
summary.csv, summary.json, the report's tables and the findings read. Training time varies with
the machine and what else ran on it, so its runs are no sample of one distribution: it is
summarised by its median and range (a t-interval gave negative lower bounds)."""


def run_figures(run: StudyRun) -> dict[str, float]:
    """Every figure of one run, by name."""
    return {name: figure.compute(run) for name, figure in FIGURES.items()}


def runs_frame(runs: list[StudyRun]) -> pd.DataFrame:
    """One row per full-scale run, in the order of `runs`."""
    rows = [{"model": run.model, "seed": run.seed, "tokens": run.tokens, "cell": run.cell, "training": run.training,
             "machine": run.where(), "gemm": run.train.get("gemm") or "", "source": run.source(),
             "commit": str(run.provenance.get("commit") or ""), "val_tokens": run.metrics.get("val_tokens"),
             **run_figures(run)}
            for run in runs if not run.quick]
    return pd.DataFrame(rows, columns=["model", "seed", "tokens", "cell", "training", "machine", "gemm", "source",
                                       "commit", "val_tokens", *FIGURES])


def epochs_frame(runs: list[StudyRun]) -> pd.DataFrame:
    """One row per epoch of every full-scale run: model, seed, epoch, the whole split's validation
    loss and the study's one-batch estimate (NaN for runs trained before it was recorded)."""
    rows = [{"model": run.model, "seed": run.seed, "epoch": int(row["epoch"]), "val_loss": row["val_loss"],
             "val_batch_loss": row.get("val_batch_loss", math.nan)}
            for run in runs if not run.quick for row in run.epochs]
    return pd.DataFrame(rows, columns=["model", "seed", "epoch", "val_loss", "val_batch_loss"])


def summary_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Per model and figure: n (runs that have it), mean, sd, and the 95% t-interval (low, high,
    half_width; for n = 1 the value itself and no sd); for a figure summarised by its range, the
    median in `mean` and the range in low and high. `interval` says which."""
    rows = []
    for model, group in frame.groupby("model", sort=False):
        for figure in FIGURES:
            values = group[figure].dropna()
            if values.empty:
                continue
            sd = values.std(ddof=1) if len(values) > 1 else math.nan
            if FIGURES[figure].summary == "range":
                rows.append({"model": model, "figure": figure, "n": len(values), "mean": float(values.median()),
                             "sd": sd, "low": float(values.min()), "high": float(values.max()),
                             "half_width": math.nan, "interval": "median, range"})
                continue
            interval = t_interval(values.tolist())
            rows.append({"model": model, "figure": figure, "n": interval.n, "mean": interval.estimate, "sd": sd,
                         "low": interval.low, "high": interval.high, "half_width": interval.half_width,
                         "interval": "t 95%"})
    return pd.DataFrame(rows, columns=["model", "figure", "n", "mean", "sd", "low", "high", "half_width",
                                       "interval"])


def csv_text(frame: pd.DataFrame) -> str:
    """The frame as CSV, floats to 10 significant digits, the same bytes on every machine."""
    out = io.StringIO()
    frame.to_csv(out, index=False, float_format="%.10g", lineterminator="\n")
    return out.getvalue()


def summary_json(summary: pd.DataFrame) -> str:
    """Per model: n (seeds) and the mean of every figure, for `dvc metrics diff` across commits."""
    metrics: dict[str, dict[str, float | int]] = {}
    for row in summary.itertuples(index=False):
        entry = metrics.setdefault(row.model, {"seeds": 0})
        entry["seeds"] = max(entry["seeds"], int(row.n))
        entry[row.figure] = float(f"{row.mean:.10g}")
    return json.dumps(metrics, indent=2) + "\n"
