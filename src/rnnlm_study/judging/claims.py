"""The study's seven claims, each a question judged by the rules registered for it.

In:  the runs (`Evidence`) and the claim's registered rules (`rnnlm_study.registration`: each rule's
     edge, unit and sensitivity grid; the claim's logical form).
Out: per claim a `Judgement`: the comparisons it turns on (`rnnlm_study.judging.evidence.Comparison`, each
     with its per-run values, interval and text interval), the tables of figures behind them, and
     what the measurement shows that the study's samples could not. `rnnlm_study.judging.findings` decides
     the comparisons and renders them.

The edges are the registration's, never written here; each claim's text, question and the reason
for each edge are the registration's too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from rnnlm.reporting.markdown import table_head
from rnnlm_study.judging.evidence import Comparison, Evidence, between, families, grus, paired, rounded, single, span
from rnnlm_study.judging.logged_curves import (OneBatchNoise, curve_comparison, one_batch_noise, prediction_range,
                                              study_logs)
from rnnlm_study.registration import RegisteredClaim
from rnnlm_study.judging.rules import Above, Rule, Within
from rnnlm_study.judging.stats import t_interval
from rnnlm_study.judging.verdicts import SUPPORTED

STUDY_VAL_LOSS = {"astra_alpha": ("last", 1.70), "astra_beta": ("last", 1.49), "astra_gamma": ("best", 1.39)}
"""Claim 6's headline figures (nats per character, each from one random validation batch of the
study's log) and whether each is the run's last epoch or its best."""


def rule(registered: RegisteredClaim, name: str) -> Rule:
    """The registered rule `name` of a claim, at its registered edge."""
    r = registered.rule(name)
    return Above(r.edge, r.unit) if r.kind == "above" else Within(-r.edge, r.edge, r.unit)


@dataclass(frozen=True)
class Judgement:
    """What one claim's judge found: its comparisons, tables and the sentence of insight."""

    comparisons: list[Comparison]
    insight: str
    table: list[str] = field(default_factory=list)  # the figures behind the comparisons
    extra: list[str] = field(default_factory=list)  # further Markdown (claim 6's curve and prediction check)
    record: dict[str, object] = field(default_factory=dict)  # further machine-readable figures


Judge = Callable[[Evidence, RegisteredClaim], Judgement]


# ----- claim 1 ------------------------------------------------------------------------------------

def judge_bigram(evidence: Evidence, registered: RegisteredClaim) -> Judgement:
    """Claim 1: per GRU model, its stateless bits per character minus its count bigram's (one row per
    model, each against `not_below_bigram`), with the table of both beside the stateful score."""
    above = rule(registered, "not_below_bigram")
    comparisons = [single(evidence, m, "stateless_minus_bigram_bpc", f"{m}: stateless − bigram", above,
                          "not_below_bigram") for m in grus(evidence)]
    table = table_head(["model", "n", "stateless (bits/char)", "bigram floor (bits/char)", "stateful (bits/char)"],
                       "lrrrr")
    table += [f"| {m} | {evidence.n(m)} | {evidence.mean(m, 'stateless_bpc'):.3f} | "
              f"{evidence.mean(m, 'bigram_bpc'):.3f} | {evidence.mean(m, 'stateful_bpc'):.3f} |" for m in grus(evidence)]
    estimates = [c.interval.estimate for c in comparisons]
    insight = "No GRU run collected yet." if not comparisons else (
        f"Side by side, the samples only show that stateless text is worse. Measured against the count bigram (a "
        f"table of pair frequencies, no training), every stateless GRU lands {min(estimates):+.3f} to "
        f"{max(estimates):+.3f} bits from it on average over its seeds, whatever its size (how far above it is "
        "reported, not judged).")
    return Judgement(comparisons, insight, table)


# ----- claim 2 ------------------------------------------------------------------------------------

