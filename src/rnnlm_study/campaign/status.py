"""`status`: where each (model, seed) of the study stands.

In:  the models and seeds asked for, and what this repository knows: the study folders, the
     experiments under refs/exps/, DVC's local queue, the states the Slurm tasks wrote, and the
     resume files of runs that were cut off.
Out: one line per (model, seed): collected; collected with another tokenizer, left out of the claims
     (`rnnlm_study.piece_counts`: `run` trains it again; a retraining shows as any other run does);
     finished, not collected (an experiment here); pushed to
     the git remote from this commit, not pulled; queued (in DVC's queue with its place in line, or
     a Slurm task), running (with the command that prints its log), failed or cancelled; cut off
     (listed running in DVC's queue, its process gone: the session that ran it ended); interrupted
     (a resume file, nothing queued); missing. A run with a resume file says the epoch it reached,
     the processor that last trained it and the file; the lines end with the commands that continue
     the runs cut off, the runs training that DVC's queue no longer lists (with the processes that
     stop them), and what to do when queued runs have no worker to take them. DVC's queue is read
     from its files (`dvc_queue`), never by asking its worker, which can stop it. A run training now
     (in DVC's queue or the workspace) also shows its live figures, read from the training report it
     rewrites after every save: the epoch reached of its total, the last and best validation loss,
     the time an epoch takes, and about when it will end.
"""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

import yaml

from rnnlm_study.campaign import dvc_queue
from rnnlm_study.campaign.dvc_queue import QueueState, Task
from rnnlm_study.campaign.experiments import find_runs
from rnnlm_study.folders import seed_folder_name
from rnnlm_study.piece_counts import other_tokenizer_folders
from rnnlm_study.campaign.queue import StudyError, experiment_name
from rnnlm_study.campaign.slurm import pushed_names, slurm_states
from rnnlm.training.resume import RESUME_ENV, ResumeHeader, list_resume_files
from rnnlm.params_base import parse_yaml


def _local_queue(repo: Path) -> QueueState | None:
    """DVC's queue in `repo`, read from its files (`dvc_queue`: asking the worker can stop it); None
    when DVC cannot read it (no DVC repository there)."""
    from dvc.exceptions import DvcException

    try:
        return dvc_queue.read(repo)
    except DvcException:
        return None


class _TrainReport(NamedTuple):
    """One train stage report (reports/train/) as `_live` reads it."""
    run: tuple[str, int, float]  # (model, seed, steps scale), from the params.yaml beside it
    written: float  # its metrics.json's modification time
    metrics: dict
    epochs: list[dict]  # epochs.tsv's rows, one per epoch done


def _train_reports(repo: Path) -> Iterator[_TrainReport]:
    """Each readable train stage report in `repo`'s workspace and in DVC's temporary workspaces of
    queued experiments; reports that cannot be read (missing or damaged files) are skipped."""
    for report in [repo / "reports/train", *sorted((repo / ".dvc/tmp/exps").glob("*/reports/train"))]:
        try:
            written = (report / "metrics.json").stat().st_mtime
            metrics = json.loads((report / "metrics.json").read_text(encoding="utf-8"))
            params = parse_yaml((report.parent.parent / "params.yaml").read_text(encoding="utf-8"))
            epochs = list(csv.DictReader((report / "epochs.tsv").read_text(encoding="utf-8").splitlines(),
                                         delimiter="\t")) if (report / "epochs.tsv").is_file() else []
            run = (params["model"], int(params["seed"]), float((params.get("train") or {}).get("steps_scale", 1.0)))
        except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError):
            continue
        yield _TrainReport(run, written, metrics, epochs)


def _live(repo: Path) -> dict[tuple[str, int, float], str]:
    """(model, seed, steps scale) -> the live line of each run training now: its newest train report
    (`_train_reports`), where that report is marked unfinished. A run cut off and resumed leaves its
    old workspace behind (DVC removes it only when the run ends), so only the newest report of a run
    counts: once the resumed run has finished, the old workspace's unfinished report is not live."""
    newest = {report.run: report for report in sorted(_train_reports(repo), key=lambda report: report.written)}
    lines = {run: _live_line(report.metrics, report.epochs) for run, report in newest.items()
             if report.metrics.get("finished") is False}
    return {run: line for run, line in lines.items() if line is not None}


