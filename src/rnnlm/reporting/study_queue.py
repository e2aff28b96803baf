"""`run`: the whole study as one queue of DVC experiments, one model after another.

`run` queues one experiment per model (`dvc exp run --queue -S model=NAME -S train.steps_scale=S`)
and starts the queue with one worker (`dvc queue start`), unless a worker is already running: the
models train one after another, each with every core. `--wait` follows the queue until it is empty.
Each finished experiment is a commit under refs/exps/, which `rnnlm.reporting.study_collect` reads.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence

from rnnlm.errors import RnnlmError
from rnnlm.params import load_params


class StudyError(RnnlmError):
    """The study cannot be queued (DVC refused, an unknown model)."""


def queue_commands(models: Sequence[str], steps_scale: float) -> list[list[str]]:
    """The `dvc exp run --queue` command of each model."""
    return [
        ["dvc", "exp", "run", "--queue", "-S", f"model={name}", "-S", f"train.steps_scale={steps_scale:g}"]
        for name in models
    ]


def _dvc(command: list[str]) -> str:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        last = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()[-1]
        raise StudyError(f"{' '.join(command)} failed: {last}")
    return result.stdout


def _workers_running() -> bool:
    """True when `dvc queue status` reports an active or idle worker (a second one would train in
    parallel on the same cores)."""
    for line in _dvc(["dvc", "queue", "status"]).splitlines():
        if line.startswith("Worker status:"):
            counts = [int(word) for word in line.replace(",", " ").split() if word.isdigit()]
            return sum(counts) > 0
    return False


def _queue_busy() -> bool:
    """True while `dvc queue status` lists a queued or running experiment."""
    status = _dvc(["dvc", "queue", "status"])
    return any(word in line for line in status.splitlines()[1:] for word in ("Queued", "Running"))


def run(models: Sequence[str], steps_scale: float, wait: bool, params_path: str = "params.yaml") -> None:
    known = load_params(params_path).models
    unknown = [m for m in models if m not in known]
    if unknown:
        raise StudyError(f"--models {' '.join(unknown)}: not under models: in {params_path}; expected some of {', '.join(known)}")
    for command in queue_commands(models, steps_scale):
        _dvc(command)
        print("queued:", " ".join(command[3:]))
    if _workers_running():
        print("a queue worker is already running; it will take these experiments in turn")
    else:
        # Not through a pipe: the worker DVC leaves running would hold it open, and we would wait on it.
        started = subprocess.run(["dvc", "queue", "start", "--jobs", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if started.returncode != 0:
            raise StudyError("dvc queue start failed; run it by hand to see why")
        print("queue started (one worker).")
    print("Follow it with `dvc queue status` / `dvc queue logs NAME`;")
    print("when it is empty: python -m rnnlm.study collect && python -m rnnlm.study report")
    while wait and _queue_busy():
        time.sleep(30)