def judge_capacity(evidence: Evidence, registered: RegisteredClaim) -> Judgement:
    """Claim 2: within each tokenization, each model's gap against the next smaller one's (Welch, against
    `gap_growth`), with every model's scores and context horizon."""
    growth = rule(registered, "gap_growth")
    comparisons, notes = [], []
    table = table_head(["model", "n", "parameters", "stateful (bits/char)", "stateless (bits/char)",
                        "gap (bits/char)", "context horizon over seeds (tokens)"], "lrrrrrr")
    for tokens, models in families(evidence).items():
        for m in models:
            table.append(f"| {m} | {evidence.n(m)} | {evidence.first(m, 'parameters'):,.0f} | "
                         f"{evidence.mean(m, 'stateful_bpc'):.3f} | {evidence.mean(m, 'stateless_bpc'):.3f} | "
                         f"{evidence.mean(m, 'gap_bpc'):.3f} | {span(evidence.values(m, 'context_horizon'))} |")
        comparisons += [between(evidence, larger, smaller, "gap_bpc", "gap", growth, "gap_growth", "bits/char")
                        for smaller, larger in zip(models, models[1:])]
        gaps = " → ".join(f"{evidence.mean(m, 'gap_bpc'):.3f}" for m in models)
        notes.append(f"{tokens}: the mean gap goes {gaps} bits")
    insight = ("; ".join(notes) + ". The stateless score sits near the bigram floor at every size (claim 1), so what "
               "resetting costs is what carrying the state gains over that floor: the sensitivity grows only as far "
               "as the stateful score improves with size. The context horizon (range over seeds) is shown, not "
               "judged: it takes four values, too coarse for an interval.") if notes else (
               "Fewer than two GRU models of one tokenization collected.")
    return Judgement(comparisons, insight, table)


# ----- claim 3 ------------------------------------------------------------------------------------

def subword_pairs(evidence: Evidence) -> list[tuple[str, str]]:
    """(Scribe, Astra) pairs: the same cell and sizes, the two tokenizations."""
    by_shape: dict[tuple, dict[str, str]] = {}
    for m in evidence.models():
        by_shape.setdefault(evidence.shapes[m], {})[evidence.first(m, "tokens")] = m
    return [(p["sentencepiece"], p["char"]) for p in by_shape.values() if {"sentencepiece", "char"} <= p.keys()]


def reading_ratios(evidence: Evidence, scribe: str, astra: str) -> tuple[float, float]:
    """How much training text the Scribe model reads against its Astra sibling: per epoch, and over
    all their epochs (characters per epoch times epochs)."""
    per_epoch = evidence.mean(scribe, "characters_per_epoch") / evidence.mean(astra, "characters_per_epoch")
    total = per_epoch * evidence.mean(scribe, "epochs") / evidence.mean(astra, "epochs")
    return per_epoch, total


def judge_subwords(evidence: Evidence, registered: RegisteredClaim) -> Judgement:
    """Claim 3: each Scribe model's gap per character against its Astra sibling's of the same sizes
    (against `gap_growth`), with the per-token view and how much text each read."""
    growth = rule(registered, "gap_growth")
    pairs = subword_pairs(evidence)
    table = table_head(["model", "n", "characters per token", "gap (nats per token)", "gap (bits/char)",
                        "known words, stateless", "training characters per epoch", "epochs"], "lrrrrrrr")
    comparisons, notes = [], []
    for scribe, astra in pairs:
        comparisons.append(between(evidence, scribe, astra, "gap_bpc", "gap", growth, "gap_growth", "bits/char"))
        for m in (scribe, astra):
            table.append(f"| {m} | {evidence.n(m)} | {evidence.mean(m, 'chars_per_token'):.2f} | "
                         f"{evidence.mean(m, 'gap_nats_per_token'):.3f} | {evidence.mean(m, 'gap_bpc'):.3f} | "
                         f"{evidence.mean(m, 'known_words_stateless'):.2f} | "
                         f"{evidence.mean(m, 'characters_per_epoch'):,.0f} | {evidence.mean(m, 'epochs'):.0f} |")
        per_epoch, total = reading_ratios(evidence, scribe, astra)
        notes.append(f"resetting costs {scribe} {evidence.mean(scribe, 'gap_nats_per_token'):.3f} nats per piece and "
                     f"{astra} {evidence.mean(astra, 'gap_nats_per_token'):.3f} per character; a piece holds "
                     f"{evidence.mean(scribe, 'chars_per_token'):.2f} characters, so per character the gaps are "
                     f"{evidence.mean(scribe, 'gap_bpc'):.3f} and {evidence.mean(astra, 'gap_bpc'):.3f} bits; "
                     f"{scribe} reads {per_epoch:.2f} times {astra}'s training characters per epoch and "
                     f"{total:.2f} times over all its epochs")
    insight = "No Scribe and Astra model of the same sizes collected yet." if not pairs else (
        "Each pair shares the cell and its sizes and differs in its tokenizer and in how much text it read (an epoch "
        "is a fixed number of steps, and a window of 128 pieces holds more characters than one of 128 characters, "
        "while the Scribe recipe takes fewer steps per epoch): " + "; ".join(notes) + ". Per token, the unit a sample "
        "is read in, the comparison above is in pieces against characters; per character, the unit both share, the "
        "comparisons decide.")
    return Judgement(comparisons, insight, table)


