"""The study's record: the run folders `collect` writes, read back and checked.

In:  `reports/study/<model>/seed-<seed>/` (full-scale runs) and `reports/study/quick/<model>/`
     (quick runs), each holding the files of `FOLDER` below and a
     provenance.json.
Out: one `StudyRun` (`rnnlm_study.study_run`) per folder, or a `StudyFolderError` naming the
     first file that is missing, does not parse, or disagrees with the rest of its folder (another
     model or seed, a table of epochs that is not the run's epochs: `rnnlm_study.folder_checks`):
     nothing is reported from a damaged run. A study folder with the leftovers of an interrupted
     `collect` is refused as a whole until `collect` mends it.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from rnnlm.errors import RnnlmError
from rnnlm.params_base import parse_yaml
from rnnlm.evaluation.blocks import BlockTable, read_blocks
from rnnlm_study.folder_checks import first_problem
from rnnlm_study.study_run import StudyRun


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


def folder_seed(folder: Path) -> int | None:
    """The seed of a folder named as `seed_folder_name` names one ("seed-7": 7); None for any other
    name ("seed-07", "seed-x", "quick")."""
    seed = folder.name.removeprefix("seed-")
    return int(seed) if seed.isdigit() and folder.name == seed_folder_name(int(seed)) else None


def partial_folder(folder: Path) -> Path:
    return folder.with_name(f".{folder.name}.partial")


def old_folder(folder: Path) -> Path:
    return folder.with_name(f".{folder.name}.old")


def leftovers(out: Path) -> list[Path]:
    """The `.partial`/`.old` folders an interrupted `collect` left under `out`."""
    return sorted(p for pattern in (".*.partial", ".*.old") for p in out.rglob(pattern) if p.is_dir())



class StudyFolderError(RnnlmError):
    """A study folder that cannot be reported: missing, damaged or inconsistent."""


def _read(path: Path, parse) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StudyFolderError(f"{path}: missing; expected a folder written by `python -m rnnlm_study collect`") from None
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
    """A StudyFolderError naming the file of the first check the run fails (`folder_checks`), or of
    its missing samples."""
    problem = first_problem(run, frozenset(FOLDER))
    if problem is not None:
        name, what = problem
        raise StudyFolderError(f"{run.folder / name}: {what}; expected the files of one run (collect it again)")
    if not (run.folder / "generations.md").is_file():
        raise StudyFolderError(f"{run.folder / 'generations.md'}: missing; expected the samples the study links to "
                               "(collect the run again)")


RENAMED_METRICS = {"context_carried_bpc": "context_stateful_bpc"}
"""The evaluate stage's metrics renamed since runs were collected, old name -> today's: a folder keeps
the names its run wrote, and is read under today's."""


def _metrics(text: str) -> Any:
    """metrics.json, each renamed key under its name of today (`RENAMED_METRICS`), in its place; what
    is not an object stays as it is, for the folder's checks to name."""
    metrics = json.loads(text)
    return {RENAMED_METRICS.get(key, key): value for key, value in metrics.items()} if isinstance(metrics, dict) else metrics


def load_run(folder: Path, model: str, seed: int | None, quick: bool) -> StudyRun:
    """The run in `folder`, checked (`seed` None for a quick run: read from its params)."""
    params = _read(folder / "params.yaml", parse_yaml)
    run = StudyRun(model, int(params.get("seed", 0)) if seed is None else seed, folder, quick, params,
                   _read(folder / "train_metrics.json", json.loads), _read(folder / "metrics.json", _metrics),
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
    """Every run folder of `study_dir`: full-scale runs by model and seed, then quick runs; none when
    there is no `study_dir`."""
    if not study_dir.is_dir():
        return []
    left = leftovers(study_dir)
    if left:
        raise StudyFolderError(f"{left[0]}: left by an interrupted `collect`; run `python -m rnnlm_study collect` "
                               f"again to mend it, then report")
    full = [load_run(folder, model.name, seed, quick=False)
            for model in subfolders(study_dir) if model.name != QUICK
            for seed, folder in _seed_folders(model)]
    return full + [load_run(folder, folder.name, None, quick=True) for folder in subfolders(study_dir / QUICK)]


def subfolders(folder: Path) -> list[Path]:
    """The folders directly inside `folder`, by name; none when `folder` is not one."""
    return sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def _seed_folders(model: Path) -> list[tuple[int, Path]]:
    """(seed, folder) for each folder of `model`, by seed; a StudyFolderError when it has none or one
    not named seed-<seed>."""
    seeds = []
    for folder in subfolders(model):
        seed = folder_seed(folder)
        if seed is None:
            raise StudyFolderError(f"{folder}: not a seed folder; expected seed-<seed>, written by `study collect`")
        seeds.append((seed, folder))
    if not seeds:
        raise StudyFolderError(f"{model}: no seed-<seed> folder; expected a folder written by `study collect`")
    return sorted(seeds)


def in_study_order(runs: list[StudyRun], models: list[str], pinned_seed: int) -> list[StudyRun]:
    """Full-scale runs in the order of `models` (then any other model by name), each model's pinned
    seed first and then the others in order; quick runs after them, in the same model order."""
    rank = {m: i for i, m in enumerate(models)}
    return sorted(runs, key=lambda r: (r.quick, rank.get(r.model, len(rank)), r.model, r.seed != pinned_seed, r.seed))
