"""`run --slurm`: the study's (model, seed) runs as one Slurm array job, results back through git and DVC.

In:  the models and seeds asked for, the scale, and the Slurm settings (`cluster/slurm.yaml`, each
     overridable on the command line).
Out: `.slurm/<commit>-<time>/runs.txt` (one "MODEL SEED NAME" line per array index), one
     `sbatch --array` of `cluster/study.sbatch`, its job id; each task's log in that folder's logs/
     and its state in status/<name> (running, done, failed, cancelled).

A run is skipped when it is already collected here or already pushed to the remote as
`refs/exps/<commit>/<model>-seed<seed>` (the experiment's ref: its commit, model and seed), so the
same command run again after a task died submits only what is missing; a resubmitted task works in
the same scratch path as before and resumes from its resume file there. Each task clones the
commit, runs `dvc exp run --pull --allow-missing` and `dvc exp push --run-cache` (the script's
header says how); `dvc exp pull origin NAME ...` and `python -m rnnlm_study collect` bring the
runs home.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rnnlm_study.campaign.queue import StudyError, experiment_name

SCRIPT = Path("cluster/study.sbatch")
CONFIG = Path("cluster/slurm.yaml")
SUBMISSIONS = Path(".slurm")
"""Where each submission's run list, logs and states go: a git-ignored folder of the repository,
which the compute nodes must see (a cluster's home or project file system)."""


@dataclass(frozen=True)
class SlurmSettings:
    """What each array task asks of Slurm, and where it works."""

    partition: str | None = None  # the cluster's default partition when None
    time: str = "04:00:00"  # per task
    cpus_per_task: int = 8
    gpus: int = 1  # per task, as --gres=gpu:N; 0 asks for none
    mem: str | None = None  # per task, e.g. "32G"; the partition's default when None
    venv: str | None = None  # a venv with requirements.txt installed; None: each task builds one
    scratch: str | None = None  # node-local scratch root; None: $TMPDIR on the node, else /tmp
    remote: str = "origin"  # the git remote the tasks clone and push to

    def sbatch_options(self) -> list[str]:
        options = [f"--time={self.time}", f"--cpus-per-task={self.cpus_per_task}"]
        options += [f"--partition={self.partition}"] if self.partition else []
        options += [f"--gres=gpu:{self.gpus}"] if self.gpus else []
        options += [f"--mem={self.mem}"] if self.mem else []
        return options


class _SettingsLoader(yaml.SafeLoader):
    """YAML with plain integers only: `time: 12:00:00` stays text, not YAML 1.1's base-60 number of
    seconds, which Slurm would read as minutes."""


_SettingsLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_SettingsLoader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))


def load_settings(path: Path, overrides: dict[str, Any]) -> SlurmSettings:
    """The settings of `path` (a YAML mapping of SlurmSettings' fields; none when it does not
    exist), then the `overrides` that are not None."""
    fields = {f.name: f for f in dataclasses.fields(SlurmSettings)}
    values: dict[str, Any] = {}
    if path.is_file():
        try:
            loaded = yaml.load(path.read_text(encoding="utf-8"), Loader=_SettingsLoader) or {}
        except yaml.YAMLError as error:
            raise StudyError(f"{path}: does not parse ({str(error).splitlines()[0]})") from None
        if not isinstance(loaded, dict):
            raise StudyError(f"{path}: expected a mapping of {', '.join(fields)}")
        unknown = sorted(set(loaded) - set(fields))
        if unknown:
            raise StudyError(f"{path}: {unknown[0]}: unknown key; expected one of {', '.join(fields)}")
        values.update({k: v for k, v in loaded.items() if v is not None})
    values.update({k: v for k, v in overrides.items() if v is not None})
    for key, least in (("cpus_per_task", 1), ("gpus", 0)):
        if key in values and (not isinstance(values[key], int) or values[key] < least):
            raise StudyError(f"slurm {key}: expected an integer of at least {least}, got {values[key]!r}")
    return SlurmSettings(**{k: v if k in ("cpus_per_task", "gpus") else str(v) for k, v in values.items()})


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip() or "no output").splitlines()[-1]
        raise StudyError(f"git {' '.join(args)} failed: {last}")
    return done.stdout


def pushed_names(repo: Path, remote: str, commit: str) -> set[str]:
    """The experiment names the remote holds for `commit` (refs/exps/<commit>/<name>)."""
    prefix = f"refs/exps/{commit[:2]}/{commit[2:]}/"
    listed = _git(repo, "ls-remote", remote, f"{prefix}*")
    return {line.split("\t", 1)[1][len(prefix):] for line in listed.splitlines() if "\t" in line}


