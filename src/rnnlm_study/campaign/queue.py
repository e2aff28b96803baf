"""`run`: the whole study as one queue of DVC experiments, one (model, seed) after another.

A model's seeds are params.yaml's pinned `seed` first, then 1, 2, 3, ...: `--seeds 5` asks for
five. `run` queues one experiment per (model, seed) the study does not hold yet (not collected in
`reports/study/<model>/seed-<seed>/`, not finished as an experiment under refs/exps/, not already
queued or running). A collected SentencePiece run that another tokenizer cut into another number of
validation pieces (`rnnlm_study.piece_counts`) is not held: the claims leave it out, so `run` trains
it again, and `collect` replaces its folder with the newer run:

    dvc exp run --queue -n <model>-seed<seed> -S model=<model> -S seed=<seed> -S train.steps_scale=<s>

and starts the queue with one worker (`dvc queue start`), unless a worker that takes runs is alive
(read from the queue's files: `dvc_queue`): the runs train one after another, each with every core.
`--jobs N` starts N workers instead, each run computing on the machine's cores divided by N
(`OMP_NUM_THREADS` in the workers' environment, unless it is set already): two runs each with every
core on the same cores wait on each other's threads (`benchmarks/two_processes.py`). The thread
count changes the last bits of some products' sums, so a run repeats itself bit for bit at the same
`--jobs` on the same machine. `--wait` follows the queue until nothing in it is queued or training,
and starts a worker again if the last one stopped.
Each finished experiment is a commit under refs/exps/, which `rnnlm_study.campaign.collect` reads.
An interrupted run resumes when it is queued again: its resume file lies in the main repository
(or under $RNNLM_RESUME_DIR, which the worker must have in its environment), not in DVC's temporary
workspace (`rnnlm.training.resume`).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from rnnlm.errors import RnnlmError
from rnnlm_study.campaign import dvc_queue
from rnnlm_study.campaign.dvc_queue import QueueState
from rnnlm_study.campaign.experiments import find_runs
from rnnlm_study.folders import folder_seed, subfolders
from rnnlm_study.piece_counts import other_tokenizer_folders


class StudyError(RnnlmError):
    """The study cannot be queued (DVC refused, an unknown model)."""


def seeds_wanted(pinned: int, count: int) -> list[int]:
    """The first `count` seeds of a model: the pinned one, then 1, 2, 3, ... (skipping the pinned)."""
    others = (s for s in range(1, count + 1) if s != pinned)
    return [pinned, *others][:count]


def experiment_name(model: str, seed: int, steps_scale: float) -> str:
    """The experiment's name: model and seed, and the scale when it is not full."""
    return f"{model}-seed{seed}" + ("" if steps_scale == 1.0 else f"-scale{steps_scale:g}")


def queue_command(model: str, seed: int, steps_scale: float) -> list[str]:
    """The `dvc exp run --queue` command of one (model, seed) run."""
    return ["dvc", "exp", "run", "--queue", "-n", experiment_name(model, seed, steps_scale), "-S", f"model={model}",
            "-S", f"seed={seed}", "-S", f"train.steps_scale={steps_scale:g}"]


def _dvc(command: list[str]) -> str:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        last = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()[-1]
        raise StudyError(f"{' '.join(command)} failed: {last}")
    return result.stdout


IDLE_WORKER_EXIT_S = 30.0
"""How long `run` waits for an idle worker to exit before it queues (DVC's exits after about 10 s)."""


def _after_an_idle_worker_exits(state: QueueState) -> QueueState:
    """The queue's state once no worker is idle, or a run trains, or after IDLE_WORKER_EXIT_S.

    A DVC worker that finds the queue empty shuts down; an experiment queued at that moment can be
    taken by the exiting worker and dropped, listed as Failed with no log (seen when a run was queued
    again right after its killed attempt; treeverse/dvc#10427 describes the race). Queuing after the
    idle worker is gone, and starting a new one, avoids it."""
    deadline = time.monotonic() + IDLE_WORKER_EXIT_S
    while state.idle and not state.training and time.monotonic() < deadline:
        time.sleep(1)
        state = dvc_queue.read(Path("."))
    return state


def held_runs(repo: Path, study_dir: Path, steps_scale: float) -> set[tuple[str, int]]:
    """The (model, seed) runs at `steps_scale` that are finished, or collected (full scale) with the
    usual tokenizer."""
    held = {(run.model, run.seed) for run in find_runs(repo) if run.steps_scale == steps_scale}
    if steps_scale == 1.0:
        left_out = other_tokenizer_folders(study_dir)
        held |= {(model.name, seed) for model in subfolders(study_dir)
                 for seed in map(folder_seed, subfolders(model)) if seed is not None} - left_out.keys()
    return held


