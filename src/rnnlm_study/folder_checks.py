"""Whether a run folder's files tell of one run, and every figure in them is one a run can have.

In:  a `StudyRun` (`rnnlm_study.study_run`) as `rnnlm_study.folders` reads it, and the file names a run folder may hold.
Out: `first_problem(run, names)`: (file name, what is wrong with it) for the first check the run
     fails, or None. `folders.load_run` turns it into a StudyFolderError naming the file.

The checks: the params are a valid params.yaml selecting the folder's model and seed; every record
is of that model; the training finished; the epochs table is the run's epochs; each figure lies in
the range a run can give (`BITS`, `COUNT`, `SECONDS`, `SHARE`); the params entry can have the
parameter count trained; the validation blocks add up to the split's totals.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from rnnlm.errors import ParamsError
from rnnlm.evaluation.blocks import BLOCK_CHARS
from rnnlm.params import model_entry, parse_params
from rnnlm_study.study_run import StudyRun, provenance_date


def first_problem(run: StudyRun, names: frozenset[str]) -> tuple[str, str] | None:
    """(file name, what is wrong with it) for the first check the run fails, or None; `names`: the
    file names a run folder may hold."""
    return next(_problems(run, names), None)


def _problems(run: StudyRun, names: frozenset[str]) -> Iterator[tuple[str, str]]:
    """Each check in turn; the first it yields ends the walk, so a later check may take an earlier
    one's passing for granted."""
    try:
        parse_params(run.params)  # a run's params are params.yaml's, checked as strictly
    except ParamsError as error:
        yield "params.yaml", str(error)
        return
    if run.params.get("model") != run.model or run.model not in (run.params.get("models") or {}):
        yield ("params.yaml", f"selects model {run.params.get('model')!r}, not the folder's {run.model!r}")
    if not run.quick and run.params.get("seed") != run.seed:
        yield ("params.yaml", f"has seed {run.params.get('seed')!r}, not the folder's {run.seed}")
    for name, record in (("train_metrics.json", run.train), ("metrics.json", run.metrics),
                         ("provenance.json", run.provenance)):
        if record.get("model") != run.model:
            yield (name, f"is of model {record.get('model')!r}, not {run.model!r}")
    if run.train.get("finished") is False:  # the live report of a training cut off before its end
        yield ("train_metrics.json", f"marks a training that stopped after epoch {run.train.get('epochs')} of "
                                     f"{run.train.get('epochs_planned')}")
    for name, what, expected in _shape_problems(run, names):
        yield (name, f"has {what}, expected {expected}")
    if "date" in run.provenance and provenance_date(run.provenance["date"]) is None:
        yield ("provenance.json", f"has {run.provenance['date']!r} under date, expected an ISO 8601 date")
    numbers = [row.get("epoch") for row in run.epochs]
    if numbers != [float(e) for e in range(1, len(numbers) + 1)] or len(numbers) != run.train.get("epochs"):
        yield ("epochs.tsv", f"holds epochs {', '.join(f'{e:g}' for e in numbers)}, but train_metrics.json says "
                             f"{run.train.get('epochs')} epochs")
    if run.train.get("val_loss") != run.epochs[-1]["val_loss"]:
        yield ("epochs.tsv", f"ends at validation loss {run.epochs[-1]['val_loss']}, but train_metrics.json says "
                             f"{run.train.get('val_loss')}")
    for name, record, keys in (("metrics.json", run.metrics, ("stateful_bpc", "stateless_bpc", "bigram_bpc")),
                               ("train_metrics.json", run.train, ("parameters", "steps", "seconds"))):
        for key in keys:
            if not isinstance(record.get(key), (int, float)):
                yield (name, f"has no number under {key!r}")
    for name, where, value, (low, high, whole) in _numbers(run):
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                and low < value <= high and (not whole or float(value).is_integer())):
            yield (name, f"has {value!r} under {where}, expected a finite {'whole ' if whole else ''}number in "
                         f"({low:g}, {high:g}]")
    best = min(row["val_loss"] for row in run.epochs)
    if "best_val_loss" in run.train and run.train["best_val_loss"] != best:
        yield ("epochs.tsv", f"has its lowest validation loss at {best}, but train_metrics.json says "
                             f"{run.train['best_val_loss']}")
    tokens = run.params["models"][run.model].get("tokens")
    if run.metrics.get("tokens", tokens) != tokens:
        yield ("params.yaml", f"says tokens {tokens!r}, but metrics.json measured a {run.metrics.get('tokens')!r} model")
    scale = float(run.params.get("train", {}).get("steps_scale", 1.0))
    if run.quick == (scale == 1.0):
        yield ("params.yaml", f"has train.steps_scale {scale:g}: a {'full-scale' if run.quick else 'quick'} run in "
                              f"a {'quick' if run.quick else 'full-scale'} folder")
    why = _shape_does_not_fit(run)
    if why:
        yield ("params.yaml", why)
    why = _blocks_do_not_add_up(run)
    if why:
        yield ("validation_blocks.csv", why)


