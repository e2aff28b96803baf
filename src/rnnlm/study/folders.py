"""The study's record: the run folders `collect` writes, read back and checked.

In:  `reports/study/<model>/seed-<seed>/` (full-scale runs) and `reports/study/quick/<model>/`
     (quick runs), each holding the files of `FOLDER` below and a
     provenance.json.
Out: one `StudyRun` per folder, or a `StudyFolderError` naming the first file that is missing,
     does not parse, or disagrees with the rest of its folder (another model or seed, a table of
     epochs that is not the run's epochs): nothing is reported from a damaged run. A study folder
     with the leftovers of an interrupted `collect` is refused as a whole until `collect` mends it.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from rnnlm.errors import ParamsError, RnnlmError
from rnnlm.params_base import parse_yaml
from rnnlm.evaluation.blocks import BLOCK_CHARS, BlockTable, read_blocks
from rnnlm.params import model_entry, parse_params


# ----- the layout ----------------------------------------------------------------------------------

FOLDER = {
    "params.yaml": "params.yaml",
    "train_metrics.json": "reports/train/metrics.json",
    "epochs.tsv": "reports/train/epochs.tsv",
    "steps.tsv": "reports/train/steps.tsv",
    "metrics.json": "reports/metrics.json",
    "reset_curve.csv": "reports/plots/reset_curve.csv",
    "context_curve.csv": "reports/plots/context_curve.csv",
    "validation_blocks.csv": "reports/validation_blocks.csv",
    "generations.json": "reports/generations.json",
    "generations.md": "reports/generations.md",
    "timing_train.json": "reports/timing/train.json",
    "timing_generate.json": "reports/timing/generate.json",
    "timing_evaluate.json": "reports/timing/evaluate.json",
}
"""A study folder's files: name in reports/study/<model>/ -> path in the run's commit."""

OPTIONAL = frozenset({"context_curve.csv", "validation_blocks.csv", "timing_train.json", "timing_generate.json",
                      "timing_evaluate.json"})
"""Files of runs made since they existed: the context curve, the validation blocks, where each stage's
time went."""

QUICK = "quick"
"""The subfolder of reports/study/ that holds runs at a reduced train.steps_scale."""

REQUIRED = frozenset(FOLDER) - OPTIONAL
"""The files every study folder has (where its provenance does not list its own)."""


def seed_folder_name(seed: int) -> str:
    """The folder of one seed's full-scale run inside its model's folder."""
    return f"seed-{seed}"


def partial_folder(folder: Path) -> Path:
    return folder.with_name(f".{folder.name}.partial")


def old_folder(folder: Path) -> Path:
    return folder.with_name(f".{folder.name}.old")


def leftovers(out: Path) -> list[Path]:
    """The `.partial`/`.old` folders an interrupted `collect` left under `out`."""
    return sorted(p for pattern in (".*.partial", ".*.old") for p in out.rglob(pattern) if p.is_dir())



class StudyFolderError(RnnlmError):
    """A study folder that cannot be reported: missing, damaged or inconsistent."""


@dataclass(frozen=True)
class StudyRun:
    """One run folder of reports/study/: what it trained and what was measured."""

    model: str
    seed: int
    folder: Path
    quick: bool
    params: dict[str, Any]  # the run's own params.yaml
    train: dict[str, Any]  # train_metrics.json
    metrics: dict[str, Any]  # metrics.json (the evaluate stage's)
    provenance: dict[str, Any]
    epochs: tuple[dict[str, float], ...]  # epochs.tsv's rows, as numbers
    blocks: BlockTable | None = None  # validation_blocks.csv, for runs evaluated since it was written

    @property
    def entry(self) -> dict[str, Any]:
        """The run's own entry of `models:` (cell, tokens, sizes, epochs)."""
        return self.params["models"][self.model]

    @property
    def cell(self) -> str:
        """The entry's cell; for a model of another kind, the kind (`mlp`: as the fixed-window MLP's
        entries first said it, `cell: mlp`)."""
        return self.entry.get("cell") or self.entry["kind"]

    @property
    def tokens(self) -> str:
        return self.entry["tokens"]

    @property
    def training(self) -> str:
        """How the state went through training: "reset" (every window from zeros, the study's recipe)
        or "carried" (`train.state`, the entry's own over the shared one; runs before it: reset)."""
        own = (self.entry.get("train") or {}).get("state")
        return own or (self.params.get("train") or {}).get("state") or "reset"

    @property
    def shape(self) -> tuple:
        """The recurrent stack's sizes (cell, embedding, hidden, layers), to match the two tokenizations."""
        return self.cell, self.entry["embd"], self.entry["hidden"], self.entry["layers"]

    @property
    def steps_scale(self) -> float:
        return float(self.provenance.get("steps_scale", 1.0))

    def where(self) -> str:
        """The device and the processor that trained it ("cpu: AMD EPYC", "cuda: NVIDIA H100 ..."); for a
        run resumed on another machine, each with the epoch it took over at ("cpu: A; cpu: B from epoch 4")."""
        machines = self.provenance.get("machines") or self.train.get("machines") or []
        if len(machines) > 1:
            return "; ".join(f"{m['device']}: {m['processor']}" + (f" from epoch {m['from_epoch']}" if i else "")
                             for i, m in enumerate(machines))
        device = self.provenance.get("device") or self.train.get("device", "?")
        processor = self.provenance.get("processor") or self.train.get("processor")
        return f"{device}: {processor}" if processor else str(device)

    def source(self) -> str:
        p = self.provenance
        if p.get("experiment"):
            return f"experiment {p['experiment']} ({str(p.get('rev', ''))[:7]})"
        if p.get("rev"):
            return f"commit {str(p['rev'])[:7]}"
        if p.get("archive"):  # trained without DVC (a GPU machine), brought in by collect --archives
            return f"archive {p['archive']} ({p.get('run_by', '?')} at {str(p.get('commit', '?'))[:7]})"
        return f"{p.get('made_by', 'unknown')} at {str(p.get('commit', '?'))[:7]}"


