"""The study's six claims, each a question with a rule stated before looking, judged over seeds.

In:  the runs (`Evidence`: `rnnlm.study.table.runs_frame`, one row per model and seed; `epochs_frame`,
     every run's validation curve; each model's shape) and the study's own training logs
     (`study_logs.tsv`, transcribed from the study's notebook).
Out: one `Finding` per claim of `CLAIMS`: the comparisons it turns on, each with its 95% interval
     (`rnnlm.study.stats`), its rule (`rnnlm.study.rules`: a margin or a tolerance, with the sentence
     that states it), its one-sided p-value, its verdict after Holm's step-down over the claim's
     comparisons (a family-wise error of 5% per claim) and the seeds that would decide it at 80%
     power; the claim's verdict (all supported, all contradicted, mixed, else inconclusive); and what
     the measurement shows that the study's samples could not. `findings_markdown` renders them for
     reports/study.md, `findings_record` as reports/study/findings.json, `verdict_lines` one line
     per claim for the README.

Every margin and tolerance below is ours (the study states none); each says why it is what it is.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from rnnlm.reporting.markdown import table_head
from rnnlm.study.evidence import (COMPARISON_HEADER, Claim, Comparison, Evidence, Finding, Judgement, between,
                                  families, grus, needed_one, rounded, single, span, verdict_code)
from rnnlm.study.logged_curves import curve_comparison, one_batch_noise, prediction_range, study_logs
from rnnlm.study.rules import Above, Within, decide
from rnnlm.study.stats import NOT_MEASURED, SUPPORTED, paired, t_interval

NOT_BELOW_BIGRAM = -0.05
"""Claim 1 (bits per character): a stateless GRU is "no better than a bigram" when it lies at most
this far below its count bigram (the count model's smoothing may cost it that much). How far above
the bigram a model sits is reported, not judged: the claim says nothing about it."""

MARGIN = 0.05
"""Claims 2 and 3 (bits per character): the smallest growth of the gap that counts as "more
sensitive". About five run-to-run standard deviations of a gap (0.006-0.014 over five seeds) and a
quarter of Astra's α→β step (+0.18): small enough to see any step the claim's words ("moderate,
high, extreme") could mean, large enough that a difference at the level of seed noise is no
growth."""

OVERFIT_RISE = 0.02
"""Claim 5: the last epoch's validation loss must exceed the best one by more than this many nats
(about three run-to-run standard deviations of a final loss) for the curve to count as overfitting."""

VAL_LOSS_TOLERANCE = 0.05
"""Claim 6 (nats per character): our validation curve reproduces the study's when the two agree
within this on average over the epochs the study logged: about the spread of one one-batch
estimate, the precision the study's own figures carry."""

CARRIED_STATEFUL = 0.02
"""Claim 7 (bits per character): training with the state carried must lower the stateful score by
more than this to count: four run-to-run spreads of a stateful score (0.004-0.009)."""

STUDY_VAL_LOSS = {"astra_alpha": ("last", 1.70), "astra_beta": ("last", 1.49), "astra_gamma": ("best", 1.39)}
"""Claim 6's headline figures (nats per character, each from one random validation batch of the
study's log) and whether each is the run's last epoch or its best."""

# ----- claim 1 ------------------------------------------------------------------------------------

def _judge_bigram(evidence: Evidence) -> Judgement:
    rule = Above(NOT_BELOW_BIGRAM)
    comparisons = [single(f"{m}: stateless − bigram (bits/char)", evidence.values(m, "stateless_minus_bigram_bpc"), rule)
                   for m in grus(evidence)]
    table = table_head(["model", "n", "stateless", "bigram floor", "stateful"], "lrrrr")
    table += [f"| {m} | {evidence.n(m)} | {evidence.mean(m, 'stateless_bpc'):.3f} | "
              f"{evidence.mean(m, 'bigram_bpc'):.3f} | {evidence.mean(m, 'stateful_bpc'):.3f} |" for m in grus(evidence)]
    above = [c.interval.estimate for c in comparisons]
    insight = "No GRU run collected yet." if not comparisons else (
        f"Side by side, the samples only show that stateless text is worse. Measured against the count bigram (a "
        f"table of pair frequencies, no training), every stateless GRU lands {min(above):+.3f} to {max(above):+.3f} "
        "bits from it on average over its seeds, whatever its size (how far above it is reported, not judged).")
    return Judgement(comparisons, insight, table)


# ----- claim 2 ------------------------------------------------------------------------------------

def _judge_capacity(evidence: Evidence) -> Judgement:
    rule = Above(MARGIN)
    comparisons, notes = [], []
    table = table_head(["model", "n", "parameters", "stateful", "stateless", "gap", "context horizon over seeds"],
                       "lrrrrrr")
    for tokens, models in families(evidence).items():
        for m in models:
            table.append(f"| {m} | {evidence.n(m)} | {evidence.first(m, 'parameters'):,.0f} | "
                         f"{evidence.mean(m, 'stateful_bpc'):.3f} | {evidence.mean(m, 'stateless_bpc'):.3f} | "
                         f"{evidence.mean(m, 'gap_bpc'):.3f} | {span(evidence.values(m, 'context_horizon'))} |")
        comparisons += [between(evidence, larger, smaller, "gap_bpc", "gap", rule, "bits/char")
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

def _more_or_less(more: list[bool]) -> str:
    return "more" if all(more) else "less" if not any(more) else "sometimes more, sometimes less"


def _judge_subwords(evidence: Evidence) -> Judgement:
    rule = Above(MARGIN)
    by_shape: dict[tuple, dict[str, str]] = {}
    for m in evidence.models():
        by_shape.setdefault(evidence.shapes[m], {})[evidence.first(m, "tokens")] = m
    pairs = [(p["sentencepiece"], p["char"]) for p in by_shape.values() if {"sentencepiece", "char"} <= p.keys()]
    table = table_head(["model", "n", "characters per token", "gap, nats per token", "gap, bits per character",
                        "known words, stateless", "training characters per epoch"], "lrrrrrr")
    comparisons, notes = [], []
    for scribe, astra in pairs:
        comparisons.append(between(evidence, scribe, astra, "gap_bpc", "gap", rule, "bits/char"))
        for m in (scribe, astra):
            table.append(f"| {m} | {evidence.n(m)} | {evidence.mean(m, 'chars_per_token'):.2f} | "
                         f"{evidence.mean(m, 'gap_nats_per_token'):.3f} | {evidence.mean(m, 'gap_bpc'):.3f} | "
                         f"{evidence.mean(m, 'known_words_stateless'):.2f} | "
                         f"{evidence.mean(m, 'characters_per_epoch'):,.0f} |")
        notes.append(f"resetting costs {scribe} {evidence.mean(scribe, 'gap_nats_per_token'):.3f} nats per piece and "
                     f"{astra} {evidence.mean(astra, 'gap_nats_per_token'):.3f} per character; a piece holds "
                     f"{evidence.mean(scribe, 'chars_per_token'):.2f} characters, so per character the gaps are "
                     f"{evidence.mean(scribe, 'gap_bpc'):.3f} and {evidence.mean(astra, 'gap_bpc'):.3f} bits")
    per_token = [evidence.mean(s, "gap_nats_per_token") > evidence.mean(a, "gap_nats_per_token") for s, a in pairs]
    ratios = [evidence.mean(s, "characters_per_epoch") / evidence.mean(a, "characters_per_epoch") for s, a in pairs]
    insight = "No Scribe and Astra model of the same sizes collected yet." if not pairs else (
        "; ".join(notes) + ". Per token, the unit a sample is read in, resetting costs the subword model "
        + _more_or_less(per_token) + " than the character model of its size (on average over seeds); per character, "
        "the unit both share, the comparisons above decide. An epoch is a fixed number of steps: per epoch each "
        f"Scribe model reads {min(ratios):.2f} to {max(ratios):.2f} times the training characters of its Astra "
        "sibling (last column), so the pairs differ in architecture and tokenizer, not in how much text they saw.")
    return Judgement(comparisons, insight, table)


# ----- claim 4 ------------------------------------------------------------------------------------

def _judge_first_epoch(evidence: Evidence) -> Judgement:
    rule = Above(0.0)
    comparisons, missing = [], []
    frame = evidence.frame
    table = table_head(["model", "n", "stateful after epoch 1", "stateless after the last epoch", "steps per epoch",
                        "training characters in epoch 1"], "lrrrrr")
    for m in evidence.models():
        rows = frame[(frame["model"] == m) & frame["first_epoch_stateful_bpc"].notna()]
        if rows.empty:
            missing.append(m)
            continue
        interval = paired(rows["stateless_bpc"].tolist(), rows["first_epoch_stateful_bpc"].tolist())
        differences = (rows["stateless_bpc"] - rows["first_epoch_stateful_bpc"]).tolist()
        comparisons.append(Comparison(f"{m}: last stateless − epoch-1 stateful (bits/char, paired)", interval, rule,
                                      needed_one(differences, interval.estimate)))
        per_epoch = evidence.first(m, "steps") / evidence.first(m, "epochs")
        table.append(f"| {m} | {len(rows)} | {rows['first_epoch_stateful_bpc'].mean():.3f} | "
                     f"{rows['stateless_bpc'].mean():.3f} | {per_epoch:,.0f} | "
                     f"{evidence.mean(m, 'characters_per_epoch'):,.0f} |")
    losing = [c.label.split(":")[0] for c in comparisons if c.interval.estimate <= 0]
    seen = [evidence.mean(m, "characters_per_epoch") for m in evidence.models() if m not in missing]
    insight = ("Epoch 1's weights with the state carried against the final weights without it, per run (the same "
               "run's two checkpoints)."
               + (" An epoch is a fixed number of steps, not a pass over the corpus: epoch 1 reads "
                  f"{min(seen):,.0f} to {max(seen):,.0f} training characters depending on the model (last column), "
                  "so a larger model's epoch 1 is more training, and the claim is tested at each model's own epoch, "
                  "as the study defines it." if seen else "")
               + (f" Still to be measured: {', '.join(missing)} (runs that predate keeping epoch 1's weights)."
                  if missing else "")
               + (f" Not below for {', '.join(losing)}." if losing else ""))
    return Judgement(comparisons, insight, table)


# ----- claim 5 ------------------------------------------------------------------------------------

def _judge_leviathan(evidence: Evidence, model: str = "leviathan") -> Judgement:
    if model not in set(evidence.frame["model"]):
        return Judgement([], f"No full-scale {model} run collected yet.")
    later = evidence.values(model, "later_minus_early_best_val_loss")
    rises = evidence.values(model, "last_minus_best_val_loss")
    comparisons = [
        single(f"{model}: best after epoch 3 − best in epochs 1–3 (nats, paired)", later, Above(0.0)),
        single(f"{model}: last − best validation loss (nats, paired)", rises, Above(OVERFIT_RISE)),
    ]
    best = evidence.values(model, "best_epoch")
    insight = (f"On the whole validation split after every epoch: best at epoch {', '.join(f'{b:.0f}' for b in best)} "
               f"over {len(best)} seed{'s' if len(best) > 1 else ''}, then up {t_interval(rises).estimate:.3f} nats "
               "on average by the last epoch; the checkpoint is the last epoch's, so its samples and scores are those "
               "of the overfit model.")
    return Judgement(comparisons, insight)


# ----- claim 6 ------------------------------------------------------------------------------------

def _judge_study_losses(evidence: Evidence) -> Judgement:
    rule = Within(-VAL_LOSS_TOLERANCE, VAL_LOSS_TOLERANCE)
    noise, logs = one_batch_noise(evidence), study_logs()
    if noise is None:
        return Judgement([], "Too few runs record the study's one-batch estimator to measure its noise.")
    comparisons, curve_rows, checks, record = [], [], [], {"one_batch_noise": {
        "mean": rounded(noise.mean), "sd": rounded(noise.sd), "epochs": noise.count}, "curves": {}, "predictions": {}}
    for model, (which, theirs) in STUDY_VAL_LOSS.items():
        if model not in set(evidence.frame["model"]):
            continue
        logged = logs[logs["model"] == model]
        interval = curve_comparison(evidence, model, logs, noise)
        span = f"epochs {logged['epoch'].min()}–{logged['epoch'].max()}"
        comparisons.append(Comparison(f"{model}: the study − ours, {span} (nats, mean over epochs)", interval, rule,
                                      None, "" if interval.n > 1 else "one seed of ours: no seed spread"))
        curve_rows.append(f"| {model} | {len(logged)} | {interval.n} | {interval.estimate:+.3f} | "
                          f"{'—' if interval.one_run else f'{interval.half_width:.3f}'} |")
        record["curves"][model] = {"epochs": len(logged), "seeds": interval.n, "mean_difference": rounded(
            interval.estimate), "half_width": None if interval.one_run else rounded(interval.half_width)}
        predicted = prediction_range(evidence, model, which, len(logged), noise)
        inside = predicted is not None and predicted[0] <= theirs <= predicted[1]
        ranged = "—" if predicted is None else f"{predicted[0]:.3f} to {predicted[1]:.3f}"
        checks.append(f"| {model} | {which} {theirs:.2f} | {ranged} | {'yes' if inside else 'no' if predicted else '—'} |")
        record["predictions"][model] = {"which": which, "the_study": theirs, "inside": inside if predicted else None,
                                        "low": None if predicted is None else rounded(predicted[0]),
                                        "high": None if predicted is None else rounded(predicted[1])}
    extra = ["Our seed-mean validation curve on the whole split against the study's logged curve (one random batch "
             "per epoch), epoch by epoch:", "",
             *table_head(["model", "epochs the study logged", "our seeds", "the study − ours (mean)", "± (95%)"],
                         "lrrrr"), *curve_rows, "",
             f"The one-batch estimate spreads around the whole split by {noise.sd:.3f} nats (mean {noise.mean:+.3f}, "
             f"{noise.count} epochs of our character GRU runs); the interval adds the seed spread of the study's one "
             "run and of our mean. Agreement within a tolerance cannot be shown from one one-batch figure: the "
             "headline numbers are checked as predictions instead. Where would the study's estimator land on a new "
             "seed of ours (95% of the time; a best is the minimum over the epochs the study logged)?", "",
             *table_head(["model", "the study's figure", "our prediction for its estimator", "inside"], "llll"),
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


def _judge_carried(evidence: Evidence) -> Judgement:
    pairs = carried_pairs(evidence)
    comparisons = []
    table = table_head(["model", "training", "n", "stateful", "stateless", "gap", "context horizon over seeds",
                        "context 256", "context 1024"], "llrrrrrrr")
    readings = []
    for carried, reset in pairs:
        gain = between(evidence, reset, carried, "stateful_bpc", "stateful", Above(CARRIED_STATEFUL), "bits/char")
        growth = between(evidence, carried, reset, "gap_bpc", "gap", Above(MARGIN), "bits/char")
        comparisons += [gain, growth]
        readings.append(_what_carrying_did(evidence, carried, reset, gain, growth))
        for m in (reset, carried):
            table.append(f"| {m} | {evidence.first(m, 'training')} | {evidence.n(m)} | "
                         f"{evidence.mean(m, 'stateful_bpc'):.3f} | {evidence.mean(m, 'stateless_bpc'):.3f} | "
                         f"{evidence.mean(m, 'gap_bpc'):.3f} | {span(evidence.values(m, 'context_horizon'))} | "
                         f"{evidence.mean(m, 'context_256_bpc'):.3f} | {evidence.mean(m, 'context_1024_bpc'):.3f} |")
    if not pairs:
        insight = ("No model trained with the state carried has runs beside its reset twin yet (params.yaml's "
                   "entries with `train: {state: carried}`; `python -m rnnlm.study run --models NAME --seeds 5`).")
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


CLAIMS = [
    Claim("With the state reset at every step, a GRU is a first-order Markov model: no better than a bigram.",
          "Does any stateless GRU beat its count bigram by more than the bigram's smoothing could explain?",
          f"every GRU's stateless − bigram bits per character {Above(NOT_BELOW_BIGRAM).sentence()}, one-sided",
          "a first-order model can beat counted pair frequencies only by their smoothing, which costs them a few "
          "hundredths of a bit", _judge_bigram),
    Claim("Sensitivity to the lost state grows with capacity: moderate for α, high for β, extreme for γ.",
          "Within each family, does each next size lose materially more to the reset than the one before?",
          f"each next model's gap exceeds the one before by {Above(MARGIN).sentence()} bits per character (Welch)",
          "0.05 bits: five run-to-run spreads of a gap, a quarter of Astra's α→β step", _judge_capacity),
    Claim("Subword models amplify the failure of stateless inference.",
          "Does a Scribe model lose materially more per character to the reset than the Astra model of its sizes?",
          f"the Scribe gap exceeds the Astra gap by {Above(MARGIN).sentence()} bits per character (Welch)",
          "the same margin as claim 2", _judge_subwords),
    Claim("One epoch of training used statefully gives better text than dozens of epochs used statelessly.",
          "Does epoch 1's checkpoint with the state carried score better than the last one without it?",
          f"per run, last stateless − epoch-1 stateful {Above(0.0).sentence()} bits per character (paired)",
          "any improvement counts: the claim is about the order of the two", _judge_first_epoch),
    Claim("Leviathan reaches its best validation loss within 3 epochs and overfits after.",
          "Is Leviathan's best loss in epochs 1–3 lower than any after, and does its loss then rise?",
          f"per run, best after epoch 3 − best in epochs 1–3 {Above(0.0).sentence()} nats, and last − best "
          f"{Above(OVERFIT_RISE).sentence()} nats (paired)",
          f"a rise of {OVERFIT_RISE} nats is three run-to-run spreads of a final loss: a flat end is no overfitting",
          _judge_leviathan),
    Claim("The validation losses of the study: α about 1.70, β about 1.49, γ best 1.39 (nats per character).",
          "Does our validation curve reproduce the study's logged one, epoch by epoch?",
          f"the study's curve − our seed-mean curve, averaged over the epochs it logged, "
          f"{Within(-VAL_LOSS_TOLERANCE, VAL_LOSS_TOLERANCE).sentence()} nats",
          f"±{VAL_LOSS_TOLERANCE} nats is about one one-batch spread, the precision of the study's own figures",
          _judge_study_losses),
    Claim("Beyond the study: training with the state carried raises what a model gains from its state.",
          "Does a model trained with the state carried from window to window score materially better with its "
          "state, and lose more without it, than the same model trained with it reset?",
          f"reset − carried stateful bits per character {Above(CARRIED_STATEFUL).sentence()}, and carried − reset "
          f"gap {Above(MARGIN).sentence()} (Welch)",
          f"{CARRIED_STATEFUL} bits is four run-to-run spreads of a stateful score; the gap's margin is claims 2 "
          "and 3's", _judge_carried, recipes=("reset", "carried")),
]
"""The study's claims in its order, then ours beyond it: claim k is CLAIMS[k - 1]."""


def findings(frame: pd.DataFrame, epochs: pd.DataFrame, shapes: dict[str, tuple]) -> list[Finding]:
    """Every claim's finding, its comparisons decided together (Holm, `rnnlm.study.rules.decide`)."""
    evidence = Evidence(frame, epochs, shapes)
    found = []
    for number, claim in enumerate(CLAIMS, start=1):
        judged = claim.judge(evidence.trained(claim.recipes))
        measured = [c for c in judged.comparisons if not math.isnan(c.interval.estimate)]
        verdicts = iter(decide([(c.rule, c.interval) for c in measured]))
        comparisons = [replace(c, verdict=next(verdicts) if not math.isnan(c.interval.estimate) else NOT_MEASURED)
                       for c in judged.comparisons]
        found.append(Finding(number, claim, replace(judged, comparisons=comparisons)))
    return found


def findings_markdown(found: list[Finding]) -> list[str]:
    """The Findings section of reports/study.md, as lines."""
    lines = ["## Findings", "",
             "Each claim of the study, judged by `rnnlm.study.findings` from the runs above. Each claim is a question",
             "with a rule and a margin fixed before looking. Every comparison it turns on has a 95% interval over",
             "seeds (Student's t over one model's seeds, paired per run when both figures come from the same",
             "weights, Welch's between two models) and the one-sided p-value of the claimed direction. Its verdict",
             "is *supported* or *contradicted* when its test clears the rule's edge after Holm's step-down over the",
             "claim's comparisons, so that all of a claim's row verdicts hold together at a family-wise error of 5%;",
             "else *inconclusive at n = k* (one run has no spread and decides nothing). Where the 95% interval alone",
             "would say otherwise, the row says so. A claim is supported when all its comparisons are, contradicted",
             "when all are, mixed when some are each, else inconclusive. \"Seeds to decide\": per model, the seeds",
             "that would decide the comparison with 80% probability if its difference and spread are as measured",
             "(docs/study-seeds.md). The margins are ours; the study states none.", ""]
    for f in found:
        lines += [f"### {f.number}. {f.claim.text}", "", f"**Verdict: {f.verdict}.** Question: {f.claim.question} "
                  f"Rule: {f.claim.rule} ({f.claim.why}).", ""]
        if f.comparisons:
            lines += [*COMPARISON_HEADER, *(c.row() for c in f.comparisons), ""]
        if len(f.judged.table) > 2:
            lines += [*f.judged.table, ""]
        lines += [*f.judged.extra]
        lines += [f.judged.insight, ""]
    return lines


def findings_record(found: list[Finding]) -> dict[str, object]:
    """reports/study/findings.json: per claim its verdict and every comparison's figures."""
    return {f"claim_{f.number}": {"claim": f.claim.text, "rule": f.claim.rule, "verdict": f.verdict,
                                  "verdict_code": verdict_code(f.verdict), "comparisons": [c.record() for c in f.comparisons],
                                  **f.judged.record} for f in found}


def verdict_lines(found: list[Finding], link: str) -> list[str]:
    """One line per claim: its number, its verdict and the claim, linking to `link`#findings."""
    return [f"{f.number}. **{f.verdict}**: {f.claim.text} ([figures]({link}#findings))" for f in found]