def _live_line(metrics: dict, epochs: list[dict]) -> str | None:
    """The live figures of an unfinished train report (`metrics.json`, which then holds the epochs
    planned and the steps so far, and the rows of `epochs.tsv`, one per epoch done, each with the step
    it ended at): the epochs done and the steps into the next (`_epochs_phrase`), then the time to
    go: the epochs left, less the part of the next one done (every epoch has as many steps as the
    first), at the median epoch's seconds. None for a report not of our writing."""
    try:
        planned, steps = int(metrics["epochs_planned"]), int(metrics.get("steps", 0))
        if not epochs:
            return f"live: {_epochs_phrase(0, planned, steps)}"
        done = int(metrics.get("epochs", 0))
        ended_at = int(epochs[-1].get("step") or 0)  # older reports lack the column
        into = steps - ended_at if ended_at else 0
        left = planned - done - (into * done / ended_at if into else 0)  # epochs; into > 0 needs ended_at > 0
        per_epoch = statistics.median(float(row["seconds"]) for row in epochs)  # a stopped epoch counts once
        return (f"live: {_epochs_phrase(done, planned, into)}, validation loss {metrics['val_loss']:.4f} (best "
                f"{metrics['best_val_loss']:.4f}), {per_epoch:.0f} s an epoch, about "
                f"{left * per_epoch / 60:.0f} min to go")
    except (KeyError, ValueError, TypeError):
        return None


def _pushed(repo: Path, remote: str) -> set[str]:
    """The experiments of HEAD on `remote`; none when there is no such remote or it cannot be read."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    try:
        return pushed_names(repo, remote, head) if head else set()
    except StudyError:
        return set()


def _resume_files(folder: Path | None, steps_scale: float) -> dict[tuple[str, int], ResumeHeader]:
    """(model, seed) -> the newest readable resume file of that run at `steps_scale` in `folder`."""
    found: dict[tuple[str, int], ResumeHeader] = {}
    if folder is None:
        return found
    for item in list_resume_files(folder):  # newest first
        if isinstance(item, ResumeHeader) and float(item["steps_scale"] or 1.0) == steps_scale:
            found.setdefault((item["model"], item["seed"]), item)
    return found


def _epochs_phrase(done: int, planned: int, steps_into_next: int) -> str:
    """How far a run got, as every line of `status` and `resume-files` says it: "7/20 epochs done",
    and "+ 120 steps" when it stood inside the next epoch."""
    return f"{done}/{planned} epochs done" + (f" + {steps_into_next} steps" if steps_into_next > 0 else "")


def epochs_done(header: ResumeHeader) -> str:
    """How far a resume file's run got (`_epochs_phrase`)."""
    return _epochs_phrase(header["epoch"], header["epochs"], header["step_in_epoch"] or 0)


def age_words(seconds: float) -> str:
    """An age as a reader takes it in: "just now", then minutes, hours (from 90 min) and days (from 2 d)."""
    if seconds < 60:
        return "just now"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago" if seconds < 172_800 else f"{seconds / 86400:.1f} d ago"


def _progress(header: ResumeHeader) -> str:
    """How far the run got, where, and when it last saved (a file saved minutes ago may belong to a
    training still running in another checkout, which this repository's queue does not see)."""
    where = f", last on {header['processor']}" if header["processor"] else ""
    return f"{epochs_done(header)}{where}, resume file {header.path}, saved {age_words(header.age_s())}"