def plan(models: Iterable[str], seeds: Sequence[int], held: set[tuple[str, int]], pending: set[str],
         steps_scale: float) -> list[tuple[str, int]]:
    """The (model, seed) runs to queue, model after model: those neither held nor pending by name."""
    return [(m, s) for m in models for s in seeds
            if (m, s) not in held and experiment_name(m, s, steps_scale) not in pending]


def worker_threads(jobs: int, cores: int | None = None) -> int:
    """The threads each of `jobs` queue workers computes on: the cores shared out, at least one."""
    return max(1, (cores or os.cpu_count() or 1) // jobs)


def run(models: Sequence[str], seeds: Sequence[int], steps_scale: float, wait: bool,
        study_dir: Path = Path("reports/study"), jobs: int = 1) -> list[tuple[str, int]]:
    """Queue what `plan` gives (models and seeds checked by the caller) and, when experiments wait
    in the queue (queued now or left by a session that ended) and no worker will take them, start
    `jobs` workers; returns the runs queued now. With `wait`, follow the queue until nothing in it
    is queued or training, starting workers again if the last one stopped taking runs."""
    state = dvc_queue.read(Path("."))
    todo = plan(models, seeds, held_runs(Path("."), study_dir, steps_scale), state.pending, steps_scale)
    if todo:
        state = _after_an_idle_worker_exits(state)
    for model, seed in todo:
        command = queue_command(model, seed, steps_scale)
        _dvc(command)
        print("queued:", " ".join(command[4:]))
    if not todo:
        print("nothing to queue: every (model, seed) asked for is collected, finished or queued")
    _see_to_a_worker(state, bool(todo), wait, jobs)
    print("Follow it with `python -m rnnlm_study status`, which also names each running task's log (of a run queued")
    print("again `dvc queue logs NAME` shows the first attempt). Not `dvc queue status`, which asks the worker and can")
    print("stop it (rnnlm_study.campaign.dvc_queue);")
    print("when it is empty: python -m rnnlm_study collect && python -m rnnlm_study report")
    if wait:
        _follow(jobs)
    return todo


def _see_to_a_worker(state: QueueState, queued_now: bool, wait: bool, jobs: int) -> None:
    """Start `jobs` workers when runs wait (`queued_now`, or left queued in `state`) and no worker
    takes them; never a second beside one that is taking runs or still training (it would share
    the same cores): say so instead."""
    if state.taking:
        if queued_now:
            print("a queue worker is already running; it will take these experiments in turn")
    elif state.training:  # its worker stopped taking runs: a new one now would train beside its run
        print(f"the queue's worker stopped taking runs (DVC's broker: see rnnlm_study.campaign.dvc_queue); it "
              f"exits when {', '.join(t.name for t in state.tasks if t.alive)} ends, and "
              + ("then this starts one." if wait else "then `dvc queue start` (or this command) starts one."))
    elif queued_now or state.queued:
        _start_workers(jobs)


FOLLOW_EVERY_S = 30
"""Seconds between two looks at the queue while `run --wait` follows it."""


def _follow(jobs: int) -> None:
    """Return once nothing in the queue is queued or training; start `jobs` workers again whenever
    runs wait and the last worker has exited."""
    while True:
        if not dvc_queue.busy(Path(".")):  # the cheap question first: DVC's reader takes seconds a call
            state = dvc_queue.read(Path("."))
            if not state.training and not state.queued:
                return
            if not state.workers and state.queued:
                _start_workers(jobs)
        time.sleep(FOLLOW_EVERY_S)


def _start_workers(jobs: int) -> None:
    """`dvc queue start --jobs N`, each worker's runs on its share of the cores when N > 1."""
    env = dict(os.environ)
    if jobs > 1:
        env.setdefault("OMP_NUM_THREADS", str(worker_threads(jobs)))
    # Not through a pipe: the worker DVC leaves running would hold it open, and we would wait on it.
    started = subprocess.run(["dvc", "queue", "start", "--jobs", str(jobs)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=env)
    if started.returncode != 0:
        raise StudyError("dvc queue start failed; run it by hand to see why")
    threads = env.get("OMP_NUM_THREADS", "")
    print("queue started (one worker)." if jobs == 1 else
          f"queue started ({jobs} workers, each run on {threads} thread{'' if threads == '1' else 's'}).")
