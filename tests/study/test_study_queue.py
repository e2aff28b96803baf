"""The study's `run`: which (model, seed) runs it queues, how it waits for DVC's worker, and what it
refuses before queuing anything."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rnnlm.errors import RnnlmError
from rnnlm_study import cli as study_command
from rnnlm_study.campaign import queue as study_queue
from rnnlm_study.campaign.dvc_queue import QueueState, Task
from tests.conftest import REPO_ROOT
from tests.study.study_repo import collected_pieces, experiment, new_repo


@pytest.fixture
def repo(tmp_path) -> Path:
    return new_repo(tmp_path)


def test_a_models_seeds_are_the_pinned_one_then_1_2_3():
    assert study_queue.seeds_wanted(1337, 5) == [1337, 1, 2, 3, 4]
    assert study_queue.seeds_wanted(2, 4) == [2, 1, 3, 4]
    assert study_queue.seeds_wanted(1337, 1) == [1337]


def test_run_queues_each_model_and_seed_not_held_yet(repo):
    experiment(repo, "alpha-seed1", "alpha", 1.0, 2.45, "2025-12-30T10:00:00+00:00", seed=1)  # finished, not collected
    experiment(repo, "quick-alpha-seed2", "alpha", 0.01, 3.9, "2025-12-30T10:00:00+00:00", seed=2)  # another scale
    held = study_queue.held_runs(repo, repo / "reports/study", 1.0)
    assert held == {("alpha", 1), ("alpha", 1337)}  # seed 1337: the branch's committed run
    (repo / "reports/study/beta/seed-2").mkdir(parents=True)  # collected
    held = study_queue.held_runs(repo, repo / "reports/study", 1.0)
    todo = study_queue.plan(["alpha", "beta"], [1337, 1, 2], held, {"beta-seed1"}, 1.0)
    assert todo == [("alpha", 2), ("beta", 1337)]  # beta seed 1 is already queued
    assert study_queue.queue_command("beta", 1337, 1.0) == [
        "dvc", "exp", "run", "--queue", "-n", "beta-seed1337", "-S", "model=beta", "-S", "seed=1337", "-S",
        "train.steps_scale=1"]
    assert study_queue.experiment_name("beta", 2, 0.01) == "beta-seed2-scale0.01"


def test_a_collected_run_of_another_tokenizer_is_not_held_so_run_trains_it_again(repo):
    """The claims leave out a SentencePiece run cut into another number of validation pieces, so the
    study does not hold it: `run --seed-list 1 2` queues it (its retraining), the usual ones stay held."""
    for seed, pieces in ((1, 49939), (2, 49939), (5, 49634), (6, 49634), (7, 49634)):
        collected_pieces(repo, "scribe_gamma", seed, pieces)
    held = study_queue.held_runs(repo, repo / "reports/study", 1.0)
    assert {(m, s) for m, s in held if m == "scribe_gamma"} == {("scribe_gamma", 5), ("scribe_gamma", 6),
                                                                 ("scribe_gamma", 7)}
    assert study_queue.plan(["scribe_gamma"], [1, 2, 5], held, set(), 1.0) == [("scribe_gamma", 1),
                                                                               ("scribe_gamma", 2)]
    assert ("scribe_gamma", 1) not in study_queue.held_runs(repo, repo / "reports/study", 0.5)  # quick: never


def _state(*tasks: tuple[str, str, bool], workers: int = 0, stopped: int = 0) -> QueueState:
    return QueueState([Task(f"{i:040x}", name, status, alive) for i, (name, status, alive) in enumerate(tasks)],
                      workers, stopped)


def test_runs_are_queued_only_once_an_idle_worker_has_exited(monkeypatch):
    """DVC's worker exits on an empty queue, and a run queued meanwhile can be dropped: `run` waits
    for an idle worker to go (reading the queue each second), then queues and starts one."""
    failed = ("alpha-seed1", "Failed", False)
    replies = [_state(failed, workers=1), _state(failed, workers=1), _state(failed, workers=1), _state(failed)]
    calls = []
    monkeypatch.setattr(study_queue.dvc_queue, "read", lambda repo: calls.append("read") or replies.pop(0))
    monkeypatch.setattr(study_queue, "_dvc", lambda command: calls.append(" ".join(command[:3])) or "")
    monkeypatch.setattr(study_queue, "held_runs", lambda *args: set())
    monkeypatch.setattr(study_queue.time, "sleep", lambda seconds: None)
    started = []
    monkeypatch.setattr(study_queue.subprocess, "run", lambda command, **kw: started.append(command) or
                        subprocess.CompletedProcess(command, 0))
    assert replies[0].idle == 1 and not replies[0].pending and replies[-1].idle == 0
    assert study_queue.run(["alpha"], [1], 1.0, wait=False) == [("alpha", 1)]
    assert calls == ["read", "read", "read", "read", "dvc exp run"]
    assert started == [["dvc", "queue", "start", "--jobs", "1"]]  # the idle worker is gone: a new one


def test_a_worker_that_stopped_taking_runs_gets_no_second_beside_its_run_and_wait_restarts_the_queue(monkeypatch,
                                                                                                  capsys):
    """A DVC worker whose consumer died (a half-read broker message) finishes its run and exits,
    leaving the queue behind it: `run` starts no second worker beside that run (two trainings on the
    same cores), says so, and with --wait starts one once the old one is gone and the queue empties
    after that. While a worker and its run are alive (`busy`, from the process records), --wait does
    not ask DVC's reader, whose cost grows with the queue's history."""
    training, waiting = ("alpha-seed1", "Running", True), ("alpha-seed2", "Queued", False)
    replies = [_state(training, waiting, workers=1, stopped=1),  # what run finds
               _state(("alpha-seed1", "Success", False), waiting),  # --wait, once it exited: start a worker
               _state(("alpha-seed2", "Success", False))]
    busy = [True, True, False, True, False]  # seed 1 finishing, its worker gone; seed 2 training, done
    monkeypatch.setattr(study_queue.dvc_queue, "read", lambda repo: replies.pop(0))
    monkeypatch.setattr(study_queue.dvc_queue, "busy", lambda repo: busy.pop(0))
    monkeypatch.setattr(study_queue, "held_runs", lambda *args: set())
    monkeypatch.setattr(study_queue.time, "sleep", lambda seconds: None)
    started = []
    monkeypatch.setattr(study_queue.subprocess, "run", lambda command, **kw: started.append(command) or
                        subprocess.CompletedProcess(command, 0))
    assert study_queue.run(["alpha"], [1, 2], 1.0, wait=True) == []
    out = capsys.readouterr().out
    assert "the queue's worker stopped taking runs" in out and "exits when alpha-seed1 ends" in out
    assert started == [["dvc", "queue", "start", "--jobs", "1"]] and not replies and not busy


def test_runs_queued_behind_a_worker_that_takes_runs_start_no_second_worker(monkeypatch, capsys):
    """A worker training one run and taking the next: what is queued now waits for it in turn, and no
    second worker starts beside it (two trainings on the same cores)."""
    monkeypatch.setattr(study_queue.dvc_queue, "read", lambda repo: _state(("alpha-seed1", "Running", True), workers=1))
    queued = []
    monkeypatch.setattr(study_queue, "_dvc", lambda command: queued.append(command[5]) or "")
    monkeypatch.setattr(study_queue, "held_runs", lambda *args: set())
    started = []
    monkeypatch.setattr(study_queue.subprocess, "run", lambda command, **kw: started.append(command) or
                        subprocess.CompletedProcess(command, 0))
    assert study_queue.run(["alpha"], [1, 2], 1.0, wait=False) == [("alpha", 2)]
    assert queued == ["alpha-seed2"] and started == []
    assert "a queue worker is already running; it will take these experiments in turn" in capsys.readouterr().out


def test_jobs_start_that_many_workers_each_on_its_share_of_the_cores(monkeypatch, capsys):
    """`run --jobs 2` starts two workers whose runs compute on half the cores each (OMP_NUM_THREADS in
    their environment): two runs each with every core wait on each other's threads. A thread count
    the user set is kept; one worker changes nothing."""
    monkeypatch.setattr(study_queue.dvc_queue, "read", lambda repo: _state())
    monkeypatch.setattr(study_queue, "_dvc", lambda command: "")
    monkeypatch.setattr(study_queue, "held_runs", lambda *args: set())
    monkeypatch.setattr(study_queue.os, "cpu_count", lambda: 8)
    started = []
    monkeypatch.setattr(study_queue.subprocess, "run", lambda command, **kw: started.append(
        (command, kw["env"].get("OMP_NUM_THREADS"))) or subprocess.CompletedProcess(command, 0))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    study_queue.run(["alpha"], [1], 1.0, wait=False, jobs=2)
    study_queue.run(["alpha"], [2], 1.0, wait=False, jobs=1)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    study_queue.run(["alpha"], [3], 1.0, wait=False, jobs=2)
    assert started == [(["dvc", "queue", "start", "--jobs", "2"], "4"), (["dvc", "queue", "start", "--jobs", "1"], None),
                       (["dvc", "queue", "start", "--jobs", "2"], "3")]
    assert [study_queue.worker_threads(jobs, cores=2) for jobs in (1, 2, 3)] == [2, 1, 1]
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(study_queue.os, "cpu_count", lambda: 2)
    study_queue.run(["alpha"], [4], 1.0, wait=False, jobs=2)
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("queue started")]
    assert said == ["queue started (2 workers, each run on 4 threads).", "queue started (one worker).",
                    "queue started (2 workers, each run on 3 threads).",
                    "queue started (2 workers, each run on 1 thread)."]


def test_unknown_model_bad_scale_and_no_seeds_are_refused_before_anything_is_queued(monkeypatch):
    calls = []
    monkeypatch.setattr(study_queue, "_dvc", lambda command: calls.append(command) or "")
    with pytest.raises(RnnlmError, match="--models nosuch: not under models:"):
        study_command.main(["run", "--models", "astra_alpha", "nosuch", "--params", str(REPO_ROOT / "params.yaml")])
    for scale, shown in (("0", "0"), ("1e300", r"1e\+300")):
        with pytest.raises(RnnlmError, match=rf"--steps-scale {shown}: expected a number in \(0, 1\], as train"):
            study_command.main(["run", "--steps-scale", scale, "--params", str(REPO_ROOT / "params.yaml")])
    with pytest.raises(RnnlmError, match="--seeds 0: expected a positive number of seeds"):
        study_command.main(["run", "--seeds", "0", "--params", str(REPO_ROOT / "params.yaml")])
    with pytest.raises(RnnlmError, match="--jobs 0: expected at least one queue worker"):
        study_command.main(["run", "--jobs", "0", "--params", str(REPO_ROOT / "params.yaml")])
    with pytest.raises(RnnlmError, match=r"--seeds 100000 for 2 models asks for 200,000 runs, more than --max-runs "
                                         r"100; pass --max-runs 200000 to queue them \(an over-long queue: `dvc queue "
                                         r"remove --queued` empties it\)"):
        study_command.main(["run", "--models", "astra_alpha", "leviathan", "--seeds", "100000", "--params",
                            str(REPO_ROOT / "params.yaml")])
    with pytest.raises(RnnlmError, match=r"--seeds 1000000000000 for 1 model asks for 1,000,000,000,000 runs"):
        study_command.main(["run", "--models", "astra_alpha", "--seeds", "1000000000000", "--params",
                            str(REPO_ROOT / "params.yaml")])  # refused before any list of seeds is built
    with pytest.raises(RnnlmError, match=r"--seed-list 18446744073709551616: expected a seed from 0 to 2\*\*64 - 1"):
        study_command.main(["run", "--seed-list", "5", "18446744073709551616", "--params", str(REPO_ROOT / "params.yaml")])
    assert calls == []


def test_a_seed_list_queues_exactly_those_seeds(monkeypatch):
    """The confirmatory seeds are 5 to 9 and only those: `--seed-list` names them (each once)."""
    asked = []
    monkeypatch.setattr(study_command, "run", lambda models, seeds, *args, **kwargs: asked.append((models, seeds)))
    study_command.main(["run", "--models", "astra_alpha", "rnn_alpha", "--seed-list", "5", "6", "7", "8", "9", "9",
                        "--params", str(REPO_ROOT / "params.yaml")])
    study_command.main(["run", "--models", "astra_alpha", "--seeds", "3", "--params", str(REPO_ROOT / "params.yaml")])
    assert asked == [(["astra_alpha", "rnn_alpha"], [5, 6, 7, 8, 9]), (["astra_alpha"], [1337, 1, 2])]


def test_runs_left_queued_by_an_ended_session_get_a_worker(monkeypatch, capsys):
    """A session's end takes its worker and leaves the rest of the queue waiting: `run` with nothing
    new to queue starts a worker for them; with a worker alive, or nothing waiting, it starts none."""
    table = {"state": _state(("alpha-seed1", "Queued", False))}
    monkeypatch.setattr(study_queue.dvc_queue, "read", lambda repo: table["state"])
    monkeypatch.setattr(study_queue, "held_runs", lambda *args: set())
    started = []
    monkeypatch.setattr(study_queue.subprocess, "run", lambda command, **kw: started.append(command) or
                        subprocess.CompletedProcess(command, 0))
    assert study_queue.run(["alpha"], [1], 1.0, wait=False) == []
    assert started == [["dvc", "queue", "start", "--jobs", "1"]]
    assert "nothing to queue" in capsys.readouterr().out
    table["state"] = _state(("alpha-seed1", "Running", True), workers=1)
    study_queue.run(["alpha"], [1], 1.0, wait=False)
    table["state"] = _state(("alpha-seed1", "Success", False))
    monkeypatch.setattr(study_queue, "held_runs", lambda *args: {("alpha", 1)})
    study_queue.run(["alpha"], [1], 1.0, wait=False)
    assert len(started) == 1