# ----- claim 4 ------------------------------------------------------------------------------------

def judge_first_epoch(evidence: Evidence, registered: RegisteredClaim) -> Judgement:
    """Claim 4: per model, each run's last stateless score minus its own epoch-1 stateful score (paired,
    against `first_epoch_wins`); models whose runs did not keep epoch 1's weights are named as missing."""
    wins = rule(registered, "first_epoch_wins")
    comparisons, missing = [], []
    table = table_head(["model", "n", "stateful after epoch 1 (bits/char)", "stateless after the last epoch "
                        "(bits/char)", "steps per epoch", "training characters in epoch 1"], "lrrrrr")
    for m in evidence.models():
        row = paired(evidence, m, "stateless_bpc", "first_epoch_stateful_bpc",
                     f"{m}: last stateless − epoch-1 stateful (paired)", wins, "first_epoch_wins")
        if row is None:
            missing.append(m)
            continue
        comparisons.append(row)
        per_epoch = evidence.first(m, "steps") / evidence.first(m, "epochs")
        table.append(f"| {m} | {row.interval.n} | {evidence.mean(m, 'first_epoch_stateful_bpc'):.3f} | "
                     f"{evidence.mean(m, 'stateless_bpc'):.3f} | {per_epoch:,.0f} | "
                     f"{evidence.mean(m, 'characters_per_epoch'):,.0f} |")
    seen = [evidence.mean(m, "characters_per_epoch") for m in evidence.models() if m not in missing]
    insight = ("Epoch 1's weights with the state carried against the final weights without it, per run (the same "
               "run's two checkpoints)."
               + (" An epoch is a fixed number of steps, not a pass over the corpus: epoch 1 reads "
                  f"{min(seen):,.0f} to {max(seen):,.0f} training characters depending on the model (last column), "
                  "so a larger model's epoch 1 is more training, and the claim is tested at each model's own epoch, "
                  "as the study defines it." if seen else "")
               + (f" Still to be measured: {', '.join(missing)} (runs that predate keeping epoch 1's weights)."
                  if missing else ""))
    return Judgement(comparisons, insight, table)


# ----- claim 5 ------------------------------------------------------------------------------------

def judge_leviathan(evidence: Evidence, registered: RegisteredClaim, model: str = "leviathan") -> Judgement:
    """Claim 5: `model`'s best validation loss after epoch 3 minus its best in epochs 1-3 (`best_early`)
    and its last minus its best (`overfits`), each per run."""
    if model not in set(evidence.frame["model"]):
        return Judgement([], f"No full-scale {model} run collected yet.")
    comparisons = [
        single(evidence, model, "later_minus_early_best_val_loss", f"{model}: best after epoch 3 − best in epochs 1–3 "
               "(paired)", rule(registered, "best_early"), "best_early"),
        single(evidence, model, "last_minus_best_val_loss", f"{model}: last − best validation loss (paired)",
               rule(registered, "overfits"), "overfits"),
    ]
    best, rises = evidence.values(model, "best_epoch"), evidence.values(model, "last_minus_best_val_loss")
    insight = (f"On the whole validation split after every epoch: best at epoch {', '.join(f'{b:.0f}' for b in best)} "
               f"over {len(best)} seed{'s' if len(best) > 1 else ''}, then up {t_interval(rises).estimate:.3f} nats "
               "on average by the last epoch; the checkpoint is the last epoch's, so its samples and scores are those "
               "of the overfit model.")
    return Judgement(comparisons, insight)


# ----- claim 6 ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _AgainstTheStudy:
    """One model's validation curve against the study's logged one, and its prediction for the study's
    headline figure: the comparison, its rows of the two tables and their machine-readable records."""

    comparison: Comparison
    curve_row: str
    check_row: str
    curve: dict[str, object]
    prediction: dict[str, object]


