"""A run trained where there is no DVC (a lent GPU machine), as `benchmarks/gpu_check.py --study` packs it.

In:  `<model>-seed-<seed>.tar.gz` archives: one `<model>/seed-<seed>/` folder holding the study files
     (`rnnlm_study.folders.FOLDER`) and a `provenance.json` naming the GPU.
Out: the run's folder name, its files and its provenance, once the archive is checked to hold plain
     files of one run whose params, training metrics and provenance agree; anything else is refused
     in one line (`CollectError`). `collect --archives` writes what comes out like any other run.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from rnnlm_study.campaign.experiments import CollectError
from rnnlm_study.folders import FOLDER, seed_folder_name
from rnnlm_study.study_run import provenance_date
from rnnlm.params_base import parse_yaml

ARCHIVE_MADE_BY = "benchmarks/gpu_check.py --study"


def read_archive(path: Path) -> tuple[str, dict[str, str], dict[str, object]]:
    """The run in `path`, a `<model>-seed-<seed>.tar.gz` written by `gpu_check.py --study` on a
    machine without DVC: its folder inside (`<model>/seed-<seed>`), its study files (name -> text)
    and its provenance. Anything else is refused in one line (`CollectError`)."""
    def refuse(why: str) -> CollectError:
        return CollectError(f"{path}: {why}; expected a <model>-seed-<seed>.tar.gz written by {ARCHIVE_MADE_BY}")

    folder, texts = _archive_files(path, refuse)
    unknown = set(texts) - set(FOLDER) - {"provenance.json"}
    missing = {"params.yaml", "train_metrics.json", "metrics.json", "provenance.json"} - set(texts)
    if unknown or missing:
        raise refuse(f"{'holds ' + ', '.join(sorted(unknown)) if unknown else 'lacks ' + ', '.join(sorted(missing))}")
    try:
        params, train = parse_yaml(texts["params.yaml"]), json.loads(texts["train_metrics.json"])
        record = json.loads(texts.pop("provenance.json"))
    except (yaml.YAMLError, ValueError) as error:
        raise refuse(f"a file does not parse ({type(error).__name__})") from None
    _check_one_run(folder, params, train, record, refuse)
    return folder, texts, record


def _archive_files(path: Path, refuse: Callable[[str], CollectError]) -> tuple[str, dict[str, str]]:
    """(its one folder, file name -> text) of the archive at `path`, which must hold plain files only,
    all in one `<model>/seed-<seed>/` folder, all UTF-8; else the error `refuse` makes of why."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            odd = [m.name for m in tar.getmembers() if not (m.isfile() or m.isdir())]
            if odd:
                raise refuse(f"holds {odd[0]}, a link or special file, where only plain files belong")
            members = [m for m in tar.getmembers() if m.isfile()]
            folders = {str(PurePosixPath(m.name).parent) for m in members}
            if len(folders) != 1 or any(PurePosixPath(m.name).is_absolute() or ".." in PurePosixPath(m.name).parts
                                         or len(PurePosixPath(m.name).parts) != 3 for m in members):
                raise refuse("does not hold exactly one <model>/seed-<seed>/ folder of files")
            texts = {PurePosixPath(m.name).name: tar.extractfile(m).read().decode("utf-8") for m in members}
    except FileNotFoundError:
        raise CollectError(f"{path}: no such file; expected a <model>-seed-<seed>.tar.gz") from None
    except (tarfile.TarError, EOFError, OSError, UnicodeDecodeError) as error:
        raise refuse(f"not a readable gzip'd tar archive ({type(error).__name__})") from None
    return folders.pop(), texts


def _check_one_run(folder: str, params: Any, train: Any, record: Any,
                   refuse: Callable[[str], CollectError]) -> None:
    """Raise what `refuse` makes unless the archive's params, training metrics and provenance are
    mappings that name one run (model and seed), the one its `folder` is named for."""
    for name, value in (("params.yaml", params), ("train_metrics.json", train), ("provenance.json", record)):
        if not isinstance(value, dict):
            raise refuse(f"its {name} holds {type(value).__name__}, not a mapping of fields")
    model, seed, scale = params.get("model"), params.get("seed"), (params.get("train") or {}).get("steps_scale", 1.0)
    if not isinstance(seed, int) or isinstance(seed, bool) or not isinstance(scale, (int, float)) or \
            isinstance(scale, bool) or provenance_date(record.get("date")) is None:
        raise refuse(f"its params' seed {seed!r} or train.steps_scale {scale!r}, or its provenance's date "
                     f"{record.get('date')!r}, is not a run's (a whole seed, a number, an ISO 8601 date)")
    if folder != f"{model}/{seed_folder_name(seed)}" or train.get("model") != model or record.get("model") != model:
        raise refuse(f"its folder {folder}, params (model {model}, seed {seed}), training metrics and provenance "
                     "do not name one run")


def archive_paths(paths: list[Path]) -> list[Path]:
    """The archives named: each file as it is, each folder's `*.tar.gz` in name order."""
    found: list[Path] = []
    for path in paths:
        found += sorted(path.glob("*.tar.gz")) if path.is_dir() else [path]
    return found
