"""The study's six claims, each judged against the spread over seeds.

In:  the table of runs (`rnnlm.study.table.runs_frame`: one row per model and seed).
Out: one `Finding` per claim: the claim in our words, the comparisons it turns on, each with a 95%
interval (`rnnlm.study.stats`: a t-interval over seeds, paired when both figures come
from the same weights, Welch between two models), the rule that reads it and its verdict
(supported, contradicted, inconclusive at n = k), how many seeds per model would decide it at the
spread measured, the claim's verdict (all supported, all contradicted, mixed, else inconclusive),
and what the measurement shows that the study's samples could not. `findings_markdown` renders
them for reports/study.md; `verdict_lines` gives one line per claim for the README.

Every threshold below is ours (the study states none); each is printed beside its verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from rnnlm.reporting.markdown import table_head
from rnnlm.study.stats import (NOT_MEASURED, Interval, band_verdict, combine, paired, seeds_needed,
                                         sign_verdict, t_interval, welch)

BIGRAM_BAND = (-0.05, 0.25)
"""Claim 1: a stateless GRU "is a bigram" when its bits per character lie within this band around
its bigram floor (above it by at most 0.25 bits: a first-order model fit by gradient through a
state it never gets at inference can miss the counted optimum; below it by at most 0.05 bits:
the count model's smoothing costs a little)."""

OVERFIT_RISE = 0.02
"""Claim 5: the last epoch's validation loss must exceed the best one by more than this many nats
for the curve to count as overfitting (not a flat end)."""

BEST_EPOCH_BY = 3
"""Claim 5: the best epoch must come no later than this one."""

STUDY_VAL_LOSS = {"astra_alpha": ("last", 1.70), "astra_beta": ("last", 1.49), "astra_gamma": ("best", 1.39)}
"""Claim 6: the study's validation losses (nats per character, each on one random batch of its
training log) and whether each is the run's last epoch or its best."""

VAL_LOSS_TOLERANCE = 0.05
"""Claim 6: ours agrees with the study's figure within this many nats."""


@dataclass(frozen=True)
class Comparison:
    """One quantity a claim turns on, its interval over seeds, and what its rule makes of it."""

    label: str
    interval: Interval
    rule: str
    verdict: str
    needed: int | None  # seeds per model for the interval to decide, at the spread measured
    note: str = ""

    def row(self) -> str:
        needed = "—" if self.needed is None else f"{self.needed}"
        hw = "—" if self.interval.one_run else f"{self.interval.half_width:.3f}"
        estimate = "—" if math.isnan(self.interval.estimate) else f"{self.interval.estimate:+.3f}"
        return (f"| {self.label} | {estimate} | {hw} | {self.interval.n} | {self.rule} | "
                f"{self.verdict}{f' ({self.note})' if self.note else ''} | {needed} |")


COMPARISON_HEADER = table_head(["comparison", "estimate", "± (95%)", "n", "rule", "verdict", "seeds to decide"],
                               "lrrrllr")


@dataclass(frozen=True)
class Finding:
    """One claim of the study and what the numbers say about it."""

    number: int
    claim: str
    rule: str  # how the claim's verdict follows from its comparisons
    comparisons: list[Comparison]
    insight: str  # what the measurement shows that the samples alone could not
    table: list[str] = field(default_factory=list)  # the figures behind the comparisons, Markdown rows

    @property
    def verdict(self) -> str:
        return combine([c.verdict for c in self.comparisons])


def _values(frame: pd.DataFrame, model: str, figure: str) -> list[float]:
    return frame.loc[frame["model"] == model, figure].dropna().tolist()


def _sd(values: list[float]) -> float | None:
    return float(pd.Series(values).std(ddof=1)) if len(values) > 1 else None


def _needed_one(values: list[float], distance: float) -> int | None:
    """Seeds for a one-sample (or paired) interval to clear `distance` at the spread of `values`."""
    spread = _sd(values)
    return None if spread is None else seeds_needed(distance, spread)


def _needed_two(a: list[float], b: list[float], distance: float) -> int | None:
    """Seeds per model for Welch's interval to clear `distance`, each model at the spread measured
    (a model with one run assumed to spread like the other)."""
    spreads = [s for s in (_sd(a), _sd(b)) if s is not None]
    if not spreads:
        return None
    return seeds_needed(distance, math.sqrt(sum(s * s for s in spreads) / len(spreads)), models=2)


def _band_distance(interval: Interval, low: float, high: float) -> float:
    """How far the estimate lies from the band edge that decides it."""
    x = interval.estimate
    return min(x - low, high - x) if low <= x <= high else min(abs(x - low), abs(x - high))


def _pm(values: list[float]) -> str:
    """"mean ± half-width (n)", the value alone for one run, a dash for none."""
    if not values:
        return "—"
    interval = t_interval(values)
    if interval.one_run:
        return f"{interval.estimate:.3f} (1)"
    return f"{interval.estimate:.3f} ± {interval.half_width:.3f} ({interval.n})"


def _mean(frame: pd.DataFrame, model: str, figure: str) -> float:
    values = _values(frame, model, figure)
    return sum(values) / len(values) if values else math.nan


def _models(frame: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(frame["model"]))


def _n(frame: pd.DataFrame, model: str) -> int:
    return int((frame["model"] == model).sum())


def _first(frame: pd.DataFrame, model: str, column: str):
    return frame.loc[frame["model"] == model, column].iloc[0]


def stateless_is_a_bigram(frame: pd.DataFrame) -> Finding:
    low, high = BIGRAM_BAND
    comparisons, table = [], table_head(["model", "n", "stateless", "bigram floor", "stateful"], "lrrrr")
    grus = [m for m in _models(frame) if _first(frame, m, "cell") == "gru"]
    for model in grus:
        values = _values(frame, model, "stateless_minus_bigram_bpc")
        interval = t_interval(values)
        comparisons.append(Comparison(f"{model}: stateless − bigram (bits/char)", interval,
                                      f"inside [{low:+.2f}, {high:+.2f}]", band_verdict(interval, low, high),
                                      _needed_one(values, _band_distance(interval, low, high))))
        table.append(f"| {model} | {_n(frame, model)} | {_mean(frame, model, 'stateless_bpc'):.3f} | "
                     f"{_mean(frame, model, 'bigram_bpc'):.3f} | {_mean(frame, model, 'stateful_bpc'):.3f} |")
    differences = [c.interval.estimate for c in comparisons]
    insight = "No GRU run collected yet." if not grus else (
        f"Side by side, the samples only show that stateless text is worse. Measured against the count bigram "
        f"(a table of pair frequencies, no training), every stateless GRU lands {min(differences):+.3f} to "
        f"{max(differences):+.3f} bits from it on average over its seeds, whatever its size.")
    return Finding(1, "With the state reset at every step, a GRU is a first-order Markov model: no better than a "
                      "bigram.", "every GRU's interval inside the band", comparisons, insight, table)


def families(frame: pd.DataFrame) -> dict[str, list[str]]:
    """The GRU models per tokenization, smallest to largest by parameters (families of two or more)."""
    grouped: dict[str, list[str]] = {}
    for model in _models(frame):
        if _first(frame, model, "cell") == "gru":
            grouped.setdefault(_first(frame, model, "tokens"), []).append(model)
    return {k: sorted(v, key=lambda m: _first(frame, m, "parameters")) for k, v in sorted(grouped.items())
            if len(v) > 1}


def _between(frame: pd.DataFrame, larger: str, smaller: str, figure: str, label: str, strict: bool,
             unit: str) -> Comparison:
    a, b = _values(frame, larger, figure), _values(frame, smaller, figure)
    interval = welch(a, b)
    return Comparison(f"{label}: {larger} − {smaller} ({unit})", interval, "> 0" if strict else "≥ 0",
                      sign_verdict(interval, strict=strict), _needed_two(a, b, interval.estimate))


def sensitivity_grows_with_capacity(frame: pd.DataFrame) -> Finding:
    comparisons, notes = [], []
    table = table_head(["model", "n", "parameters", "stateful", "stateless", "gap", "context horizon over seeds"],
                       "lrrrrrr")
    for tokens, models in families(frame).items():
        for model in models:
            horizons = _values(frame, model, "context_horizon")
            span = "—" if not horizons else (f"{min(horizons):.0f}" if min(horizons) == max(horizons)
                                             else f"{min(horizons):.0f}–{max(horizons):.0f}")
            table.append(f"| {model} | {_n(frame, model)} | {_first(frame, model, 'parameters'):,.0f} | "
                         f"{_mean(frame, model, 'stateful_bpc'):.3f} | {_mean(frame, model, 'stateless_bpc'):.3f} | "
                         f"{_mean(frame, model, 'gap_bpc'):.3f} | {span} |")
        for smaller, larger in zip(models, models[1:]):
            comparisons.append(_between(frame, larger, smaller, "gap_bpc", "gap", True, "bits/char"))
            if _values(frame, larger, "log2_context_horizon") and _values(frame, smaller, "log2_context_horizon"):
                comparisons.append(_between(frame, larger, smaller, "log2_context_horizon", "horizon", False,
                                            "log2 tokens"))
        gaps = " → ".join(f"{_mean(frame, m, 'gap_bpc'):.3f}" for m in models)
        notes.append(f"{tokens}: the mean gap goes {gaps} bits")
    insight = ("; ".join(notes) + ". The stateless score sits near the bigram floor at every size (claim 1), so "
               "what resetting costs is what carrying the state gains over that floor: the sensitivity grows only "
               "as far as the stateful score improves with size.") if notes else (
               "Fewer than two GRU models of one tokenization collected.")
    return Finding(2, "Sensitivity to the lost state grows with capacity: moderate for α, high for β, extreme for γ.",
                   "within each family (Astra: characters, Scribe: pieces), ordered by parameters, each next model's "
                   "gap is larger (Welch) and its context horizon (log2) no smaller", comparisons, insight, table)


def _more_or_less(more: list[bool]) -> str:
    return "more" if all(more) else "less" if not any(more) else "sometimes more, sometimes less"


def subwords_amplify_the_failure(frame: pd.DataFrame, shapes: dict[str, tuple]) -> Finding:
    by_shape: dict[tuple, dict[str, str]] = {}
    for model in _models(frame):
        by_shape.setdefault(shapes[model], {})[_first(frame, model, "tokens")] = model
    pairs = [(p["sentencepiece"], p["char"]) for p in by_shape.values() if {"sentencepiece", "char"} <= p.keys()]
    table = table_head(["model", "n", "characters per token", "gap, nats per token", "gap, bits per character",
                        "known words, stateless"], "lrrrrr")
    comparisons, notes = [], []
    for scribe, astra in pairs:
        comparisons.append(_between(frame, scribe, astra, "gap_bpc", "gap", True, "bits/char"))
        for m in (scribe, astra):
            table.append(f"| {m} | {_n(frame, m)} | {_mean(frame, m, 'chars_per_token'):.2f} | "
                         f"{_mean(frame, m, 'gap_nats_per_token'):.3f} | {_mean(frame, m, 'gap_bpc'):.3f} | "
                         f"{_mean(frame, m, 'known_words_stateless'):.2f} |")
        notes.append(f"resetting costs {scribe} {_mean(frame, scribe, 'gap_nats_per_token'):.3f} nats per piece and "
                     f"{astra} {_mean(frame, astra, 'gap_nats_per_token'):.3f} per character; a piece holds "
                     f"{_mean(frame, scribe, 'chars_per_token'):.2f} characters, so per character the gaps are "
                     f"{_mean(frame, scribe, 'gap_bpc'):.3f} and {_mean(frame, astra, 'gap_bpc'):.3f} bits")
    per_token = [_mean(frame, s, "gap_nats_per_token") > _mean(frame, a, "gap_nats_per_token") for s, a in pairs]
    insight = "No Scribe and Astra model of the same sizes collected yet." if not pairs else (
        "; ".join(notes) + ". Per token, the unit a sample is read in, resetting costs the subword model "
        + _more_or_less(per_token) + " than the character model of its size (on average over seeds); per character, "
        "the unit both share, the comparisons above decide.")
    return Finding(3, "Subword models amplify the failure of stateless inference.",
                   "for every Scribe model with an Astra model of the same sizes, the Scribe gap in bits per "
                   "character is larger (Welch)", comparisons, insight, table)


def one_stateful_epoch_beats_stateless(frame: pd.DataFrame) -> Finding:
    comparisons, missing = [], []
    table = table_head(["model", "n", "stateful after epoch 1", "stateless after the last epoch", "steps per epoch"],
                       "lrrrr")
    for model in _models(frame):
        rows = frame[(frame["model"] == model) & frame["first_epoch_stateful_bpc"].notna()]
        if rows.empty:
            missing.append(model)
            continue
        interval = paired(rows["stateless_bpc"].tolist(), rows["first_epoch_stateful_bpc"].tolist())
        differences = (rows["stateless_bpc"] - rows["first_epoch_stateful_bpc"]).tolist()
        comparisons.append(Comparison(f"{model}: last stateless − epoch-1 stateful (bits/char, paired)", interval,
                                      "> 0", sign_verdict(interval), _needed_one(differences, interval.estimate)))
        per_epoch = _first(frame, model, "steps") / _first(frame, model, "epochs")
        table.append(f"| {model} | {len(rows)} | {rows['first_epoch_stateful_bpc'].mean():.3f} | "
                     f"{rows['stateless_bpc'].mean():.3f} | {per_epoch:,.0f} |")
    losing = [c.label.split(":")[0] for c in comparisons if c.interval.estimate <= 0]
    insight = ("Epoch 1's weights with the state carried against the final weights without it, per run (the same "
               "run's two checkpoints)."
               + (f" Still to be measured: {', '.join(missing)} (runs that predate keeping epoch 1's weights)."
                  if missing else "")
               + (f" Not below for {', '.join(losing)}: an epoch here is a fixed number of steps, not a pass over "
                  f"the corpus, so one epoch is less training for some models than for others." if losing else ""))
    return Finding(4, "One epoch of training used statefully gives better text than dozens of epochs used "
                      "statelessly.", "for every model, the paired interval of (final stateless − epoch-1 "
                   "stateful) bits per character above 0", comparisons, insight, table)


def leviathan_overfits_early(frame: pd.DataFrame, model: str = "leviathan") -> Finding:
    claim = f"Leviathan reaches its best validation loss within {BEST_EPOCH_BY} epochs and overfits after."
    rule = (f"every seed's best epoch at most {BEST_EPOCH_BY}, and the interval of (last − best) validation loss "
            f"above {OVERFIT_RISE} nats")
    if model not in set(frame["model"]):
        return Finding(5, claim, rule, [], f"No full-scale {model} run collected yet.")
    best = _values(frame, model, "best_epoch")
    rises = _values(frame, model, "last_minus_best_val_loss")
    n = len(best)
    early = sum(b <= BEST_EPOCH_BY for b in best)
    best_verdict = ("inconclusive at n = 1" if n < 2 else "supported" if early == n else
                    "contradicted" if early == 0 else f"inconclusive at n = {n}")
    by_epoch = Interval(float(max(best)), float(min(best)), float(max(best)), n)
    rise = t_interval(rises)
    comparisons = [
        Comparison(f"{model}: best epoch (the latest over seeds)", by_epoch, f"≤ {BEST_EPOCH_BY} for every seed",
                   best_verdict, None, f"{early} of {n} seeds"),
        Comparison(f"{model}: last − best validation loss (nats, paired)", rise, f"> {OVERFIT_RISE}",
                   sign_verdict(rise, above=OVERFIT_RISE), _needed_one(rises, rise.estimate - OVERFIT_RISE)),
    ]
    insight = (f"On the whole validation split after every epoch: best at epoch {', '.join(f'{b:.0f}' for b in best)} "
               f"over {n} seed{'s' if n > 1 else ''}, then up {rise.estimate:.3f} nats on average by the last epoch; "
               f"the checkpoint is the last epoch's, so its samples and scores are those of the overfit model.")
    return Finding(5, claim, rule, comparisons, insight)


def validation_loss_matches_the_study(frame: pd.DataFrame) -> Finding:
    comparisons = []
    table = table_head(["model", "the study (one batch)", "ours, one batch (n)", "ours, whole split (n)"], "lrrr")
    ours_whole = []
    for model, (which, theirs) in STUDY_VAL_LOSS.items():
        if model not in set(frame["model"]):
            continue
        batch = _values(frame, model, "best_val_batch_loss" if which == "best" else "val_batch_loss")
        whole = _values(frame, model, "best_val_loss" if which == "best" else "val_loss")
        ours_whole.append(sum(whole) / len(whole))
        left_out = _n(frame, model) - len(batch)
        note = f"{left_out} run{'s' if left_out > 1 else ''} trained before the one-batch column left out" if left_out else ""
        table.append(f"| {model} | {which} {theirs:.2f} | {which} {_pm(batch)} | {which} {_pm(whole)} |")
        if not batch:
            comparisons.append(Comparison(f"{model}: ours − the study, {which} (nats, one batch)",
                                          Interval(math.nan, math.nan, math.nan, 0), f"inside ±{VAL_LOSS_TOLERANCE}",
                                          NOT_MEASURED, None, note))
            continue
        interval = t_interval([b - theirs for b in batch])
        band = (-VAL_LOSS_TOLERANCE, VAL_LOSS_TOLERANCE)
        comparisons.append(Comparison(f"{model}: ours − the study, {which} (nats, one batch)", interval,
                                      f"inside ±{VAL_LOSS_TOLERANCE}", band_verdict(interval, *band),
                                      _needed_one(batch, _band_distance(interval, *band)), note))
    ordered = ours_whole == sorted(ours_whole, reverse=True)
    insight = ("Judged like against like: the study's estimator (the loss on one random validation batch of 64 "
               "windows of 128 characters, its best the minimum over epochs) recorded on our runs; the whole-split "
               "loss beside it is the lower-variance figure, and the minimum over epochs of a noisy one-batch "
               f"estimate is biased low. On the whole split the order α > β > γ {'holds' if ordered else 'does not hold'}."
               ) if comparisons else "No Astra run collected."
    return Finding(6, "The validation losses of the study: α about 1.70, β about 1.49, γ best 1.39 (nats per "
                      "character).", f"each interval of (ours − the study's figure), with the study's estimator, "
                   f"inside ±{VAL_LOSS_TOLERANCE} nats", comparisons, insight, table)


def findings(frame: pd.DataFrame, shapes: dict[str, tuple]) -> list[Finding]:
    """Every claim's finding, in the study's order; `shapes` gives each model's (cell, embd, hidden,
    layers), which pairs the two tokenizations for claim 3."""
    claims: list[Callable[[pd.DataFrame], Finding]] = [
        stateless_is_a_bigram, sensitivity_grows_with_capacity, lambda f: subwords_amplify_the_failure(f, shapes),
        one_stateful_epoch_beats_stateless, leviathan_overfits_early, validation_loss_matches_the_study]
    return [claim(frame) for claim in claims]


def findings_markdown(found: list[Finding]) -> list[str]:
    """The Findings section of reports/study.md, as lines."""
    lines = ["## Findings", "",
             "Each claim of the study, judged by `rnnlm.study.findings` from the runs above. Every",
             "comparison a claim turns on has a 95% interval over seeds: Student's t over one model's seeds, paired",
             "(per run) when both figures come from the same weights, Welch's between two models. A comparison is",
             "*supported* when its interval lies wholly on the claimed side (or inside the band), *contradicted*",
             "when wholly on the other, *inconclusive at n = k* when it straddles; one run has no spread, so a",
             "comparison resting on one says n = 1 and decides nothing. A claim is supported when all its",
             "comparisons are, contradicted when all are, mixed when some are each, else inconclusive. \"Seeds to",
             "decide\": per model, at the spread measured, how many seeds a 95% interval needs to lie clear of the",
             "rule's edge (docs/study-seeds.md). The rules and their thresholds are ours; the study states none.", ""]
    for f in found:
        lines += [f"### {f.number}. {f.claim}", "", f"**Verdict: {f.verdict}.** Rule: {f.rule}.", ""]
        if f.comparisons:
            lines += [*COMPARISON_HEADER, *(c.row() for c in f.comparisons), ""]
        if len(f.table) > 2:
            lines += [*f.table, ""]
        lines += [f.insight, ""]
    return lines


def verdict_lines(found: list[Finding], link: str) -> list[str]:
    """One line per claim: its number, its verdict and the claim, linking to `link`#findings."""
    return [f"{f.number}. **{f.verdict}**: {f.claim} ([figures]({link}#findings))" for f in found]
