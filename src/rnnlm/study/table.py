"""The study as tables: one row per run, then per model the mean, spread and 95% interval.

In:  the full-scale `StudyRun`s of `rnnlm.study.folders`.
Out: `runs_frame`: a pandas DataFrame, one row per (model, seed): where it ran and every figure
     the study table and the findings use (`FIGURES`); `summary_frame`: per model and figure, n,
     mean, standard deviation and the 95% t-interval (`rnnlm.study.stats`), in long form.
     `reports/study/runs.csv`, `summary.csv` and `summary.json` (per-model means and n, the
     metrics file dvc.yaml declares) are these frames written out.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable

import pandas as pd

from rnnlm.study.folders import StudyRun
from rnnlm.study.stats import t_interval


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


def _horizon(run: StudyRun) -> float:
    value = run.metrics.get("context_horizon")
    return math.nan if value is None else float(value)


FIGURES: dict[str, Callable[[StudyRun], float]] = {
    "parameters": lambda r: float(r.train["parameters"]),
    "steps": lambda r: float(r.train["steps"]),
    "epochs": lambda r: float(len(r.epochs)),
    "train_seconds": lambda r: float(r.train["seconds"]),
    "val_loss": lambda r: r.epochs[-1]["val_loss"],
    "best_val_loss": lambda r: min(row["val_loss"] for row in r.epochs),
    "best_epoch": _best_epoch,
    "last_minus_best_val_loss": lambda r: r.epochs[-1]["val_loss"] - min(row["val_loss"] for row in r.epochs),
    "val_batch_loss": lambda r: _column(r, "val_batch_loss", lambda v: v[-1]),
    "best_val_batch_loss": lambda r: _column(r, "val_batch_loss", min),
    "stateful_bpc": lambda r: float(r.metrics["stateful_bpc"]),
    "stateless_bpc": lambda r: float(r.metrics["stateless_bpc"]),
    "gap_bpc": lambda r: float(r.metrics["stateless_bpc"] - r.metrics["stateful_bpc"]),
    "bigram_bpc": lambda r: float(r.metrics["bigram_bpc"]),
    "stateless_minus_bigram_bpc": lambda r: float(r.metrics["stateless_bpc"] - r.metrics["bigram_bpc"]),
    "gap_nats_per_token": _token_gap,
    "chars_per_token": lambda r: (r.metrics["val_chars"] / r.metrics["val_tokens"] if r.metrics.get("val_tokens")
                                  else math.nan),
    "context_horizon": _horizon,
    "log2_context_horizon": lambda r: math.log2(_horizon(r)) if _horizon(r) > 0 else math.nan,
    "first_epoch_stateful_bpc": lambda r: _first_epoch(r, "stateful_bpc"),
    "first_epoch_stateless_bpc": lambda r: _first_epoch(r, "stateless_bpc"),
    "known_words_stateless": lambda r: _text(r, "stateless", "known_word_share"),
    "known_words_stateful": lambda r: _text(r, "stateful", "known_word_share"),
    "repeated_4grams_stateless": lambda r: _text(r, "stateless", "repeated_4gram_share"),
    "repeated_4grams_stateful": lambda r: _text(r, "stateful", "repeated_4gram_share"),
}
"""Each run's figures, by name: what runs.csv holds beside who, where and from what."""


def runs_frame(runs: list[StudyRun]) -> pd.DataFrame:
    """One row per full-scale run, in the order of `runs`."""
    rows = []
    for run in (r for r in runs if not r.quick):
        rows.append({"model": run.model, "seed": run.seed, "tokens": run.tokens, "cell": run.cell,
                     "machine": run.where(), "gemm": run.train.get("gemm") or "", "source": run.source(),
                     **{name: figure(run) for name, figure in FIGURES.items()}})
    return pd.DataFrame(rows, columns=["model", "seed", "tokens", "cell", "machine", "gemm", "source", *FIGURES])


def summary_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Per model and figure: n (runs that have it), mean, sd, and the 95% t-interval (low, high,
    half_width; for n = 1 the value itself and no sd)."""
    rows = []
    for model, group in frame.groupby("model", sort=False):
        for figure in FIGURES:
            values = group[figure].dropna()
            if values.empty:
                continue
            interval = t_interval(values.tolist())
            rows.append({"model": model, "figure": figure, "n": interval.n, "mean": interval.estimate,
                         "sd": values.std(ddof=1) if interval.n > 1 else math.nan, "low": interval.low,
                         "high": interval.high, "half_width": interval.half_width})
    return pd.DataFrame(rows, columns=["model", "figure", "n", "mean", "sd", "low", "high", "half_width"])


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