def _against_the_study(evidence: Evidence, model: str, which: str, theirs: float, logs: pd.DataFrame,
                       noise: OneBatchNoise, band: Rule) -> _AgainstTheStudy:
    """`model`'s seed-mean curve against the study's log (`logs`) over the epochs it logged, judged by
    `band`, and the range where the study's one-batch estimator of its `which` ("last" or "best")
    would land on a new seed of ours (`noise`: that estimator's spread), holding `theirs` against it."""
    logged = logs[logs["model"] == model]
    interval, per_seed = curve_comparison(evidence, model, logs, noise)
    label = f"{model}: the study − ours, epochs {logged['epoch'].min()}–{logged['epoch'].max()} (mean over epochs)"
    comparison = Comparison(label, interval, band, "agrees", (model,), (per_seed,), None, kind="band",
                            note="" if interval.n > 1 else "one seed of ours: no seed spread")
    curve_row = (f"| {model} | {len(logged)} | {interval.n} | {interval.estimate:+.3f} | "
                 f"{'—' if interval.one_run else f'{interval.half_width:.3f}'} |")
    curve = {"epochs": len(logged), "seeds": interval.n, "mean_difference": rounded(interval.estimate),
             "half_width": None if interval.one_run else rounded(interval.half_width)}
    predicted = prediction_range(evidence, model, which, len(logged), noise)
    inside = predicted is not None and predicted[0] <= theirs <= predicted[1]
    ranged = "—" if predicted is None else f"{predicted[0]:.3f} to {predicted[1]:.3f}"
    check_row = f"| {model} | {which} {theirs:.2f} | {ranged} | {'yes' if inside else 'no' if predicted else '—'} |"
    prediction = {"which": which, "the_study": theirs, "inside": inside if predicted else None,
                  "low": None if predicted is None else rounded(predicted[0]),
                  "high": None if predicted is None else rounded(predicted[1])}
    return _AgainstTheStudy(comparison, curve_row, check_row, curve, prediction)


def judge_study_losses(evidence: Evidence, registered: RegisteredClaim) -> Judgement:
    """Claim 6: for each model the study gives a validation loss for, our seed-mean curve against the
    study's logged one-batch curve (within `agrees`), and the study's headline figure checked as a
    prediction of its own estimator on a new seed of ours."""
    band = rule(registered, "agrees")
    noise, logs = one_batch_noise(evidence), study_logs()
    if noise is None:
        return Judgement([], "Too few runs record the study's one-batch estimator to measure its noise.")
    collected = set(evidence.frame["model"])
    found = {model: _against_the_study(evidence, model, which, theirs, logs, noise, band)
             for model, (which, theirs) in STUDY_VAL_LOSS.items() if model in collected}
    comparisons = [f.comparison for f in found.values()]
    curve_rows, checks = [f.curve_row for f in found.values()], [f.check_row for f in found.values()]
    record = {"one_batch_noise": {"mean": rounded(noise.mean), "sd": rounded(noise.sd), "epochs": noise.count},
              "curves": {m: f.curve for m, f in found.items()},
              "predictions": {m: f.prediction for m, f in found.items()}}
    extra = ["Our seed-mean validation curve on the whole split against the study's logged curve (one random batch "
             "per epoch), the difference averaged over the epochs the study logged:", "",
             *table_head(["model", "epochs the study logged", "our seeds", "the study − ours, mean (nats/char)",
                          "± (95%)"], "lrrrr"), *curve_rows, "",
             f"The one-batch estimate spreads around the whole split by {noise.sd:.3f} nats (mean {noise.mean:+.3f}, "
             f"{noise.count} epochs of our character GRU runs), so the band of ±{band.high:.2f} nats is "
             f"{band.high / noise.sd:.1f} one-batch spreads; the interval adds the seed spread of the study's one run "
             "and of our mean. Agreement within a tolerance cannot be shown from one one-batch figure: the headline "
             "numbers are checked as predictions instead. Where would the study's estimator land on a new seed of ours "
             "(95% of the time; a best is the minimum over the epochs the study logged)?", "",
             *table_head(["model", "the study's figure (nats/char)", "our prediction for its estimator (nats/char)",
                          "inside"], "llll"),
             *checks, ""]
    insight = ("The study's whole logged curve, not only its last or best value, is the evidence: "
               f"{sum(len(logs[logs['model'] == m]) for m in STUDY_VAL_LOSS)} one-batch values against our seed-mean "
               "curve at the same epochs.")
    return Judgement(comparisons, insight, extra=extra, record=record)


# ----- claim 7, beyond the study ------------------------------------------------------------------

def carried_pairs(evidence: Evidence) -> list[tuple[str, str]]:
    """(carried, reset) model pairs: the same cell, sizes and tokens, trained with the state carried
    and with it reset."""
    reset = {(evidence.shapes[m], evidence.first(m, "tokens")): m for m in evidence.models()
             if evidence.first(m, "training") == "reset"}
    return [(m, reset[key]) for m in evidence.models() if evidence.first(m, "training") == "carried"
            and (key := (evidence.shapes[m], evidence.first(m, "tokens"))) in reset]