def _read(path: Path, parse) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StudyFolderError(f"{path}: missing; expected a folder written by `python -m rnnlm.study collect`") from None
    except (OSError, UnicodeDecodeError) as error:
        raise StudyFolderError(f"{path}: cannot be read ({error})") from None
    try:
        value = parse(text)
    except (ValueError, yaml.YAMLError, KeyError, TypeError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise StudyFolderError(f"{path}: does not parse ({first}); collect the run again") from None
    if isinstance(value, BlockTable):
        return value
    if value is None or (not isinstance(value, (dict, list))):
        raise StudyFolderError(f"{path}: does not parse (empty or not a table); collect the run again")
    if path.suffix != ".tsv" and not isinstance(value, dict):
        raise StudyFolderError(f"{path}: holds a list, not a mapping of fields; collect the run again")
    return value


def _epoch_rows(text: str) -> list[dict[str, float]]:
    rows = [{k: float(v) for k, v in row.items()} for row in csv.DictReader(text.splitlines(), delimiter="\t")]
    if not rows or any(math.isnan(row.get("val_loss", math.nan)) for row in rows):
        raise ValueError("no rows with a val_loss")
    return rows


def _check(run: StudyRun) -> None:
    """Every file of the run's folder tells of the same run, and every figure is one a run can have;
    else a StudyFolderError naming the file."""
    def bad(name: str, what: str) -> StudyFolderError:
        return StudyFolderError(f"{run.folder / name}: {what}; expected the files of one run (collect it again)")

    try:
        parse_params(run.params)  # a run's params are params.yaml's, checked as strictly
    except ParamsError as error:
        raise bad("params.yaml", str(error)) from None
    if run.params.get("model") != run.model or run.model not in (run.params.get("models") or {}):
        raise bad("params.yaml", f"selects model {run.params.get('model')!r}, not the folder's {run.model!r}")
    if not run.quick and run.params.get("seed") != run.seed:
        raise bad("params.yaml", f"has seed {run.params.get('seed')!r}, not the folder's {run.seed}")
    for name, record in (("train_metrics.json", run.train), ("metrics.json", run.metrics),
                         ("provenance.json", run.provenance)):
        if record.get("model") != run.model:
            raise bad(name, f"is of model {record.get('model')!r}, not {run.model!r}")
    if run.train.get("finished") is False:  # the live report of a training cut off before its end
        raise bad("train_metrics.json", f"marks a training that stopped after epoch {run.train.get('epochs')} of "
                                        f"{run.train.get('epochs_planned')}")
    for name, what, expected in _shape_problems(run):
        raise bad(name, f"has {what}, expected {expected}")
    if "date" in run.provenance and not _is_date(run.provenance["date"]):
        raise bad("provenance.json", f"has {run.provenance['date']!r} under date, expected an ISO 8601 date")
    numbers = [row.get("epoch") for row in run.epochs]
    if numbers != [float(e) for e in range(1, len(numbers) + 1)] or len(numbers) != run.train.get("epochs"):
        raise bad("epochs.tsv", f"holds epochs {', '.join(f'{e:g}' for e in numbers)}, but train_metrics.json says "
                                f"{run.train.get('epochs')} epochs")
    if run.train.get("val_loss") != run.epochs[-1]["val_loss"]:
        raise bad("epochs.tsv", f"ends at validation loss {run.epochs[-1]['val_loss']}, but train_metrics.json says "
                                f"{run.train.get('val_loss')}")
    for name, record, keys in (("metrics.json", run.metrics, ("stateful_bpc", "stateless_bpc", "bigram_bpc")),
                               ("train_metrics.json", run.train, ("parameters", "steps", "seconds"))):
        for key in keys:
            if not isinstance(record.get(key), (int, float)):
                raise bad(name, f"has no number under {key!r}")
    for name, where, value, (low, high, whole) in _numbers(run):
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                and low < value <= high and (not whole or float(value).is_integer())):
            raise bad(name, f"has {value!r} under {where}, expected a finite {'whole ' if whole else ''}number in "
                            f"({low:g}, {high:g}]")
    best = min(row["val_loss"] for row in run.epochs)
    if "best_val_loss" in run.train and run.train["best_val_loss"] != best:
        raise bad("epochs.tsv", f"has its lowest validation loss at {best}, but train_metrics.json says "
                                f"{run.train['best_val_loss']}")
    tokens = run.params["models"][run.model].get("tokens")
    if run.metrics.get("tokens", tokens) != tokens:
        raise bad("params.yaml", f"says tokens {tokens!r}, but metrics.json measured a {run.metrics.get('tokens')!r} model")
    scale = float(run.params.get("train", {}).get("steps_scale", 1.0))
    if run.quick == (scale == 1.0):
        raise bad("params.yaml", f"has train.steps_scale {scale:g}: a {'full-scale' if run.quick else 'quick'} run in "
                                 f"a {'quick' if run.quick else 'full-scale'} folder")
    why = _shape_does_not_fit(run)
    if why:
        raise bad("params.yaml", why)
    why = _blocks_do_not_add_up(run)
    if why:
        raise bad("validation_blocks.csv", why)
    if not (run.folder / "generations.md").is_file():
        raise StudyFolderError(f"{run.folder / 'generations.md'}: missing; expected the samples the study links to "
                               "(collect the run again)")


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

