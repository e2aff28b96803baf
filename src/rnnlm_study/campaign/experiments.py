"""The finished runs a repository holds, read with git alone, and the files each holds.

A run is a commit that holds a trained model's reports: a DVC experiment (a commit under
`refs/exps/`, made by `dvc exp run` here or fetched from another machine by `dvc exp pull`), or a
commit of the current branch whose `reports/train/metrics.json` changed (a `dvc repro` that was
committed). Its model, seed and `train.steps_scale` are read from the run's own params.yaml; a
commit whose stages disagree (its dvc.lock records another checkpoint or file than it holds) is no
run. `FOLDER` names the files a run's study folder copies (`rnnlm_study.campaign.collect` writes them).

In:  a repository's path. Out: `find_runs` -> every `Run`; `newest` -> the newest per study folder.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rnnlm.errors import RnnlmError
from rnnlm.params_base import parse_yaml
from rnnlm_study.folders import FOLDER, QUICK, seed_folder_name


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
    seed: int
    steps_scale: float

    @property
    def full(self) -> bool:
        return self.steps_scale == 1.0

    def folder(self, out: Path) -> Path:
        return out / self.model / seed_folder_name(self.seed) if self.full else out / QUICK / self.model

    @property
    def key(self) -> tuple[str, int | None]:
        """What one study folder holds: a (model, seed) at full scale; a model's newest quick run."""
        return (self.model, self.seed) if self.full else (self.model, None)


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if done.returncode != 0:
        raise CollectError(f"git {' '.join(args)} failed in {repo}: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout


class CommitFiles:
    """The files of a repository's commits, read through one `git cat-file --batch` process: a
    process per file would start git a dozen times for each of dozens of runs. Use it in a `with`
    block, which ends the process."""

    def __init__(self, repo: Path):
        self._git = subprocess.Popen(["git", "cat-file", "--batch"], cwd=repo, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def __enter__(self) -> CommitFiles:
        return self

    def __exit__(self, *exc_info) -> None:
        self._git.stdin.close()
        self._git.wait()
        self._git.stdout.close()

    def bytes(self, rev: str, path: str) -> bytes | None:
        """The bytes of the file at `path` in commit `rev`; None when the commit has no such file."""
        self._git.stdin.write(f"{rev}:{path}\n".encode())
        self._git.stdin.flush()
        header = self._git.stdout.readline().split()  # "<object> <type> <size>", or "<name> missing"
        if len(header) != 3:
            return None
        data = self._git.stdout.read(int(header[2]) + 1)[:-1]  # the object, then a newline
        return data if header[1] == b"blob" else None

    def text(self, rev: str, path: str) -> str | None:
        """The file at `path` in commit `rev` as UTF-8 text; None when the commit has no such file."""
        data = self.bytes(rev, path)
        return None if data is None else data.decode("utf-8")


def _run(files: CommitFiles, rev: str, experiment: str | None, baseline: str, date: str,
         refused: list[str] | None = None) -> Run | None:
    """The run in commit `rev`, or None when it holds no complete, consistent run (an experiment's
    reason then goes to `refused`)."""
    params_text, train_text = files.text(rev, "params.yaml"), files.text(rev, FOLDER["train_metrics.json"])
    if params_text is None or train_text is None or files.bytes(rev, FOLDER["metrics.json"]) is None:
        return None
    params, train = parse_yaml(params_text), json.loads(train_text)
    model = params.get("model")
    if not model or train.get("model") != model:  # reports of another model than the params select
        return None
    why = _stages_disagree(files, rev)
    if why is not None:
        if refused is not None and experiment is not None:
            refused.append(f"experiment {experiment}: not collected: {why}; expected a run of every stage "
                           "(dvc exp run without a stage name)")
        return None
    return Run(rev, experiment, baseline, date, model, int(params.get("seed", 0)),
               float(params.get("train", {}).get("steps_scale", 1.0)))


def _stages_disagree(files: CommitFiles, rev: str) -> str | None:
    """Why the reports in commit `rev` are not of one run of every stage, or None when they are: its
    dvc.lock must record the checkpoint the train stage wrote as the one generate and evaluate read,
    and each study file as the stage that wrote it recorded it (an experiment that ran the train stage
    alone keeps its parent's evaluation and samples). A commit without dvc.lock is taken as it is."""
    lock_text = files.text(rev, "dvc.lock")
    if lock_text is None:
        return None
    stages = (parse_yaml(lock_text) or {}).get("stages", {})

    def md5s(kind: str, stage: str) -> dict[str, str]:
        return {entry["path"]: entry.get("md5") for entry in stages.get(stage, {}).get(kind, [])}

    trained = md5s("outs", "train").get(CHECKPOINT)
    for stage in ("generate", "evaluate"):
        if md5s("deps", stage).get(CHECKPOINT, trained) != trained:
            return f"its {stage} stage read another checkpoint than its train stage wrote"
    recorded = {path: md5 for stage in stages for path, md5 in md5s("outs", stage).items()}
    for path in FOLDER.values():
        data = files.bytes(rev, path)
        if path in recorded and data is not None and hashlib.md5(data).hexdigest() != recorded[path]:
            return f"its {path} is not the one its dvc.lock records"
    return None


CHECKPOINT = "models/model.pt"


def find_runs(repo: Path, refused: list[str] | None = None) -> list[Run]:
    """Every finished run of the repository: its experiments, then the commits of its branch (those
    whose stages disagree left out; an experiment's reason goes to `refused`)."""
    refs = _git(repo, "for-each-ref", "refs/exps", "--format=%(refname) %(objectname) %(committerdate:iso-strict)")
    experiments = []  # (rev, name, baseline, date)
    for line in refs.splitlines():
        ref, rev, date = line.split(" ")
        parts = ref.split("/")  # refs/exps/<baseline[:2]>/<baseline[2:]>/<name>; queue stashes differ
        if len(parts) == 5 and len(parts[2]) == 2:
            experiments.append((rev, parts[4], parts[2] + parts[3], date))
    has_head = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=repo, capture_output=True).returncode == 0
    log = _git(repo, "log", "--format=%H %cI", "HEAD", "--", FOLDER["train_metrics.json"]) if has_head else ""
    with CommitFiles(repo) as files:
        runs = [_run(files, rev, name, baseline, date, refused) for rev, name, baseline, date in experiments]
        runs += [_run(files, rev, None, rev, date) for rev, date in (line.split(" ") for line in log.splitlines())]
    return [run for run in runs if run is not None]


def newest(runs: list[Run]) -> dict[tuple[str, int | None], Run]:
    """The newest run per study folder (`Run.key`); a tie in date goes to an experiment, then to
    the larger commit id (so the choice never depends on the order git lists them in)."""
    chosen: dict[tuple[str, int | None], Run] = {}
    for run in runs:
        best = chosen.get(run.key)
        if best is None or _order(run) > _order(best):
            chosen[run.key] = run
    return chosen


def _order(run: Run) -> tuple:
    return datetime.fromisoformat(run.date), run.experiment is not None, run.rev
