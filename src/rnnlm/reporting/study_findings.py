"""The study's six claims, each given a verdict from the collected runs' numbers.

In:  the full-scale `StudyRun`s of `rnnlm.reporting.study_report` (their metrics, training metrics,
params and per-epoch curves).
Out: one `Finding` per claim: the claim in our words, a verdict (supported, not supported, mixed, or
not measured yet when the runs that decide it are missing), the figures that decide it as a table,
and what the measurement shows that the study's samples could not. `findings_markdown` renders
them for reports/study.md; `verdict_lines` gives one line per claim for the README.

Every threshold below is ours (the study states none); each is printed beside its verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # study_report imports this module
    from rnnlm.reporting.study_report import StudyRun

SUPPORTED, NOT_SUPPORTED, MIXED, NOT_MEASURED = "supported", "not supported", "mixed", "not measured yet"

BIGRAM_BAND = (-0.05, 0.25)
"""Claim 1: a stateless GRU "is a bigram" when its bits per character lie within this band around
its bigram floor (above it by at most 0.25 bits: a first-order model fit by gradient through a
state it never gets at inference can miss the counted optimum; below it by at most 0.05 bits:
the count model's smoothing costs a little)."""

OVERFIT_RISE = 0.02
"""Claim 5: the last epoch's validation loss must exceed the best one by more than this many nats
for the curve to count as overfitting (not a flat end)."""

STUDY_VAL_LOSS = {"astra_alpha": ("last", 1.70), "astra_beta": ("last", 1.49), "astra_gamma": ("best", 1.39)}
"""Claim 6: the study's validation losses (nats per character, each on one random batch of its
training log) and whether each is the run's last epoch or its best."""

VAL_LOSS_TOLERANCE = 0.05
"""Claim 6: ours agrees with the study's figure within this many nats."""


@dataclass(frozen=True)
class Finding:
    """One claim of the study and what the numbers say about it."""

    number: int
    claim: str
    verdict: str
    rule: str  # how the verdict follows from the figures
    table: list[str]  # Markdown table rows, header first
    insight: str  # what the measurement shows that the samples alone could not


def _overall(verdicts: Sequence[bool]) -> str:
    """Supported when every case holds, not supported when none does, mixed otherwise."""
    if not verdicts:
        return NOT_MEASURED
    return SUPPORTED if all(verdicts) else NOT_SUPPORTED if not any(verdicts) else MIXED


def _combine(verdicts: Sequence[str]) -> str:
    """One verdict from several (one per family): the common one, else mixed."""
    if not verdicts:
        return NOT_MEASURED
    return verdicts[0] if len(set(verdicts)) == 1 else MIXED


def _span(values: Sequence[float], spec: str) -> str:
    """"a to b" over `values`, or "a" when they are all equal at this precision."""
    low, high = format(min(values), spec), format(max(values), spec)
    return low if low == high else f"{low} to {high}"


def _b(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def stateless_is_a_bigram(records: list[StudyRun]) -> Finding:
    grus = [r for r in records if r.cell == "gru"]
    low, high = BIGRAM_BAND
    table = ["| model | stateless | bigram floor | stateless − bigram | stateful |", "|---|---:|---:|---:|---:|"]
    held = []
    for r in grus:
        m = r.metrics
        difference = m["stateless_bpc"] - m["bigram_bpc"]
        held.append(low <= difference <= high)
        table.append(f"| {r.model} | {_b(m['stateless_bpc'])} | {_b(m['bigram_bpc'])} | {difference:+.3f} | "
                     f"{_b(m['stateful_bpc'])} |")
    differences = [r.metrics["stateless_bpc"] - r.metrics["bigram_bpc"] for r in grus]
    gains = [r.metrics["bigram_bpc"] - r.metrics["stateful_bpc"] for r in grus]
    insight = "No GRU run collected yet." if not grus else (
        f"Side by side, the samples only show that stateless text is worse. Measured against the count bigram "
        f"(a table of pair frequencies, no training), every stateless GRU lands {_span(differences, '+.3f')} bits "
        f"from it, whatever its size, while the same weights with the state carried go {_span(gains, '.3f')} bits "
        f"below it.")
    return Finding(1, "With the state reset at every step, a GRU is a first-order Markov model: no better than a "
                      "bigram.", _overall(held),
                   f"each GRU's stateless bits per character within [{low:+.2f}, {high:+.2f}] bits of its bigram "
                   f"floor (the bigram of its own tokens)", table, insight)


def families(records: list[StudyRun]) -> dict[str, list[StudyRun]]:
    """The GRU runs per tokenization, smallest to largest by parameters."""
    grouped: dict[str, list[StudyRun]] = {}
    for r in records:
        if r.cell == "gru":
            grouped.setdefault(r.tokens, []).append(r)
    return {k: sorted(v, key=lambda r: r.train["parameters"]) for k, v in sorted(grouped.items()) if len(v) > 1}


def _more_or_less(more: Sequence[bool]) -> str:
    return "more" if all(more) else "less" if not any(more) else "sometimes more, sometimes less"


def _chars_per_token(run: StudyRun) -> float:
    return run.metrics["val_chars"] / run.metrics["val_tokens"]


def _token_gap(run: StudyRun) -> float:
    """Stateless minus stateful nats per token (per piece for Scribe)."""
    nats = run.metrics["reset_curve_nats_per_token"]
    return nats["1"] - nats["never"]


def _rises(values: Sequence[float], strictly: bool) -> bool:
    return all(b > a if strictly else b >= a for a, b in zip(values, values[1:]))


def sensitivity_grows_with_capacity(records: list[StudyRun]) -> Finding:
    table = ["| model | parameters | stateful | stateless | gap (stateless − stateful) | context horizon (tokens) |",
             "|---|---:|---:|---:|---:|---:|"]
    verdicts, notes = [], []
    for tokens, runs in families(records).items():
        gaps = [r.gap for r in runs]
        horizons = [r.metrics.get("context_horizon") for r in runs]
        for r, horizon in zip(runs, horizons):
            table.append(f"| {r.model} | {r.train['parameters']:,} | {_b(r.metrics['stateful_bpc'])} | "
                         f"{_b(r.metrics['stateless_bpc'])} | {r.gap:.3f} | {'—' if horizon is None else horizon} |")
        measures = [_rises(gaps, strictly=True)]
        if None not in horizons:
            measures.append(_rises(horizons, strictly=False))
        verdicts.append(_overall(measures))
        small, large = runs[0].metrics, runs[-1].metrics
        notes.append(f"{tokens}: the gap goes {' → '.join(f'{g:.3f}' for g in gaps)} bits; from {runs[0].model} to "
                     f"{runs[-1].model} the stateful score moves {large['stateful_bpc'] - small['stateful_bpc']:+.3f} "
                     f"bits and the stateless one {large['stateless_bpc'] - small['stateless_bpc']:+.3f}"
                     + ("" if None not in horizons else " (a context horizon is missing: judged on the gap alone)"))
    insight = ("; ".join(notes) + ". The stateless score sits near the bigram floor at every size (claim 1), so "
               "what resetting costs is what carrying the state gains over that floor: the sensitivity grows only "
               "as far as the stateful score improves with size.") if notes else (
               "Fewer than two GRU runs of one tokenization collected.")
    return Finding(2, "Sensitivity to the lost state grows with capacity: moderate for α, high for β, extreme for γ.",
                   _combine(verdicts), "within each family (Astra: characters, Scribe: pieces), ordered by "
                   "parameters, the gap rises at every step and the context horizon never falls", table, insight)


def subwords_amplify_the_failure(records: list[StudyRun]) -> Finding:
    by_shape: dict[tuple, dict[str, StudyRun]] = {}
    for r in records:
        by_shape.setdefault(r.shape, {})[r.tokens] = r
    pairs = [(p["sentencepiece"], p["char"]) for p in by_shape.values() if {"sentencepiece", "char"} <= p.keys()]
    table = ["| pair (same cell, embedding, hidden, layers) | characters per token | gap, nats per token | "
             "stateless | stateful | gap, bits per character | known words, stateless |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    held, notes = [], []
    for scribe, astra in pairs:
        held.append(scribe.gap > astra.gap)
        for r in (scribe, astra):
            known = r.metrics.get("text", {}).get("stateless", {}).get("known_word_share")
            table.append(f"| {r.model} | {_chars_per_token(r):.2f} | {_token_gap(r):.3f} | "
                         f"{_b(r.metrics['stateless_bpc'])} | {_b(r.metrics['stateful_bpc'])} | {r.gap:.3f} | "
                         f"{'—' if known is None else f'{known:.2f}'} |")
        notes.append(f"resetting costs {scribe.model} {_token_gap(scribe):.3f} nats per piece and {astra.model} "
                     f"{_token_gap(astra):.3f} per character; a piece holds {_chars_per_token(scribe):.2f} "
                     f"characters, so per character the gaps are {scribe.gap:.3f} and {astra.gap:.3f} bits")
    insight = "No Scribe and Astra run of the same sizes collected yet." if not pairs else (
        "; ".join(notes) + ". Per token, the unit a sample is read in, resetting costs the subword model "
        + _more_or_less([_token_gap(s) > _token_gap(a) for s, a in pairs]) + " than the character model of its "
        "size; per character, the unit both share, " + _more_or_less(held) + ".")
    return Finding(3, "Subword models amplify the failure of stateless inference.", _overall(held),
                   "for every Scribe model with an Astra model of the same sizes, the gap in bits per character "
                   "(stateless − stateful) is larger for Scribe", table, insight)


def one_stateful_epoch_beats_stateless(records: list[StudyRun]) -> Finding:
    measured = [r for r in records if r.metrics.get("first_epoch")]
    missing = [r.model for r in records if not r.metrics.get("first_epoch")]
    table = ["| model | stateful after epoch 1 | stateless after the last epoch | difference | steps per epoch | epochs |",
             "|---|---:|---:|---:|---:|---:|"]
    margins = {}  # model -> how far epoch 1's stateful score is below the final stateless one (bits per character)
    per_epoch = {}  # model -> its epoch's length in steps, as "1,234" (or "—" where not recorded)
    for r in measured:
        first = r.metrics["first_epoch"]["stateful_bpc"]
        margins[r.model] = r.metrics["stateless_bpc"] - first
        steps = r.train.get("steps")
        per_epoch[r.model] = f"{steps // r.entry['epochs']:,}" if steps else "—"
        table.append(f"| {r.model} | {_b(first)} | {_b(r.metrics['stateless_bpc'])} | "
                     f"{first - r.metrics['stateless_bpc']:+.3f} | {per_epoch[r.model]} | {r.entry['epochs']} |")
    held = [margin > 0 for margin in margins.values()]
    wins = {m: v for m, v in margins.items() if v > 0}
    losses = {m: v for m, v in margins.items() if v <= 0}
    sentences = [f"Measured for {', '.join(margins) or 'no run'}"
                 + (f" (still to be measured: {', '.join(missing)}: their runs predate keeping epoch 1's weights)"
                    if missing else "") + "."]
    if wins:
        sentences.append(f"Epoch 1's weights with the state carried beat the final weights without it by "
                         f"{_span(list(wins.values()), '.3f')} bits per character ({', '.join(wins)}).")
    if losses:
        sentences.append(f"They do not for {', '.join(f'{m} ({-v:+.3f} bits, epochs of {per_epoch[m]} steps)' for m, v in losses.items())}: "
                         f"an epoch here is a fixed number of steps, not a pass over the corpus, so one epoch is less "
                         f"training for some models than for others.")
    elif wins:
        sentences.append("Here the inference mode is worth more than all the epochs after the first.")
    return Finding(4, "One epoch of training used statefully gives better text than dozens of epochs used "
                      "statelessly.", _overall(held),
                   "for every run that kept its weights after epoch 1, their stateful bits per character are below "
                   "the final weights' stateless bits per character", table, " ".join(sentences))


def leviathan_overfits_early(records: list[StudyRun], model: str = "leviathan") -> Finding:
    run = next((r for r in records if r.model == model), None)
    table = ["| epoch | train loss | validation loss |", "|---:|---:|---:|"]
    if run is None:
        return Finding(5, "Leviathan reaches its best validation loss within 3 epochs and overfits after.",
                       NOT_MEASURED, "", [], f"No full-scale {model} run collected yet.")
    rows = run.epochs()
    table += [f"| {row['epoch']:.0f} | {row['train_loss']:.3f} | {row['val_loss']:.3f} |" for row in rows]
    best = min(rows, key=lambda row: row["val_loss"])
    rise = rows[-1]["val_loss"] - best["val_loss"]
    verdict = _overall([best["epoch"] <= 3, rise > OVERFIT_RISE])
    insight = (f"On the whole validation split after every epoch: best {best['val_loss']:.3f} at epoch "
               f"{best['epoch']:.0f}, then up {rise:.3f} nats by epoch {rows[-1]['epoch']:.0f} while the training "
               f"loss falls from {rows[0]['train_loss']:.3f} to {rows[-1]['train_loss']:.3f}; the checkpoint is the "
               f"last epoch's, so its samples and scores are those of the overfit model.")
    return Finding(5, "Leviathan reaches its best validation loss within 3 epochs and overfits after.", verdict,
                   f"the best epoch is at most 3, and the last epoch's validation loss is more than "
                   f"{OVERFIT_RISE} nats above the best", table, insight)


def validation_loss_matches_the_study(records: list[StudyRun]) -> Finding:
    by_model = {r.model: r for r in records}
    table = ["| model | the study (one batch) | ours (whole split) | difference |", "|---|---:|---:|---:|"]
    held, ours = [], []
    for model, (which, theirs) in STUDY_VAL_LOSS.items():
        run = by_model.get(model)
        if run is None:
            continue
        value = run.train.get("best_val_loss" if which == "best" else "val_loss")
        if value is None:
            continue
        ours.append(value)
        held.append(abs(value - theirs) <= VAL_LOSS_TOLERANCE)
        table.append(f"| {model} | {which} {theirs:.2f} | {which} {value:.3f} | {value - theirs:+.3f} |")
    ordered = ours == sorted(ours, reverse=True)
    tokens = next((r.metrics.get("val_tokens") for r in records if r.model in STUDY_VAL_LOSS), None)
    insight = (f"Ours is the mean over the whole validation split ({tokens:,} predicted characters, in windows of "
               f"the training length from a zero state), not one random batch; "
               f"the order α > β > γ {'holds' if ordered else 'does not hold'}.") if ours else "No Astra run collected."
    return Finding(6, "The validation losses of the study: α about 1.70, β about 1.49, γ best 1.39 (nats per "
                      "character).", _overall(held), f"each of ours within {VAL_LOSS_TOLERANCE} nats of the study's "
                   f"figure", table, insight)


CLAIMS: list[Callable[[list[StudyRun]], Finding]] = [
    stateless_is_a_bigram, sensitivity_grows_with_capacity, subwords_amplify_the_failure,
    one_stateful_epoch_beats_stateless, leviathan_overfits_early, validation_loss_matches_the_study,
]


def findings(records: list[StudyRun]) -> list[Finding]:
    """Every claim's finding, in the study's order."""
    return [claim(records) for claim in CLAIMS]


def findings_markdown(records: list[StudyRun]) -> list[str]:
    """The Findings section of reports/study.md, as lines."""
    lines = ["## Findings", "",
             "Each claim of the study, with a verdict computed from the full-scale runs above by",
             "`rnnlm.reporting.study_findings` (the rule under each verdict is ours; the study states none).", ""]
    for f in findings(records):
        lines += [f"### {f.number}. {f.claim}", "", f"**Verdict: {f.verdict}.**"
                  + (f" Rule: {f.rule}." if f.rule else ""), ""]
        if len(f.table) > 2:
            lines += [*f.table, ""]
        lines += [f.insight, ""]
    return lines


def verdict_lines(records: list[StudyRun], link: str) -> list[str]:
    """One line per claim: its number, its verdict and the claim, linking to `link`#findings."""
    return [f"{f.number}. **{f.verdict}**: {f.claim} ([figures]({link}#findings))" for f in findings(records)]