def _is_date(value: object) -> bool:
    try:
        datetime.fromisoformat(str(value))
    except ValueError:
        return False
    return True


def _shape_problems(run: StudyRun):
    """What is not of the kind the report walks: (file, its value and where, what was expected)."""
    m = run.metrics
    for curve in ("reset_curve_bpc", "reset_curve_nats_per_token", "context_curve_bpc", "text", "first_epoch"):
        if m.get(curve) is not None and not isinstance(m[curve], dict):
            yield "metrics.json", f"{m[curve]!r} under {curve}", "a mapping"
    for curve in ("reset_curve_bpc", "reset_curve_nats_per_token", "context_curve_bpc"):
        for k in m[curve] if isinstance(m.get(curve), dict) else ():
            if not str(k).isdigit() and not (k == "never" and curve != "context_curve_bpc"):
                yield "metrics.json", f"the key {k!r} in {curve}", "a whole number of tokens"
    for mode, stats in (m.get("text") or {}).items() if isinstance(m.get("text"), dict) else ():
        if not isinstance(stats, dict):
            yield "metrics.json", f"{stats!r} under text.{mode}", "a mapping of statistics"
    p = run.provenance
    if "files" in p and not (isinstance(p["files"], list) and all(f in FOLDER for f in p["files"])):
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