def runs_to_submit(models: Sequence[str], seeds: Sequence[int], held: set[tuple[str, int]], pushed: set[str],
                   steps_scale: float) -> tuple[list[tuple[str, int, str]], list[str]]:
    """(model, seed, name) of each run to submit, and one line per run skipped."""
    todo, skipped = [], []
    for model in models:
        for seed in seeds:
            name = experiment_name(model, seed, steps_scale)
            if (model, seed) in held:
                skipped.append(f"{model} seed {seed}: held here already")
            elif name in pushed:
                skipped.append(f"{model} seed {seed}: already pushed as {name}")
            else:
                todo.append((model, seed, name))
    return todo, skipped


def submit(repo: Path, runs: list[tuple[str, int, str]], settings: SlurmSettings, steps_scale: float,
           commit: str) -> tuple[str, Path]:
    """Write the run list and submit the array job; returns its id and the submission's folder."""
    origin = _git(repo, "remote", "get-url", settings.remote).strip()
    folder = (repo / SUBMISSIONS / f"{commit[:7]}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    for sub in ("logs", "status"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / "runs.txt").write_text("".join(f"{m} {s} {n}\n" for m, s, n in runs), encoding="utf-8")
    scratch = settings.scratch or os.environ.get("TMPDIR") or "/tmp"
    export = {"RNNLM_RUNS": folder / "runs.txt", "RNNLM_ORIGIN": origin, "RNNLM_COMMIT": commit,
              "RNNLM_STEPS_SCALE": f"{steps_scale:g}", "RNNLM_SCRATCH": scratch, "RNNLM_STATUS": folder / "status",
              **({"RNNLM_VENV": Path(settings.venv).expanduser().resolve()} if settings.venv else {})}
    command = ["sbatch", "--parsable", f"--array=0-{len(runs) - 1}", f"--output={folder}/logs/%A_%a.log",
               *settings.sbatch_options(), "--export=ALL," + ",".join(f"{k}={v}" for k, v in export.items()),
               str(repo / SCRIPT)]
    try:
        done = subprocess.run(command, cwd=repo, capture_output=True, text=True)
    except FileNotFoundError:
        raise StudyError("sbatch: not found; run --slurm on a machine that submits to a Slurm cluster") from None
    if done.returncode != 0:
        raise StudyError(f"sbatch refused the job: {(done.stderr.strip() or done.stdout.strip()).splitlines()[-1]}")
    return done.stdout.strip().split(";")[0], folder


def run_slurm(repo: Path, models: Sequence[str], seeds: Sequence[int], steps_scale: float, settings: SlurmSettings,
              held: set[tuple[str, int]]) -> str | None:
    """Submit what is missing of (models × seeds) at HEAD; print what was skipped and how to follow
    the job. Returns the job id, or None when nothing was missing."""
    if _git(repo, "status", "--porcelain", "--untracked-files=no").strip():
        raise StudyError("the working copy has uncommitted changes; the tasks run the commit: commit and push first")
    commit = _git(repo, "rev-parse", "HEAD").strip()
    if not _git(repo, "ls-remote", settings.remote).count(commit) and not _git(
            repo, "branch", "-r", "--contains", commit).strip():
        raise StudyError(f"commit {commit[:7]} is not on {settings.remote}; push it first (the tasks clone it from there)")
    todo, skipped = runs_to_submit(models, seeds, held, pushed_names(repo, settings.remote, commit), steps_scale)
    for line in skipped:
        print("skipping", line)
    if not todo:
        print("nothing to submit: every (model, seed) asked for is held here or pushed")
        return None
    job, folder = submit(repo, todo, settings, steps_scale, commit)
    names = " ".join(name for _, _, name in todo)
    print(f"submitted job {job}: {len(todo)} runs at {commit[:7]} ({folder.relative_to(repo.resolve())}/runs.txt)")
    print(f"follow it:  squeue -j {job}   python -m rnnlm_study status   tail -f {folder}/logs/{job}_*.log")
    print(f"then:       dvc exp pull {settings.remote} {names}")
    print("            python -m rnnlm_study collect && python -m rnnlm_study report")
    return job


def slurm_states(repo: Path) -> dict[str, tuple[str, str]]:
    """The newest state each run wrote under .slurm/*/status/: name -> (state, "time job")."""
    states: dict[str, tuple[str, str]] = {}
    for path in sorted((repo / SUBMISSIONS).glob("*/status/*")):
        if path.suffix == ".tmp":
            continue
        words = path.read_text(encoding="utf-8").split()
        if len(words) >= 2 and (path.name not in states or words[1] >= states[path.name][1].split()[0]):
            states[path.name] = (words[0], " ".join(words[1:]))
    return states