def _shape_does_not_fit(run: StudyRun) -> str | None:
    """Why the run's own params entry (cell, sizes) cannot be the model its training counted, or None.
    A model's parameter count is affine in its vocabulary size: built twice on PyTorch's meta device
    (no memory), at vocabularies 1 and 2, the entry gives the slope and intercept, and the count in
    train_metrics.json must then come from a whole, positive vocabulary (for SentencePiece, the
    tokenizer's). An entry the current code cannot read is left to the other checks."""
    from rnnlm.models.kinds import build_model, count_parameters, on_meta

    try:
        entry = model_entry(run.params["models"][run.model], f"models.{run.model}")
    except ParamsError:
        return None
    with on_meta():
        at_one = count_parameters(build_model(entry.model_config(1)))
        slope = count_parameters(build_model(entry.model_config(2))) - at_one
    vocab, rest = divmod(int(run.train["parameters"]) - (at_one - slope), slope)
    sentencepiece = (run.params.get("tokenizer") or {}).get("vocab_size") if entry.tokens == "sentencepiece" else None
    if rest or vocab < 1 or (sentencepiece is not None and vocab != sentencepiece):
        return (f"describes models.{run.model} as {entry.config_cell} {entry.embd}/{entry.hidden}/{entry.layers}, which cannot "
                f"have the {int(run.train['parameters']):,} parameters train_metrics.json counted")
    return None


BLOCK_SUM_TOLERANCE = 1e-6
"""How far (relative) a scorer's blocks, summed, may lie from its bits per character in metrics.json:
the two are summed in different orders (float32 scores, float64 sums; 7e-8 at most over the study's
runs), while a cut, an added or a doubled block moves it by a hundredth or more."""


def _block_scorers(metrics: dict[str, Any]) -> dict[str, Any]:
    """The blocks' scorers a run's metrics.json has a figure for: name -> its bits per character."""
    scorers = {name: metrics.get(f"{name}_bpc") for name in ("stateful", "stateless", "bigram")}
    first = metrics.get("first_epoch") if isinstance(metrics.get("first_epoch"), dict) else {}
    scorers.update({f"first_epoch_{name}": first[f"{name}_bpc"] for name in ("stateful", "stateless")
                    if f"{name}_bpc" in first})
    return scorers


def _blocks_do_not_add_up(run: StudyRun) -> str | None:
    """Why the run's validation blocks cannot be its validation split, or None: the split's blocks of
    `BLOCK_CHARS` characters in order (as many as its characters give), none empty, whose characters,
    tokens and each scorer's nats add up to the run's own totals in metrics.json."""
    blocks, m = run.blocks, run.metrics
    if blocks is None:
        return None
    chars, tokens = m.get("val_chars"), m.get("val_tokens")
    if not isinstance(chars, int) or not isinstance(tokens, int):
        return "stands beside a metrics.json without whole val_chars and val_tokens to hold it to"
    expected = chars // BLOCK_CHARS + 1  # the split has val_chars + its first token's characters
    if blocks.first_char != [i * BLOCK_CHARS for i in range(expected)]:
        return (f"has {len(blocks.first_char)} blocks, expected the {expected} blocks of {BLOCK_CHARS:,} characters, "
                f"in order, of a split of {chars:,} predicted characters")
    if min(blocks.chars) <= 0:
        return f"has a block of {min(blocks.chars)} characters, expected every block to hold some"
    if (sum(blocks.chars), sum(blocks.tokens)) != (chars, tokens):
        return (f"adds up to {sum(blocks.chars):,} characters and {sum(blocks.tokens):,} tokens, expected "
                f"metrics.json's {chars:,} and {tokens:,}")
    for name, bpc in _block_scorers(m).items():
        if name not in blocks.nats:
            return f"has no {name}_nats column, expected one for each scorer metrics.json reports"
        summed = math.fsum(blocks.nats[name]) / math.log(2) / chars
        if not (isinstance(bpc, (int, float)) and abs(summed - bpc) <= BLOCK_SUM_TOLERANCE * abs(bpc)):
            return f"sums to {summed:.6f} {name} bits per character, expected metrics.json's {bpc!r}"
    return None