def load_run(folder: Path, model: str, seed: int | None, quick: bool) -> StudyRun:
    """The run in `folder`, checked (`seed` None for a quick run: read from its params)."""
    params = _read(folder / "params.yaml", parse_yaml)
    run = StudyRun(model, int(params.get("seed", 0)) if seed is None else seed, folder, quick, params,
                   _read(folder / "train_metrics.json", json.loads), _read(folder / "metrics.json", json.loads),
                   _read(folder / "provenance.json", json.loads), tuple(_read(folder / "epochs.tsv", _epoch_rows)))
    if (folder / "validation_blocks.csv").is_file():
        run = replace(run, blocks=_read(folder / "validation_blocks.csv", _blocks))
    _check(run)
    return run


def _blocks(text: str) -> BlockTable:
    table = read_blocks(text)
    values = [*table.chars, *table.tokens, *(v for column in table.nats.values() for v in column)]
    if not all(math.isfinite(v) and v >= 0 for v in values):
        raise ValueError("a count or a sum of nats that is negative or not finite")
    return table


def load_runs(study_dir: Path) -> list[StudyRun]:
    """Every run folder of `study_dir`: full-scale runs by model and seed, then quick runs."""
    left = leftovers(study_dir) if study_dir.is_dir() else []
    if left:
        raise StudyFolderError(f"{left[0]}: left by an interrupted `collect`; run `python -m rnnlm.study collect` "
                               f"again to mend it, then report")
    runs = []
    for model in sorted(p for p in study_dir.iterdir() if p.is_dir() and p.name != QUICK) if study_dir.is_dir() else []:
        seeds = [p for p in model.iterdir() if p.is_dir()]
        if not seeds:
            raise StudyFolderError(f"{model}: no seed-<seed> folder; expected a folder written by `study collect`")
        for folder in seeds:
            seed = folder.name.removeprefix("seed-")
            if not seed.isdigit() or folder.name != seed_folder_name(int(seed)):
                raise StudyFolderError(f"{folder}: not a seed folder; expected seed-<seed>, written by `study collect`")
        for folder in sorted(seeds, key=lambda p: int(p.name.removeprefix("seed-"))):
            runs.append(load_run(folder, model.name, int(folder.name.removeprefix("seed-")), quick=False))
    quick = study_dir / QUICK
    for folder in sorted(p for p in quick.iterdir() if p.is_dir()) if quick.is_dir() else []:
        runs.append(load_run(folder, folder.name, None, quick=True))
    return runs


def in_study_order(runs: list[StudyRun], models: list[str], pinned_seed: int) -> list[StudyRun]:
    """Full-scale runs in the order of `models` (then any other model by name), each model's pinned
    seed first and then the others in order; quick runs after them, in the same model order."""
    rank = {m: i for i, m in enumerate(models)}
    return sorted(runs, key=lambda r: (r.quick, rank.get(r.model, len(rank)), r.model, r.seed != pinned_seed, r.seed))