@dataclass(frozen=True)
class _Known:
    """What this repository knows of the study's runs at one steps scale, read once for every
    (model, seed) that `status_lines` lists."""

    study_dir: Path
    left_out: dict[tuple[str, int], str]  # collected runs of another tokenizer, each with why
    steps_scale: float
    remote: str
    finished: set[tuple[str, int]]  # experiments here
    local: QueueState | None  # DVC's queue
    pushed: set[str]  # experiment names on the remote
    slurm: dict[str, tuple[str, str]]  # name -> (state, when)
    saved: dict[tuple[str, int], ResumeHeader]  # resume files
    live: dict[tuple[str, int, float], str]  # live figures of the runs training now

    @cached_property
    def queue(self) -> dict[str, Task]:
        """DVC's queue entries by name (`QueueState.by_name`)."""
        return self.local.by_name() if self.local is not None else {}

    @cached_property
    def in_line(self) -> list[str]:
        """The names queued, in the order its worker takes them."""
        return self.local.in_line() if self.local is not None else []


@dataclass(frozen=True)
class _RunState:
    """One run's state line, and what continuing it takes: a kill of its dead queue entry, a queued run."""

    text: str
    cut_off: bool = False  # DVC's queue lists it running, its process gone: `dvc queue kill` first
    to_continue: bool = False  # a resume file waits: queue it again


def _run_state(known: _Known, model: str, seed: int) -> _RunState:
    """The state of (model, seed), as the module docstring lists them; a run not collected or finished
    also shows its live figures or, failing those, how far its resume file got."""
    name = experiment_name(model, seed, known.steps_scale)
    left_out = known.left_out.get((model, seed))
    if known.steps_scale == 1.0 and (known.study_dir / model / seed_folder_name(seed)).is_dir() and left_out is None:
        return _RunState("collected")
    if (model, seed) in known.finished:
        return _RunState(f"finished, not collected (experiment {name})")
    header = known.saved.get((model, seed))
    entry, in_line = known.queue.get(name), known.in_line
    cut_off = failed = interrupted = False  # each a run to continue from its resume file
    if name in known.pushed:
        text = f"pushed to {known.remote}, not pulled: dvc exp pull {known.remote} {name}"
    elif entry is not None and entry.status == "Running" and not entry.alive:
        text, cut_off = "cut off: DVC's queue lists it running, but its process is gone (its session ended)", True
    elif entry is not None and name in in_line:
        places = [str(place) for place, queued in enumerate(in_line, 1) if queued == name]
        text = f"queued (DVC queue, {' and '.join(places)} of {len(in_line)} in line)" + _removal(known.local, name)
    elif entry is not None and entry.status == "Failed" and header is not None:
        text, failed = "failed (DVC queue)", True
    elif entry is not None and entry.status == "Running":  # by its task: NAME may name a first attempt's log
        task = entry.rev[:7]  # the id `dvc queue` prints
        text = f"running (DVC queue task {task}; its log: dvc queue logs {task})"
    elif entry is not None:
        text = f"{entry.status.lower()} (DVC queue)"
    elif name in known.slurm:
        kind, when = known.slurm[name]
        text = f"{kind} (Slurm task {when.split()[-1]}, {when.split()[0]})"
    elif header is not None:
        text, interrupted = "interrupted", True
    elif left_out is not None:
        text = f"collected, left out of the claims: {left_out}; `run` trains it again, `collect` replaces it"
    else:
        text = "missing"
    live = known.live.get((model, seed, known.steps_scale))
    if live is not None and not (cut_off or failed):  # a stopped run's report stopped with it
        text += f"; {live}"
    elif header is not None:
        text += f"; reached {_progress(header)}"
    return _RunState(text, cut_off, cut_off or failed or interrupted)


def status_lines(repo: Path, study_dir: Path, models: Sequence[str], seeds: Sequence[int],
                 steps_scale: float, remote: str = "origin", resume_dir: Path | None = None) -> list[str]:
    """One line per (model, seed), as the module docstring says, then how to continue the runs that
    were cut off (an entry DVC's queue lists as running whose process is gone: its session ended) or
    failed with a resume file left (killed), and what to do when queued runs have no worker to take
    them."""
    local = _local_queue(repo)
    left_out = other_tokenizer_folders(study_dir) if steps_scale == 1.0 else {}
    known = _Known(study_dir, left_out, steps_scale, remote,
                   {(r.model, r.seed) for r in find_runs(repo) if r.steps_scale == steps_scale}, local,
                   _pushed(repo, remote), slurm_states(repo), _resume_files(resume_dir, steps_scale), _live(repo))
    width = max([len("model"), *map(len, models)])
    lines, dead, to_continue = [f"{'model':<{width}} {'seed':>6}  state"], [], []
    for model in models:
        for seed in seeds:
            run = _run_state(known, model, seed)
            lines.append(f"{model:<{width}} {seed:>6}  {run.text}")
            if run.cut_off:
                dead.append(experiment_name(model, seed, steps_scale))
            if run.to_continue:
                to_continue.append((model, seed))
    return lines + _continue_lines(dead, to_continue, steps_scale, resume_dir) + _unlisted(local) + _stalled(local)


