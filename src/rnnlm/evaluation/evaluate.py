"""Measure what statefulness is worth, for one trained checkpoint.

In:  the checkpoint, the train and validation texts, the generation samples, and params `evaluate`.
Out: a metrics dict (stable keys, written as reports/metrics.json), the state-reset curve rows
(reports/plots/reset_curve.csv), the context curve (reports/plots/context_curve.csv) and the
validation split's blocks (reports/validation_blocks.csv: each scorer's nats summed per 2,048
characters, `rnnlm.evaluation.blocks`).

- The state-reset curve: the validation split scored with the state reset to zero every k tokens,
  for each k in `evaluate.reset_every` and for "never" (k = 1 is the stateless mode, never the
  stateful one), in nats per token and bits per character.
  It measures what resetting costs, not how much context the model uses (every window pays a
  warm-up, so its distance to never resetting shrinks like 1/k whatever the model remembers).
- The context curve and its horizon (see rnnlm.evaluation.context): seeded validation targets each predicted
  from exactly c tokens, against the stateful pass on the same targets; the horizon is the
  smallest c within `horizon_tolerance` of it: how much context the model actually uses.
- The n-gram floor: count models of orders 1 to `ngram_max_order` on the same tokens, fit on the
  training split (see rnnlm.evaluation.ngram for the smoothing). A stateless model sees one token, as a
  bigram does, so the bigram is the floor it cannot beat by much.
- Text statistics of the generated samples per mode, and of the validation split for reference
  (see rnnlm.evaluation.textstats).
- The first epoch: the weights kept after epoch 1 scored stateful and stateless, to set one epoch
  of stateful inference against the whole run's stateless inference.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from dataclasses import dataclass
from typing import NamedTuple
from pathlib import Path

import torch

from rnnlm.atomic import write_text_atomic
from rnnlm.models.checkpoint import Checkpoint
from rnnlm.data.corpus import character_vocabulary
from rnnlm.evaluation.ngram import NGramModel
from rnnlm.params import EvaluateParams
from rnnlm.inference.generation_record import GenerationRun
from rnnlm.stage_clock import StageClock, part_of
from rnnlm.evaluation.blocks import BlockTable, block_sums
from rnnlm.evaluation.context import ContextCurve, context_curve
from rnnlm.evaluation.scoring import Score, bits_per_char, streamed_token_nll, windowed_total
from rnnlm.inference.generation import MODES
from rnnlm.evaluation.textstats import text_statistics, word_vocabulary
from rnnlm.data.tokenizers import Tokenizer

ORDER_NAMES = {1: "unigram", 2: "bigram", 3: "trigram", 4: "4gram", 5: "5gram"}


@dataclass(frozen=True)
class ResetPoint:
    """The validation score with the state reset every `k` tokens (None: never)."""

    k: int | None
    score: Score
    bpc: float

    @property
    def label(self) -> str:
        return "never" if self.k is None else str(self.k)


def predicted_chars(tokenizer: Tokenizer, text: str, ids: list[int]) -> int:
    """Characters of `text` covered by the predicted tokens ids[1:] (all but the first token's)."""
    return len(text) - len(tokenizer.decode(ids[:1]))


def reset_curve_totals(model, ids: torch.Tensor, ks: list[int], stateful_nll: torch.Tensor,
                       stateless_nll: torch.Tensor | None = None) -> torch.Tensor:
    """Total nats (float64, on the model's device, not read back) with the state reset every k
    tokens for each k of `ks` (ascending, without repeats), then with it never reset (the sum of
    stateful_nll, each token's loss in the stateful pass: `streamed_token_nll`). `stateless_nll`
    ((n - 1,) on the device), when given, receives each token's loss at k = 1."""
    return torch.stack([*(windowed_total(model, ids, k, token_nll=stateless_nll if k == 1 else None) for k in ks),
                        stateful_nll.double().sum()])


def reset_curve(model, ids: torch.Tensor, ks: list[int], chars: int, stateful_nll: torch.Tensor,
                stateless_nll: torch.Tensor | None = None) -> list[ResetPoint]:
    """Scores for each k (ascending), then for never resetting; read back from the device at once
    (`stateless_nll`: as for `reset_curve_totals`)."""
    ks = sorted(set(ks))
    totals = reset_curve_totals(model, ids, ks, stateful_nll, stateless_nll).tolist()
    scores = [Score(nats=nats, tokens=ids.numel() - 1) for nats in totals]
    return [ResetPoint(k, score, score.bits_per_char(chars)) for k, score in zip([*ks, None], scores)]


def ngram_floor(train_ids: list[int], val_ids: list[int], vocab_size: int, settings: EvaluateParams,
                chars: int, bigram_terms: list[float] | None = None) -> dict[int, float]:
    """Bits per character of the count n-gram models of each order on the validation tokens;
    `bigram_terms`, when given, receives the bigram's ln P of each predicted token."""
    counts = NGramModel(train_ids, settings.ngram_max_order, vocab_size, settings.ngram_discount)
    return {order: bits_per_char(-counts.log_prob_sequence(val_ids, order=order,
                                                           terms=bigram_terms if order == 2 else None), chars)
            for order in range(1, settings.ngram_max_order + 1)}


def _validation_pieces(val_text: str, length: int, count: int, context: int) -> list[tuple[str, str]]:
    """`count` evenly spaced (context, piece) pairs of the validation text, pieces `length` long."""
    span = len(val_text) - context - length
    if span < 0:
        return [("", val_text)]
    starts = (context + i * span // max(count - 1, 1) for i in range(max(count, 1)))
    return [(val_text[s - context : s], val_text[s : s + length]) for s in starts]


def generation_statistics(generations: GenerationRun, train_text: str, val_text: str,
                          settings: EvaluateParams) -> dict[str, dict[str, float | None]]:
    """Text statistics per mode, and of the validation split cut into pieces of the samples' length."""
    chars = character_vocabulary(train_text + val_text)
    char_ids = {c: i for i, c in enumerate(chars)}
    scorer_order = settings.ngram_max_order
    # one more id than there are characters: any character the corpus lacks (see char_loglik)
    scorer = NGramModel([char_ids[c] for c in train_text], scorer_order, len(chars) + 1, settings.ngram_discount)
    vocabulary = word_vocabulary(train_text)
    result = {}
    for mode in MODES:
        samples = [(s.prompt, s.text[len(s.prompt) :]) for s in generations.samples if s.mode == mode]
        result[mode] = text_statistics(samples, vocabulary, scorer, char_ids)
    lengths = [len(s.text) - len(s.prompt) for s in generations.samples]
    reference = _validation_pieces(val_text, round(statistics.fmean(lengths)), len(lengths) // 2, scorer_order - 1)
    result["validation"] = text_statistics(reference, vocabulary, scorer, char_ids)
    return result


def first_epoch_scores(checkpoint: Checkpoint, ids: torch.Tensor, chars: int, device: str | torch.device,
                       token_losses: dict[str, torch.Tensor] | None = None) -> dict[str, float] | None:
    """Stateful and stateless bits per character of the weights after epoch 1 on `ids` (1-D), or
    None for a checkpoint that does not keep them. `token_losses`, when given, receives each
    predicted token's loss in both modes ("first_epoch_stateful", "first_epoch_stateless")."""
    if checkpoint.first_epoch_state is None:
        return None
    model = checkpoint.build_model(device, first_epoch=True)
    stateful = streamed_token_nll(model, ids)  # (n - 1,)
    stateless = torch.empty_like(stateful)
    stateful_nats = stateful.double().sum().item()  # as `streamed_nll` sums it
    stateless_nats = windowed_total(model, ids, 1, token_nll=stateless).item()
    if token_losses is not None:
        token_losses.update(first_epoch_stateful=stateful, first_epoch_stateless=stateless)
    return {"stateful_bpc": bits_per_char(stateful_nats, chars), "stateless_bpc": bits_per_char(stateless_nats, chars)}


class Evaluation(NamedTuple):
    """What `evaluate` measured: metrics.json's dict, the reset curve, the context curve and the
    validation split's blocks (`rnnlm.evaluation.blocks`)."""

    metrics: dict[str, object]
    curve: list[ResetPoint]
    context: ContextCurve
    blocks: BlockTable


def evaluate(checkpoint: Checkpoint, train_text: str, val_text: str, generations: GenerationRun,
             settings: EvaluateParams, seed: int, device: str | torch.device = "cpu", clock: StageClock | None = None,
             ) -> Evaluation:
    """All the measures above for `checkpoint`, its model on `device`, the context targets drawn
    from `seed`: the metrics dict, the reset curve, the context curve and the validation blocks;
    each part timed on `clock` when given."""
    tokenizer = checkpoint.tokenizer()
    model = checkpoint.build_model(device)
    train_ids, val_ids = tokenizer.encode(train_text), tokenizer.encode(val_text)
    chars = predicted_chars(tokenizer, val_text, val_ids)
    ids = torch.tensor(val_ids, dtype=torch.long)
    token_chars = torch.tensor([len(tokenizer.decode([i])) for i in range(tokenizer.vocab_size)])  # (V,)
    with part_of(clock, "stateful pass"):
        stateful = streamed_token_nll(model, ids)  # (n - 1,): the stateful pass, shared by both curves
    losses = {"stateful": stateful}  # each predicted token's loss per scorer, for the validation blocks
    with part_of(clock, "reset curve"):
        stateless_nll = torch.empty_like(stateful)  # filled at k = 1
        curve = reset_curve(model, ids, list(settings.reset_every), chars, stateful, stateless_nll)
        if 1 in settings.reset_every:
            losses["stateless"] = stateless_nll
    with part_of(clock, "context curve"):
        context = context_curve(model, ids, stateful, token_chars, list(settings.context_lengths),
                                settings.context_targets, seed, settings.horizon_tolerance)
    with part_of(clock, "n-gram floor"):
        bigram_terms: list[float] = []
        floor = ngram_floor(train_ids, val_ids, tokenizer.vocab_size, settings, chars, bigram_terms)
        losses["bigram"] = -torch.tensor(bigram_terms, dtype=torch.float64)
    with part_of(clock, "text statistics"):
        text = generation_statistics(generations, train_text, val_text, settings)
    with part_of(clock, "first epoch"):
        first_epoch = first_epoch_scores(checkpoint, ids, chars, device, losses)
    blocks = block_sums(token_chars[ids], len(val_text), losses)
    stateless = next((p for p in curve if p.k == 1), None)  # absent if reset_every leaves out 1
    metrics = {
        "model": checkpoint.model_name,
        "tokens": tokenizer.kind,
        "val_tokens": len(val_ids) - 1,
        "val_chars": chars,
        "stateful_bpc": curve[-1].bpc,
        "stateless_bpc": stateless.bpc if stateless else None,
        "bigram_bpc": floor[2],  # params hold ngram_max_order to at least 2
        "stateless_minus_bigram_bpc": stateless.bpc - floor[2] if stateless else None,
        "reset_curve_bpc": {p.label: p.bpc for p in curve},
        "reset_curve_nats_per_token": {p.label: p.score.mean for p in curve},
        **context.as_metrics(),
        "ngram_bpc": {ORDER_NAMES.get(order, f"{order}gram"): bpc for order, bpc in floor.items()},
        "text": text,
        "first_epoch": first_epoch,
    }
    return Evaluation(metrics, curve, context, blocks)


def write_metrics(metrics: dict[str, object], path: str | Path) -> None:
    """reports/metrics.json: the metrics, keys in a stable order."""
    write_text_atomic(path, json.dumps(metrics, indent=2) + "\n")


def write_reset_curve(curve: list[ResetPoint], metrics: dict[str, object], path: str | Path) -> None:
    """The curve as CSV for `dvc plots`: one row per k in `evaluate.reset_every`, with the levels to
    compare it with as constant columns, so that they draw as horizontal lines beside it: never
    resetting, the count unigram and bigram models, and `ngram_bpc`, the count model of the highest
    order (`evaluate.ngram_max_order`; every order is in metrics.json). The columns are the same
    whatever the params say, so dvc.yaml's plot can name them."""
    ngrams = list(metrics["ngram_bpc"].values())  # type: ignore[union-attr]  # orders 1, 2, ..., max
    levels = {"never_reset_bpc": metrics["stateful_bpc"], "unigram_bpc": ngrams[0], "bigram_bpc": ngrams[1],
              "ngram_bpc": ngrams[-1]}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["k", "reset_every_k_bpc", *levels])
    for point in curve[:-1]:
        writer.writerow([point.k, point.bpc, *levels.values()])
    write_text_atomic(path, out.getvalue())


def write_context_curve(context: ContextCurve, path: str | Path) -> None:
    """The context curve as CSV for `dvc plots`: one row per c, with the stateful level and the
    standard error, and the characters the c tokens span on average."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["c", "context_c_bpc", "stateful_bpc", "standard_error_bpc", "context_chars"])
    for c, bpc, se, span in zip(context.lengths, context.bpc, context.se_bpc, context.mean_chars):
        writer.writerow([c, bpc, context.stateful_bpc, se, span])
    write_text_atomic(path, out.getvalue())