def judge_carried(evidence: Evidence, registered: RegisteredClaim) -> Judgement:
    """Claim 7: each model trained with the state carried against its reset twin: its stateful score
    (`stateful_gain`) and its gap (`gap_growth`), with both models' scores and context curves."""
    pairs = carried_pairs(evidence)
    comparisons = []
    table = table_head(["model", "training", "n", "stateful (bits/char)", "stateless (bits/char)", "gap (bits/char)",
                        "context horizon over seeds (tokens)", "context 256 (bits/char)", "context 1024 (bits/char)"],
                       "llrrrrrrr")
    readings = []
    for carried, reset in pairs:
        gain = between(evidence, reset, carried, "stateful_bpc", "stateful", rule(registered, "stateful_gain"),
                       "stateful_gain", "bits/char")
        growth = between(evidence, carried, reset, "gap_bpc", "gap", rule(registered, "gap_growth"), "gap_growth",
                         "bits/char")
        comparisons += [gain, growth]
        readings.append(_what_carrying_did(evidence, carried, reset, gain, growth))
        for m in (reset, carried):
            table.append(f"| {m} | {evidence.first(m, 'training')} | {evidence.n(m)} | "
                         f"{evidence.mean(m, 'stateful_bpc'):.3f} | {evidence.mean(m, 'stateless_bpc'):.3f} | "
                         f"{evidence.mean(m, 'gap_bpc'):.3f} | {span(evidence.values(m, 'context_horizon'))} | "
                         f"{evidence.mean(m, 'context_256_bpc'):.3f} | {evidence.mean(m, 'context_1024_bpc'):.3f} |")
    if not pairs:
        insight = ("No model trained with the state carried has runs beside its reset twin yet (params.yaml's "
                   "entries with `train: {state: carried}`; `python -m rnnlm_study run --models NAME --seeds 5`).")
    else:
        insight = ("The study's models never saw a state they had not built from zero within 128 characters; "
                   "trained with it carried, a model meets at every window the kind of state the stateful mode "
                   "gives it at inference. " + " ".join(readings))
    return Judgement(comparisons, insight, table)


def _what_carrying_did(evidence: Evidence, carried: str, reset: str, gain: Comparison, growth: Comparison) -> str:
    """Two sentences on one pair, from the seed means and its two comparisons' 95% intervals by
    themselves (`gain`: the stateful score's, `growth`: the gap's): what moved, what it means, and
    whether the carried model uses more context."""
    def moved(figure: str) -> float:
        return evidence.mean(carried, figure) - evidence.mean(reset, figure)

    better, leans = gain.alone == SUPPORTED, growth.alone == SUPPORTED
    meaning = {(True, True): "it predicts better with its state and loses more without it",
               (False, True): "it leans harder on its state without predicting materially better with it",
               (True, False): "it predicts better with its state, and the reset costs it no more than before",
               (False, False): "neither what its state gains it nor what the reset costs it moved materially"}
    horizon_c, horizon_r = evidence.values(carried, "context_horizon"), evidence.values(reset, "context_horizon")
    longer = horizon_c and horizon_r and min(horizon_c) > max(horizon_r)
    return (f"{carried} (n = {evidence.n(carried)}) against {reset} (n = {evidence.n(reset)}): stateful "
            f"{moved('stateful_bpc'):+.3f}, stateless {moved('stateless_bpc'):+.3f}, gap {moved('gap_bpc'):+.3f} "
            f"bits per character, so {meaning[better, leans]}. Its context horizon is {span(horizon_c)} tokens "
            f"(reset: {span(horizon_r)}) and its context curve reads {evidence.mean(carried, 'context_256_bpc'):.3f} "
            f"bits at 256 tokens and {evidence.mean(carried, 'context_1024_bpc'):.3f} at 1,024: "
            + ("it uses a longer context than its twin." if longer else
               "it uses no longer a context than its twin, though its training carried the state across windows."))


@dataclass(frozen=True)
class Claim:
    """A claim as we test it: its judge, and the training recipes whose runs it reads (the study's
    claims are about models trained as the study trains them: each window from a zero state). Its
    words, question, form and rules are the registration's (`rnnlm_study.registration`)."""

    judge: Judge
    rules: tuple[str, ...]  # the registered rules its judge reads, by name
    recipes: tuple[str, ...] = ("reset",)


CLAIMS = [Claim(judge_bigram, ("not_below_bigram",)), Claim(judge_capacity, ("gap_growth",)),
          Claim(judge_subwords, ("gap_growth",)), Claim(judge_first_epoch, ("first_epoch_wins",)),
          Claim(judge_leviathan, ("best_early", "overfits")), Claim(judge_study_losses, ("agrees",)),
          Claim(judge_carried, ("stateful_gain", "gap_growth"), recipes=("reset", "carried"))]
"""The study's claims in its order, then ours beyond it: claim k is CLAIMS[k - 1]."""
