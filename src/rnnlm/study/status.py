"""`status`: where each (model, seed) of the study stands.

In:  the models and seeds asked for, and what this repository knows: the study folders, the
     experiments under refs/exps/, DVC's local queue, and the states the Slurm tasks wrote.
Out: one line per (model, seed): collected; finished, not collected (an experiment here); pushed to
     the git remote from this commit, not pulled; queued, running, failed or cancelled (DVC's queue
     or a Slurm task); missing.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from rnnlm.study.collect import find_runs, seed_folder_name
from rnnlm.study.queue import StudyError, experiment_name
from rnnlm.study.slurm import pushed_names, slurm_states


def _local_queue(repo: Path) -> dict[str, str]:
    """name -> status of DVC's local queue (empty when DVC cannot tell)."""
    done = subprocess.run(["dvc", "queue", "status"], cwd=repo, capture_output=True, text=True)
    rows = [line.split() for line in done.stdout.splitlines()[1:] if line and not line.startswith("Worker status:")]
    return {words[1]: words[-1].lower() for words in rows if len(words) >= 3} if done.returncode == 0 else {}


def _pushed(repo: Path, remote: str) -> set[str]:
    """The experiments of HEAD on `remote`; none when there is no such remote or it cannot be read."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    try:
        return pushed_names(repo, remote, head) if head else set()
    except StudyError:
        return set()


def status_lines(repo: Path, study_dir: Path, models: Sequence[str], seeds: Sequence[int],
                 steps_scale: float, remote: str = "origin") -> list[str]:
    """One line per (model, seed), as the module docstring says."""
    finished = {(r.model, r.seed) for r in find_runs(repo) if r.steps_scale == steps_scale}
    queue, slurm, pushed = _local_queue(repo), slurm_states(repo), _pushed(repo, remote)
    lines = [f"{'model':<14} {'seed':>6}  state"]
    for model in models:
        for seed in seeds:
            name = experiment_name(model, seed, steps_scale)
            if steps_scale == 1.0 and (study_dir / model / seed_folder_name(seed)).is_dir():
                state = "collected"
            elif (model, seed) in finished:
                state = f"finished, not collected (experiment {name})"
            elif name in pushed:
                state = f"pushed to {remote}, not pulled: dvc exp pull {remote} {name}"
            elif name in queue:
                state = f"{queue[name]} (DVC queue)"
            elif name in slurm:
                kind, when = slurm[name]
                state = f"{kind} (Slurm task {when.split()[-1]}, {when.split()[0]})"
            else:
                state = "missing"
            lines.append(f"{model:<14} {seed:>6}  {state}")
    return lines