def _continue_lines(dead: list[str], to_continue: list[tuple[str, int]], steps_scale: float,
                    resume_dir: Path | None) -> list[str]:
    """The commands that continue the runs cut off or left with a resume file: the dead queue
    entries killed, then the runs queued again (each resumes from its file)."""
    if not to_continue:
        return []
    lines = ["", "to continue the runs cut off (each resumes from its file, on this or another CPU):"]
    if dead:
        lines.append(f"  dvc queue kill {' '.join(dead)}")
    env = f"{RESUME_ENV}={resume_dir} " if resume_dir is not None else ""
    wanted = sorted({m for m, _ in to_continue})
    seed_list = " ".join(str(s) for s in sorted({s for _, s in to_continue}))
    return lines + [f"  {env}python -m rnnlm_study run --models {' '.join(wanted)} --seed-list {seed_list}"
                    + (f" --steps-scale {steps_scale:g}" if steps_scale != 1.0 else "")]


def _removal(local: QueueState, name: str) -> str:
    """For a queued name with more than one entry, what its entries are and how to remove one: by
    its task id. DVC resolves a name to that name's last entry, its finished entries listed after its
    queued ones, so `dvc queue remove NAME` takes a failed or successful entry of the name first and
    leaves the queued one, and of two queued entries it takes one (each checked on a real queue)."""
    entries = [task for task in local.tasks if task.name == name]
    queued = [task.rev[:7] for task in entries if task.status == "Queued"]
    ended = sorted({task.status.lower() for task in entries if task.status in ("Failed", "Success")})
    if len(queued) > 1:
        return (f"; queued {len(queued)} times (tasks {', '.join(queued)}), so it would train {len(queued)} times: "
                f"`dvc queue remove TASK` removes one")
    if ended:
        return (f"; its name also has a {' and a '.join(ended)} entry, which `dvc queue remove {name}` would remove "
                f"instead of this one: `dvc queue remove {queued[0]}` removes this one")
    return ""


def _unlisted(local: QueueState | None) -> list[str]:
    """The runs training in the queue's worker that DVC no longer lists, and how to stop each: its
    worker takes no run in line before it ends."""
    lines: list[str] = []
    if local is None:
        return lines
    for run in local.unlisted:
        lines += ["", f"{run.name} trains in DVC's queue, which no longer lists it (its entry was removed, but a "
                      "worker took its message); every run in line waits for it. To stop it (a resume file keeps "
                      f"its epochs): kill {' '.join(map(str, run.pids))}"]
    return lines


def _stalled(local: QueueState | None) -> list[str]:
    """What to do when runs wait in the queue and no worker will take them: none is alive (its session
    ended), or the one alive stopped taking runs and exits when its own run ends."""
    waiting = local.queued if local is not None else []
    if not waiting or local.taking:
        return []
    runs = f"{len(waiting)} run{'s' if len(waiting) > 1 else ''} ({', '.join(waiting)}) wait{'' if len(waiting) > 1 else 's'}"
    if local.training:
        running = ", ".join([task.name for task in local.tasks if task.alive] + [run.name for run in local.unlisted])
        return ["", f"{runs} in DVC's queue, and its worker stopped taking runs (DVC's broker: see "
                    f"rnnlm_study.campaign.dvc_queue); it exits when {running} ends, then: dvc queue start"]
    return ["", f"{runs} in DVC's queue with no worker alive: dvc queue start"]
