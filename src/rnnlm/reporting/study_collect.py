"""`collect`: each model's newest finished run, copied from git into `reports/study/<model>/`.

A run is a commit that holds a trained model's reports: a DVC experiment (a commit under
`refs/exps/`, made by `dvc exp run` here or fetched from another machine by `dvc exp pull`), or a
commit of the current branch whose `reports/train/metrics.json` changed (a `dvc repro` that was
committed). Its model and `train.steps_scale` are read from the run's own params.yaml.

For each model the newest run (by commit date) is copied, file by file, from the commit into its
folder (`FOLDER`: the params, the training metrics and curves, the evaluation, both reports of the
samples), with a `provenance.json`: the run's commit and experiment name, the commit it was run
from, its date, device, processor, GEMM and training seconds, its steps scale, and what wrote it.
Runs at `train.steps_scale` 1 (full scale) go to `reports/study/<model>/`; others (quick runs) to
`reports/study/quick/<model>/`, so a quick run never replaces a full one. A folder is replaced only
by a newer run than the one it holds; each is written whole into a temporary folder and renamed.

Everything is read with git (`git for-each-ref`, `git show`), so the experiments need not be in
the workspace: `dvc exp pull origin NAME` brings another machine's run here as a ref.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

from rnnlm.errors import RnnlmError

FOLDER = {
    "params.yaml": "params.yaml",
    "train_metrics.json": "reports/train/metrics.json",
    "epochs.tsv": "reports/train/epochs.tsv",
    "steps.tsv": "reports/train/steps.tsv",
    "metrics.json": "reports/metrics.json",
    "reset_curve.csv": "reports/plots/reset_curve.csv",
    "context_curve.csv": "reports/plots/context_curve.csv",
    "generations.json": "reports/generations.json",
    "generations.md": "reports/generations.md",
}
"""A study folder's files: name in reports/study/<model>/ -> path in the run's commit."""

QUICK = "quick"
"""The subfolder of reports/study/ that holds runs at a reduced train.steps_scale."""

COLLECTED_BY = "python -m rnnlm.study collect"


class CollectError(RnnlmError):
    """The repository's runs cannot be read (not a git repository, git refused)."""


@dataclass(frozen=True)
class Run:
    """One finished run: its commit, where it came from, and what it trained."""

    rev: str  # the commit holding the run's reports
    experiment: str | None  # the DVC experiment's name, None for a commit of the branch
    baseline: str  # the commit the run was made from (the experiment's parent; the commit itself)
    date: str  # the commit's date, ISO 8601
    model: str
    steps_scale: float

    @property
    def full(self) -> bool:
        return self.steps_scale == 1.0

    def folder(self, out: Path) -> Path:
        return out / self.model if self.full else out / QUICK / self.model


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if done.returncode != 0:
        raise CollectError(f"git {' '.join(args)} failed in {repo}: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout


def _show(repo: Path, rev: str, path: str) -> str | None:
    """The file at `path` in commit `rev`, or None when the commit has none."""
    done = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=repo, capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def _run(repo: Path, rev: str, experiment: str | None, baseline: str, date: str) -> Run | None:
    """The run in commit `rev`, or None when it holds no complete, consistent run."""
    params_text, train_text = _show(repo, rev, "params.yaml"), _show(repo, rev, FOLDER["train_metrics.json"])
    if params_text is None or train_text is None or _show(repo, rev, FOLDER["metrics.json"]) is None:
        return None
    params, train = yaml.safe_load(params_text), json.loads(train_text)
    model = params.get("model")
    if not model or train.get("model") != model:  # reports of another model than the params select
        return None
    return Run(rev, experiment, baseline, date, model, float(params.get("train", {}).get("steps_scale", 1.0)))


def find_runs(repo: Path) -> list[Run]:
    """Every finished run of the repository: its experiments, then the commits of its branch."""
    runs = []
    refs = _git(repo, "for-each-ref", "refs/exps", "--format=%(refname) %(objectname) %(committerdate:iso-strict)")
    for line in refs.splitlines():
        ref, rev, date = line.split(" ")
        parts = ref.split("/")  # refs/exps/<baseline[:2]>/<baseline[2:]>/<name>; queue stashes differ
        if len(parts) != 5 or len(parts[2]) != 2:
            continue
        run = _run(repo, rev, parts[4], parts[2] + parts[3], date)
        if run is not None:
            runs.append(run)
    has_head = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=repo, capture_output=True).returncode == 0
    log = _git(repo, "log", "--format=%H %cI", "HEAD", "--", FOLDER["train_metrics.json"]) if has_head else ""
    for line in log.splitlines():
        rev, date = line.split(" ")
        run = _run(repo, rev, None, rev, date)
        if run is not None:
            runs.append(run)
    return runs


def newest(runs: list[Run]) -> dict[tuple[str, bool], Run]:
    """The newest run per (model, full scale or not); a tie in date goes to an experiment, then to
    the larger commit id (so the choice never depends on the order git lists them in)."""
    chosen: dict[tuple[str, bool], Run] = {}
    for run in runs:
        key = (run.model, run.full)
        best = chosen.get(key)
        if best is None or _order(run) > _order(best):
            chosen[key] = run
    return chosen


def _order(run: Run) -> tuple:
    return datetime.fromisoformat(run.date), run.experiment is not None, run.rev


def provenance(repo: Path, run: Run) -> dict[str, object]:
    train = json.loads(_show(repo, run.rev, FOLDER["train_metrics.json"]) or "{}")
    return {
        "model": run.model,
        "steps_scale": run.steps_scale,
        "experiment": run.experiment,
        "rev": run.rev,
        "commit": run.baseline,
        "date": run.date,
        "device": train.get("device"),
        "processor": train.get("processor"),
        "gemm": train.get("gemm"),
        "train_seconds": train.get("seconds"),
        "made_by": COLLECTED_BY,
    }


def _held(folder: Path) -> dict | None:
    path = folder / "provenance.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def write_folder(repo: Path, run: Run, folder: Path) -> None:
    """The run's files and provenance, written whole into a temporary folder, then put in place."""
    partial = folder.with_name(f".{folder.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for name, path in FOLDER.items():
        text = _show(repo, run.rev, path)
        if text is not None:  # runs evaluated before the context curve existed have none
            (partial / name).write_text(text, encoding="utf-8")
    (partial / "provenance.json").write_text(json.dumps(provenance(repo, run), indent=2) + "\n", encoding="utf-8")
    old = folder.with_name(f".{folder.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        folder.rename(old)
    partial.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


def collect(repo: str | Path = ".", out: str | Path = "reports/study") -> list[str]:
    """Write each model's newest run into its study folder; returns one line per model saying what
    was done."""
    repo, out = Path(repo), Path(out)
    if not (repo / ".git").exists():
        raise CollectError(f"{repo}: not a git repository; expected the root of a clone of this project")
    said = []
    for (model, full), run in sorted(newest(find_runs(repo)).items()):
        folder = run.folder(out)
        held = _held(folder)
        label = f"{model}{'' if full else f' (quick, steps scale {run.steps_scale:g})'}"
        source = run.experiment or f"commit {run.rev[:7]}"
        if held is not None and held.get("rev") == run.rev:
            said.append(f"{label}: up to date ({source})")
            continue
        if held is not None and "date" in held and datetime.fromisoformat(held["date"]) > datetime.fromisoformat(run.date):
            said.append(f"{label}: kept the newer run already in {folder} (found {source}, of {run.date})")
            continue
        write_folder(repo, run, folder)
        said.append(f"{label}: wrote {folder} from {source}")
    return said