BITS = (0.0, 100.0, False)
"""Bits (or nats) per character or token: positive, and no model of this corpus scores 100."""
COUNT = (0.0, 1e15, True)
"""A count (tokens, characters, parameters, steps): a positive whole number."""
SECONDS = (0.0, 1e8, False)
SHARE = (-1e-12, 1.0, False)

def _mapping(value: object) -> dict:
    """`value` where it is a mapping; an empty one where it is anything else (reported on its own)."""
    return value if isinstance(value, dict) else {}


def _shape_problems(run: StudyRun, names: frozenset[str]):
    """What is not of the kind the report walks: (file, its value and where, what was expected)."""
    m = run.metrics
    for curve in ("reset_curve_bpc", "reset_curve_nats_per_token", "context_curve_bpc", "text", "first_epoch"):
        if m.get(curve) is not None and not isinstance(m[curve], dict):
            yield "metrics.json", f"{m[curve]!r} under {curve}", "a mapping"
    for curve in ("reset_curve_bpc", "reset_curve_nats_per_token", "context_curve_bpc"):
        for k in _mapping(m.get(curve)):
            if not str(k).isdigit() and not (k == "never" and curve != "context_curve_bpc"):
                yield "metrics.json", f"the key {k!r} in {curve}", "a whole number of tokens"
    for mode, stats in _mapping(m.get("text")).items():
        if not isinstance(stats, dict):
            yield "metrics.json", f"{stats!r} under text.{mode}", "a mapping of statistics"
    p = run.provenance
    if "files" in p and not (isinstance(p["files"], list) and all(f in names for f in p["files"])):
        yield "provenance.json", f"{p['files']!r} under files", "a list of the folder's file names"
    record = p.get("registration")
    if record is not None and not (isinstance(record, dict) and isinstance(record.get("file"), str)
                                   and isinstance(record.get("commit"), str)
                                   and isinstance(record.get("code_descends"), bool)):
        yield ("provenance.json", f"{record!r} under registration",
            "a mapping of the registration's file, its commit and whether the run's code descends from it")
    for name, record in (("train_metrics.json", run.train), ("provenance.json", run.provenance)):
        machines = record.get("machines")
        if machines is not None and not (isinstance(machines, list) and all(isinstance(x, dict) for x in machines)):
            yield name, f"{machines!r} under machines", "a list of machines, each a mapping"


def _numbers(run: StudyRun):
    """Every number the report reads from a run folder, with the range it must lie in: (file, where,
    value, (low exclusive, high, whole)). Losses and bits are positive and under 100; counts whole
    and positive; times positive; shares in [0, 1]; a curve's keys are token counts."""
    m = run.metrics
    for key in ("stateful_bpc", "stateless_bpc", "bigram_bpc"):
        yield "metrics.json", key, m.get(key), BITS
    for key in ("val_tokens", "val_chars"):
        if key in m:
            yield "metrics.json", key, m[key], COUNT
    for curve in ("reset_curve_bpc", "reset_curve_nats_per_token", "context_curve_bpc"):
        for k, v in (m.get(curve) or {}).items():
            yield "metrics.json", f"{curve}[{k}]", v, BITS
    if m.get("context_horizon") is not None:
        yield "metrics.json", "context_horizon", m["context_horizon"], COUNT
    for key, v in (m.get("first_epoch") or {}).items():
        if key.endswith("_bpc"):
            yield "metrics.json", f"first_epoch.{key}", v, BITS
    for mode, stats in (m.get("text") or {}).items():
        for key, v in stats.items():
            if key.endswith("_share") and v is not None:  # None: a text too short to have any
                yield "metrics.json", f"text.{mode}.{key}", v, SHARE
    for key, kind in (("parameters", COUNT), ("steps", COUNT), ("epochs", COUNT), ("seconds", SECONDS),
                      ("val_loss", BITS), ("best_val_loss", BITS)):
        if key in run.train:
            yield "train_metrics.json", key, run.train[key], kind
    for row in run.epochs:
        for key in ("val_loss", "val_batch_loss", "train_loss"):
            if key in row:
                yield "epochs.tsv", f"epoch {row['epoch']:g} {key}", row[key], BITS


