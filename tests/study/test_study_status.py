"""`python -m rnnlm_study status`: what a new session sees first of the long runs — which were cut off
when the last session ended, how far each got and where, and the commands that continue them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from rnnlm_study.campaign import dvc_queue
from rnnlm_study.campaign import status as study_status
from rnnlm_study.campaign.dvc_queue import QueueState, Task
from rnnlm.training.resume import ResumeStore
from tests.conftest import REPO_ROOT
from tests.study.study_repo import collected_pieces


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    monkeypatch.setattr(study_status, "slurm_states", lambda repo: {})
    monkeypatch.setattr(study_status, "_pushed", lambda repo, remote: set())
    return root


def _save(folder: Path, model: str, seed: int, epoch: int, step: int = 0, processor: str = "AMD EPYC",
          steps_scale: float = 1.0) -> Path:
    store = ResumeStore(folder, model, seed, f"{model} {seed} {steps_scale}", "cpu", "onednn", processor, steps_scale)
    store.save({"epoch": epoch, "partial": {"steps": step} if step else None}, epochs=20)
    return store.path


def test_a_run_cut_off_with_its_session_says_how_far_it_got_and_how_to_go_on(repo, tmp_path, monkeypatch):
    resume = tmp_path / "resume"
    levi = _save(resume, "leviathan", 1, 3, step=120, processor="Intel Xeon (family 6 model 207 stepping 2)")
    gamma = _save(resume, "astra_gamma", 2, 7)
    _save(resume, "astra_gamma", 3, 1, steps_scale=0.01)  # a quick run's file: not this status's
    (repo / "reports/study/astra_gamma/seed-1337").mkdir(parents=True)
    monkeypatch.setattr(study_status, "_local_queue", lambda repo: QueueState(
        [Task("a" * 40, "leviathan-seed1", "Running", alive=False), Task("b" * 40, "leviathan-seed2", "Queued")], 0))
    lines = study_status.status_lines(repo, repo / "reports/study", ["astra_gamma", "leviathan"], [1337, 1, 2, 3],
                                      1.0, resume_dir=resume)
    rows = {tuple(line.split()[:2]): line for line in lines[1:] if line and not line.startswith(" ")}
    assert rows[("astra_gamma", "1337")].endswith("collected")
    assert rows[("astra_gamma", "2")].endswith(f"interrupted; reached 7/20 epochs done, last on AMD EPYC, resume file {gamma}, "
                                               "saved just now")
    assert rows[("astra_gamma", "3")].endswith("missing")
    assert rows[("leviathan", "1")].endswith(
        "cut off: DVC's queue lists it running, but its process is gone (its session ended); reached 3/20 epochs "
        f"done + 120 steps, last on Intel Xeon (family 6 model 207 stepping 2), resume file {levi}, saved just now")
    assert [study_status.age_words(s) for s in (59, 600, 5400, 36_000, 172_800)] == [
        "just now", "10 min ago", "1.5 h ago", "10.0 h ago", "2.0 d ago"]
    assert lines[0].startswith("model        ") and rows[("astra_gamma", "1337")].startswith("astra_gamma   1337")
    assert rows[("leviathan", "2")].endswith("queued (DVC queue, 1 of 1 in line)")
    assert lines[-5:] == ["to continue the runs cut off (each resumes from its file, on this or another CPU):",
                          "  dvc queue kill leviathan-seed1",
                          f"  RNNLM_RESUME_DIR={resume} python -m rnnlm_study run --models astra_gamma leviathan --seed-list 1 2",
                          "", "1 run (leviathan-seed2) waits in DVC's queue with no worker alive: dvc queue start"]


def test_a_running_entry_with_a_live_worker_is_running_and_nothing_needs_continuing(repo, tmp_path, monkeypatch):
    resume = tmp_path / "resume"
    _save(resume, "leviathan", 1, 3)
    running = Task("a" * 40, "leviathan-seed1", "Running", alive=True)
    monkeypatch.setattr(study_status, "_local_queue", lambda repo: QueueState([running, Task("b" * 40, "leviathan-seed2",
                                                                                               "Queued")], 1))
    lines = study_status.status_lines(repo, repo / "reports/study", ["leviathan"], [1], 1.0, resume_dir=resume)
    assert lines[1].split("  ")[-1].startswith("running (DVC queue task aaaaaaa; its log: dvc queue logs aaaaaaa); "
                                                "reached 3/20 epochs done")
    assert len(lines) == 2
    # Its worker stopped taking runs (a half-read broker message): the queue behind waits for it to end.
    monkeypatch.setattr(study_status, "_local_queue", lambda repo: QueueState([running, Task("b" * 40, "leviathan-seed2",
                                                                                               "Queued")], 1, 1))
    lines = study_status.status_lines(repo, repo / "reports/study", ["leviathan"], [1], 1.0, resume_dir=resume)
    assert lines[1].split("  ")[-1].startswith("running (DVC queue task aaaaaaa")
    assert lines[-1] == ("1 run (leviathan-seed2) waits in DVC's queue, and its worker stopped taking runs (DVC's "
                         "broker: see rnnlm_study.campaign.dvc_queue); it exits when leviathan-seed1 ends, then: "
                         "dvc queue start")



def _workspace_report(repo: Path, tmp: str, model: str, seed: int, epochs: int, steps: int, written: float) -> None:
    """An unfinished train report in a queued experiment's workspace, `written` seconds after the epoch."""
    workspace = repo / ".dvc/tmp/exps" / tmp
    (workspace / "reports/train").mkdir(parents=True)
    (workspace / "params.yaml").write_text(json.dumps({"model": model, "seed": seed}))
    metrics = {"model": model, "finished": False, "epochs_planned": 20, "epochs": epochs, "steps": steps}
    if epochs:
        metrics |= {"val_loss": 1.5, "best_val_loss": 1.25}
        (workspace / "reports/train/epochs.tsv").write_text(
            "epoch\tseconds\n" + "".join(f"{e}\t600\n" for e in range(1, epochs + 1)))
    (workspace / "reports/train/metrics.json").write_text(json.dumps(metrics))
    os.utime(workspace / "reports/train/metrics.json", (written, written))


def test_a_resumed_run_is_read_from_its_newest_report_and_a_cut_off_one_from_its_resume_file(repo, tmp_path,
                                                                                            monkeypatch):
    """A run cut off and resumed leaves its first workspace behind, its report stopped where that
    session ended: the live line reads the newest report (whatever the workspaces' names sort as),
    and a run cut off shows how far its resume file got, not a report nothing writes any more."""
    _workspace_report(repo, "tmpzzz", "astra_gamma", 5, 0, 150, written=1_000)  # the session that ended
    _workspace_report(repo, "tmpaaa", "astra_gamma", 5, 18, 7200, written=2_000)  # the resumed run
    _workspace_report(repo, "tmpmmm", "leviathan", 1, 0, 40, written=1_000)
    _workspace_report(repo, "tmpbbb", "astra_gamma", 7, 10, 0, written=1_000)  # cut off, then resumed in
    _workspace_report(repo, "tmpccc", "astra_gamma", 7, 0, 0, written=2_000)  # tmpccc, which finished training
    (repo / ".dvc/tmp/exps/tmpccc/reports/train/metrics.json").write_text('{"model": "astra_gamma", "epochs": 20}')
    os.utime(repo / ".dvc/tmp/exps/tmpccc/reports/train/metrics.json", (2_000, 2_000))
    resume = tmp_path / "resume"
    levi = _save(resume, "leviathan", 1, 3)
    monkeypatch.setattr(study_status, "_local_queue", lambda repo: QueueState(
        [Task("a" * 40, "astra_gamma-seed5", "Running", alive=True),
         Task("b" * 40, "leviathan-seed1", "Running", alive=False),
         Task("c" * 40, "astra_gamma-seed7", "Running", alive=True)], 1))
    lines = study_status.status_lines(repo, repo / "reports/study", ["astra_gamma", "leviathan"], [5, 1, 7], 1.0,
                                      resume_dir=resume)
    rows = {tuple(line.split()[:2]): line for line in lines[1:] if line and not line.startswith(" ")}
    assert rows[("astra_gamma", "5")].endswith("logs aaaaaaa); live: 18/20 epochs done, validation loss 1.5000 "
                                               "(best 1.2500), 600 s an epoch, about 20 min to go")
    assert rows[("leviathan", "1")].endswith(f"(its session ended); reached 3/20 epochs done, last on AMD EPYC, "
                                             f"resume file {levi}, saved just now")
    # Evaluating: no live figures.
    assert rows[("astra_gamma", "7")].endswith("running (DVC queue task ccccccc; its log: dvc queue logs ccccccc)")


def test_the_live_line_times_an_epoch_by_the_median_so_a_stopped_epoch_does_not_stretch_the_time_to_go():
    metrics = {"epochs_planned": 20, "epochs": 4, "val_loss": 1.45, "best_val_loss": 1.44}
    epochs = [{"epoch": str(e), "seconds": str(s)} for e, s in ((1, 2426), (2, 793), (3, 807), (4, 855))]
    assert study_status._live_line(metrics, epochs) == ("live: 4/20 epochs done, validation loss 1.4500 (best 1.4400), "
                                                         "831 s an epoch, about 222 min to go")
    assert study_status._live_line({"epochs": 4}, epochs) is None  # a report not of our writing


def test_the_live_line_counts_the_steps_into_the_next_epoch():
    """A report rewritten at a save inside an epoch: its steps beyond the last epoch's end, and the
    part of that epoch they make taken off the time to go; before the first epoch ends, the steps alone."""
    metrics = {"epochs_planned": 6, "epochs": 1, "steps": 450, "val_loss": 1.5472, "best_val_loss": 1.5472}
    epochs = [{"step": "400", "epoch": "1", "seconds": "4200.5"}]
    assert study_status._live_line(metrics, epochs) == ("live: 1/6 epochs done + 50 steps, validation loss 1.5472 "
                                                         "(best 1.5472), 4200 s an epoch, about 341 min to go")  # 4 7/8 epochs
    epochs.append({"step": "800", "epoch": "2", "seconds": "3000"})
    metrics.update(epochs=2, steps=900)  # 100 steps of the 400 an epoch has: 3 3/4 epochs at the median 3600 s
    assert study_status._live_line(metrics, epochs).endswith("3600 s an epoch, about 225 min to go")
    assert study_status._live_line({"epochs_planned": 6, "steps": 350}, []) == "live: 0/6 epochs done + 350 steps"


def test_a_failed_run_with_a_resume_file_shows_how_far_it_got_and_how_to_go_on(repo, tmp_path, monkeypatch):
    """A run killed in the queue (`dvc queue kill`, or its stage's process) is listed Failed. Its
    workspace report stopped with it, so the line reads its resume file, not a live figure, and the
    command that continues it follows."""
    _workspace_report(repo, "tmpaaa", "astra_gamma", 7, 10, 0, written=time.time())
    resume = tmp_path / "resume"
    gamma = _save(resume, "astra_gamma", 7, 10)
    monkeypatch.setattr(study_status, "_local_queue", lambda repo: QueueState(
        [Task("a" * 40, "astra_gamma-seed7", "Failed")], 0))
    lines = study_status.status_lines(repo, repo / "reports/study", ["astra_gamma"], [7], 1.0, resume_dir=resume)
    assert lines[1:] == [f"astra_gamma      7  failed (DVC queue); reached 10/20 epochs done, last on AMD EPYC, resume file "
                         f"{gamma}, saved just now", "",
                         "to continue the runs cut off (each resumes from its file, on this or another CPU):",
                         f"  RNNLM_RESUME_DIR={resume} python -m rnnlm_study run --models astra_gamma --seed-list 7"]

def test_queued_runs_show_their_place_in_line_in_the_queues_order_not_by_name(repo, monkeypatch):
    """`status` gives each queued run its place among those waiting, in the order DVC lists them (a
    worker's order), which need not be the seeds' order."""
    monkeypatch.setattr(study_status, "_local_queue", lambda repo: QueueState(
        [Task("a" * 40, "astra_gamma-seed6", "Running", alive=True), Task("b" * 40, "astra_gamma-seed9", "Queued"),
         Task("c" * 40, "astra_gamma-seed3", "Queued"), Task("d" * 40, "astra_gamma-seed4", "Queued")], 1))
    lines = study_status.status_lines(repo, repo / "reports/study", ["astra_gamma"], [3, 4, 6, 9], 1.0)
    assert [line.split("  ")[-1] for line in lines[1:]] == [
        "queued (DVC queue, 2 of 3 in line)", "queued (DVC queue, 3 of 3 in line)",
        "running (DVC queue task aaaaaaa; its log: dvc queue logs aaaaaaa)",
        "queued (DVC queue, 1 of 3 in line)"]


def test_a_collected_run_of_another_tokenizer_reads_left_out_until_its_retraining_shows(repo, tmp_path,
                                                                                          monkeypatch):
    """A SentencePiece run whose folder another tokenizer cut into another number of validation pieces
    is not "collected" (the claims leave it out): its line says so and how to retrain it, and once it
    trains again its line is that run's."""
    for seed, pieces in ((1, 49939), (5, 49634), (6, 49634)):
        collected_pieces(repo, "scribe_gamma", seed, pieces)
    monkeypatch.setattr(study_status, "_local_queue", lambda repo: QueueState([], 0))
    lines = study_status.status_lines(repo, repo / "reports/study", ["scribe_gamma"], [1, 5], 1.0)
    assert [line.split("  ")[-1] for line in lines[1:]] == [
        "collected, left out of the claims: another tokenizer (49,939 validation pieces against 49,634); "
        "`run` trains it again, `collect` replaces it", "collected"]
    resume = tmp_path / "resume"
    saved = _save(resume, "scribe_gamma", 1, 4)
    monkeypatch.setattr(study_status, "_local_queue", lambda repo: QueueState(
        [Task("a" * 40, "scribe_gamma-seed1", "Running", alive=False)], 0))
    lines = study_status.status_lines(repo, repo / "reports/study", ["scribe_gamma"], [1], 1.0, resume_dir=resume)
    assert lines[1].endswith("cut off: DVC's queue lists it running, but its process is gone (its session ended); "
                             f"reached 4/20 epochs done, last on AMD EPYC, resume file {saved}, saved just now")
    assert lines[-1].endswith("python -m rnnlm_study run --models scribe_gamma --seed-list 1")


def _one_stage_dvc_repo(repo: Path, command: str) -> None:
    """Make the git repository `repo` a committed DVC repository of one stage running `command`,
    which reads the param `seed` (1 in params.yaml), so that experiments can be queued in it."""
    subprocess.run(["dvc", "init", "-q"], cwd=repo, check=True)
    (repo / "params.yaml").write_text("seed: 1\n")
    (repo / "dvc.yaml").write_text(f"stages:\n  s:\n    cmd: {command}\n    params: [seed]\n    outs: [out.txt]\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"], cwd=repo, check=True)

def test_a_name_queued_twice_shows_both_places_and_that_it_would_train_twice(repo, tmp_path):
    """DVC queues a name a second time without a word, and `dvc queue remove NAME` then removes one of
    the two entries (both checked here on a real DVC queue): `status` lists every entry's place, so
    a seed that would train twice says so."""
    _one_stage_dvc_repo(repo, "echo ${seed} > out.txt")
    for seed in (4, 3, 4):
        subprocess.run(["dvc", "exp", "run", "--queue", "-q", "-n", "astra_gamma-seed4" if seed == 4 else
                        "astra_gamma-seed3", "-S", f"seed={seed}"], cwd=repo, check=True)
    lines = study_status.status_lines(repo, repo / "reports/study", ["astra_gamma"], [3, 4], 1.0)
    three, four = (line.split("  ")[-1] for line in lines[1:3])
    # the places follow the broker's order, which a digit boundary of its message names can change
    once = re.fullmatch(r"queued \(DVC queue, (\d) of 3 in line\)", three)
    tasks = [task.rev[:7] for task in dvc_queue.read(repo).tasks if task.name == "astra_gamma-seed4"]
    twice = re.fullmatch(r"queued \(DVC queue, (\d) and (\d) of 3 in line\); queued 2 times \(tasks (\w+), (\w+)\), so "
                         r"it would train 2 times: `dvc queue remove TASK` removes one", four)
    assert once and twice and {*once.groups(), *twice.groups()[:2]} == {"1", "2", "3"}
    assert sorted(twice.groups()[2:]) == sorted(tasks)
    subprocess.run(["dvc", "queue", "remove", "-q", "astra_gamma-seed4"], cwd=repo, check=True)
    assert dvc_queue.read(repo).in_line().count("astra_gamma-seed4") == 1


@pytest.mark.slow
def test_a_name_with_a_failed_entry_and_a_queued_one_is_removed_by_task_id(repo):
    """A seed that failed (killed, cut off) and was queued again has two entries of one name, and DVC
    resolves a name to its last entry, finished ones after queued: `dvc queue remove NAME` takes the
    failed entry and leaves the queued one (checked here on a real queue, whose worker runs a stage
    that fails). `status` says so and gives the queued entry's task id, which removes it."""
    _one_stage_dvc_repo(repo, "test ${seed} != 4 && echo ${seed} > out.txt")  # seed 4 fails
    name = "astra_gamma-seed4"
    queue = ["dvc", "exp", "run", "--queue", "-q", "-n", name, "-S", "seed=4"]
    subprocess.run(queue, cwd=repo, check=True)
    subprocess.run(["dvc", "queue", "start", "-q"], cwd=repo, check=True)
    deadline = time.monotonic() + 120
    while [task.status for task in dvc_queue.read(repo).tasks] != ["Failed"] and time.monotonic() < deadline:
        time.sleep(0.5)
    worker = dvc_queue._process(repo / ".dvc/tmp/exps/celery/dvc-exp-worker-1.json", "queue-worker")
    if worker is not None:  # idle now, it would take the next entry: stopped rather than waited for
        worker.kill()
        worker.wait(30)
    subprocess.run(queue, cwd=repo, check=True)
    state = dvc_queue.read(repo)
    assert sorted(task.status for task in state.tasks) == ["Failed", "Queued"]
    queued = next(task.rev[:7] for task in state.tasks if task.status == "Queued")
    line = study_status.status_lines(repo, repo / "reports/study", ["astra_gamma"], [4], 1.0)[1]
    assert line.endswith(f"queued (DVC queue, 1 of 1 in line); its name also has a failed entry, which `dvc queue "
                         f"remove {name}` would remove instead of this one: `dvc queue remove {queued}` removes this one")
    subprocess.run(["dvc", "queue", "remove", "-q", name], cwd=repo, check=True)
    assert [task.status for task in dvc_queue.read(repo).tasks] == ["Queued"]  # the failed entry went
    subprocess.run(["dvc", "queue", "remove", "-q", queued], cwd=repo, check=True)
    assert dvc_queue.read(repo).tasks == []


def test_the_queue_is_read_from_its_files_and_its_processes_records(monkeypatch, tmp_path):
    """Which runs and workers are alive comes from dvc-task's records (a pid each), checked against
    the processes running now: a live process whose command line names the run; not a dead one, not
    one that ended (a return code), not a live pid that is another program's (reused after a
    reboot). A worker whose log shows celery's "Unrecoverable error" or "Got shutdown from remote"
    after its last "ready." has stopped taking runs. Nothing is asked of the worker (`dvc queue status` does, and can stop it)."""
    exps = tmp_path / ".dvc/tmp/exps"
    live, gone, ended, reused = ("1" * 40, "2" * 40, "3" * 40, "4" * 40)
    training = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"--infofile={live}.run"])
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "queue-worker"])
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    _started(training, live)
    _started(worker, "queue-worker")

    def record(path: Path, pid: int, returncode=None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"pid": pid, "stdin": None, "stdout": None, "stderr": None,
                                    "returncode": returncode}))

    try:
        for rev, pid, code in [(live, training.pid, None), (gone, finished.pid, None), (ended, training.pid, 0),
                               (reused, os.getpid(), None)]:
            record(exps / "run" / rev / f"{rev}.json", pid, code)
        record(exps / "celery/dvc-exp-worker-1.json", worker.pid)
        record(exps / "celery/dvc-exp-worker-2.json", finished.pid)  # its session ended
        log = exps / "celery/dvc-exp-worker-1.out"
        log.write_text("[...] dvc-exp-abc-1@localhost ready.\n[...] Task run_exp received\n")
        entries = [{"rev": rev, "name": f"run-{i}", "status": "Running"} for i, rev in
                   enumerate([live, gone, ended, reused])] + [{"rev": "5" * 40, "name": None, "status": "Queued"}]
        monkeypatch.setattr(dvc_queue, "_entries", lambda repo: entries)
        state = dvc_queue.read(tmp_path)
        assert [(task.name, task.alive) for task in state.tasks] == [
            ("run-0", True), ("run-1", False), ("run-2", False), ("run-3", False), ("5555555", False)]
        assert (state.workers, state.stopped, state.training, state.idle, state.taking) == (1, 0, 1, 0, 1)
        assert dvc_queue.busy(tmp_path)  # a live worker and a live run, without DVC's reader
        record(exps / "run" / live / f"{live}.json", training.pid, 0)
        assert not dvc_queue.busy(tmp_path)  # the worker alone
        record(exps / "run" / live / f"{live}.json", training.pid)
        log.write_text(log.read_text() + "[...: CRITICAL/MainProcess] Unrecoverable error: JSONDecodeError('Expecting')\n")
        assert dvc_queue.read(tmp_path).taking == 0
        log.write_text(log.read_text() + "[...] dvc-exp-abc-1@localhost ready.\n")  # started again
        assert dvc_queue.read(tmp_path).taking == 1
        log.write_text(log.read_text() + "[...: INFO/MainProcess] monitor: shutting down due to empty queue.\n"
                       "[...: WARNING/MainProcess] Got shutdown from remote\n")  # DVC's monitor, its run going on
        assert dvc_queue.read(tmp_path).taking == 0
    finally:
        training.kill()
        worker.kill()


def _started(process: subprocess.Popen, marker: str) -> None:
    """Wait until `process` shows `marker` in its command line: a moment after Popen the child has not
    exec'd yet and still shows ours, which the queue reader would take for another program."""
    for _ in range(500):
        if any(marker in word for word in psutil.Process(process.pid).cmdline()):
            return
        time.sleep(0.01)
    raise AssertionError(f"{marker}: the process never showed it")


def test_a_run_training_that_the_queue_no_longer_lists_is_named_with_the_processes_to_stop(repo, monkeypatch):
    """An entry removed from DVC's queue whose message a worker still took trains unlisted, ahead of
    every run in line: `read` finds it from its live process record and names it from its run file,
    with its process and the one it started; `status` says which pids stop it. A listed running
    entry, or a dead record, is not unlisted."""
    exps = repo / ".dvc/tmp/exps"
    stray, listed, dead = "7" * 40, "8" * 40, "9" * 40
    child = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    run = subprocess.Popen([sys.executable, "-c", child, f"--infofile={stray}.run"])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"--infofile={listed}.run"])
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "queue-worker"])
    try:
        for process, marker in [(run, stray), (other, listed), (worker, "queue-worker")]:
            _started(process, marker)
        for _ in range(500):  # the stray's own child, started after its exec
            if psutil.Process(run.pid).children():
                break
            time.sleep(0.01)
        grandchild = psutil.Process(run.pid).children()[0].pid
        for rev, pid in [(stray, run.pid), (listed, other.pid), (dead, 2 ** 22 + 1)]:
            (exps / "run" / rev).mkdir(parents=True)
            (exps / "run" / rev / f"{rev}.json").write_text(json.dumps({"pid": pid, "returncode": None}))
            (exps / "run" / rev / f"{rev}.run").write_text(json.dumps({"name": f"name-{rev[0]}"}))
        (exps / "celery").mkdir(parents=True)
        (exps / "celery/dvc-exp-worker-1.json").write_text(json.dumps({"pid": worker.pid, "returncode": None}))
        entries = [{"rev": listed, "name": "astra_gamma-seed6", "status": "Running"},
                   {"rev": "a" * 40, "name": "astra_gamma-seed7", "status": "Queued"}]
        monkeypatch.setattr(dvc_queue, "_entries", lambda repo: entries)
        state = dvc_queue.read(repo)
        assert state.unlisted == (dvc_queue.Unlisted("name-7", (run.pid, grandchild)),)
        assert (state.training, state.idle) == (2, 0)
        lines = study_status.status_lines(repo, repo / "reports/study", ["astra_gamma"], [6, 7], 1.0)
        assert lines[-1].startswith("name-7 trains in DVC's queue, which no longer lists it")
        assert lines[-1].endswith(f"kill {run.pid} {grandchild}")
        entries[0]["status"] = "Success"  # listed no more: the live run 8 is unlisted too
        assert [r.name for r in dvc_queue.read(repo).unlisted] == ["name-7", "name-8"]
    finally:
        for process in psutil.Process(run.pid).children(recursive=True):
            process.kill()
        for process in (run, other, worker):
            process.kill()


def test_a_run_marked_running_before_its_process_record_is_written_is_starting_not_cut_off(monkeypatch, tmp_path):
    """A worker marks its next run Running a moment before the run's process writes its record: with
    a live worker that run is starting; with none, it was cut off."""
    exps = tmp_path / ".dvc/tmp/exps"
    starting = "6" * 40
    monkeypatch.setattr(dvc_queue, "_entries", lambda repo: [{"rev": starting, "name": "next", "status": "Running"}])
    assert [t.alive for t in dvc_queue.read(tmp_path).tasks] == [False]  # no worker: cut off
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "queue-worker"])
    try:
        _started(worker, "queue-worker")
        (exps / "celery").mkdir(parents=True)
        (exps / "celery/dvc-exp-worker-1.json").write_text(json.dumps({"pid": worker.pid, "returncode": None}))
        assert [t.alive for t in dvc_queue.read(tmp_path).tasks] == [True]
        (exps / "run" / starting).mkdir(parents=True)
        (exps / "run" / starting / f"{starting}.json").write_text(json.dumps({"pid": 1, "returncode": 0}))
        assert [t.alive for t in dvc_queue.read(tmp_path).tasks] == [False]  # it ran and ended
    finally:
        worker.kill()


def test_the_queue_of_a_real_dvc_repository_is_read_by_dvc(tmp_path):
    """`_entries` is DVC's own reader: a queued experiment is listed by name, Queued, its process none."""
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["dvc", "init", "-q"], cwd=root, check=True)
    (root / "params.yaml").write_text("x: 1\n")
    (root / "dvc.yaml").write_text("stages:\n  s:\n    cmd: echo ${x} > out.txt\n    params: [x]\n    outs: [out.txt]\n")
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"], cwd=root, check=True)
    subprocess.run(["dvc", "exp", "run", "--queue", "-q", "-n", "e1", "-S", "x=2"], cwd=root, check=True)
    state = dvc_queue.read(root)
    assert [(task.name, task.status, task.alive) for task in state.tasks] == [("e1", "Queued", False)]
    assert state.workers == 0 and state.pending == {"e1"}
    assert study_status._local_queue(tmp_path) is None  # no DVC repository there

    # The order a worker takes queued runs in: the broker's message files by name, as text. Their names
    # begin with the milliseconds since boot, so e2, queued 9 s later at 10^7 ms, goes first.
    subprocess.run(["dvc", "exp", "run", "--queue", "-q", "-n", "e2", "-S", "x=3"], cwd=root, check=True)
    first, second = sorted((root / ".dvc/tmp/exps/celery/broker/in").glob("*.celery.msg"))  # e1's, then e2's
    first.rename(first.with_name("9991000_" + first.name.split("_", 1)[1]))
    second.rename(second.with_name("10000000_" + second.name.split("_", 1)[1]))
    assert dvc_queue.read(root).in_line() == ["e2", "e1"]


def test_a_run_training_in_the_queue_shows_its_live_figures(repo, raw_params, monkeypatch):
    """A tiny run trains in a queued experiment's workspace (.dvc/tmp/exps/<tmp>/) and is held after
    its first epoch, its live report written: `status` prints the epoch it reached of its total, its
    validation loss, the time an epoch takes and what is left; once it finishes, the line goes."""
    import threading

    import yaml

    from rnnlm.reporting.training_report import write_training_report
    from tests.test_train import _train, tiny_params

    workspace = repo / ".dvc/tmp/exps/tmpabc"
    workspace.mkdir(parents=True)
    params = tiny_params(raw_params)
    raw_params["seed"] = 1
    (workspace / "params.yaml").write_text(yaml.safe_dump({**raw_params, "model": "astra_alpha"}))
    monkeypatch.setattr(study_status, "_local_queue",
                        lambda repo: QueueState([Task("a" * 40, "astra_alpha-seed1", "Running", alive=True)], 1))
    checked, written = threading.Event(), threading.Event()

    def live(progress):
        write_training_report(workspace / "reports/train", "astra_alpha", progress)
        if len(progress.history.epochs) == 1:
            written.set()
            checked.wait(60)

    runner = threading.Thread(target=lambda: _train(params, on_progress=live))
    runner.start()
    try:
        assert written.wait(120)
        line = study_status.status_lines(repo, repo / "reports/study", ["astra_alpha"], [1], 1.0)[1]
        val = yaml.safe_load((workspace / "reports/train/metrics.json").read_text())["val_loss"]
        assert f"logs aaaaaaa); live: 1/3 epochs done, validation loss {val:.4f} (best {val:.4f})" in line, line
        assert " s an epoch, about " in line and line.endswith(" min to go")
    finally:
        checked.set()
        runner.join()
    (workspace / "reports/train/metrics.json").write_text('{"model": "astra_alpha", "epochs": 3}')  # finished
    assert "live:" not in study_status.status_lines(repo, repo / "reports/study", ["astra_alpha"], [1], 1.0)[1]


def test_a_queue_message_caught_while_it_is_written_is_read_again(tmp_path, monkeypatch):
    """DVC's reader fails on a message file caught half-written; the next read, a moment later, is taken."""
    replies = iter([ValueError("Unterminated string"), ValueError("Unterminated string"),
                    [{"rev": "a" * 40, "name": "astra_gamma-seed4", "status": "Queued"}]])

    def status(repo):
        reply = next(replies)
        if isinstance(reply, Exception):
            raise reply
        return reply

    monkeypatch.setattr(dvc_queue, "_status", status)
    monkeypatch.setattr(dvc_queue, "READ_PAUSE_S", 0.0)
    assert dvc_queue.READ_TRIES == 3
    assert dvc_queue._entries(tmp_path) == [{"rev": "a" * 40, "name": "astra_gamma-seed4", "status": "Queued"}]


@pytest.mark.parametrize("message", [b'{"body": "cut sho', b"\x00\xff\xfe binary"], ids=["half-written", "binary"])
def test_a_queue_message_that_does_not_parse_is_named_in_one_line(tmp_path, monkeypatch, message, in_process):
    """A message file DVC's own reader chokes on (kombu reads them as JSON) is read again, then named;
    `dvc queue status` prints one line too, where we used to end in a JSONDecodeError traceback."""
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=root, check=True)
    (root / "params.yaml").write_text((Path(__file__).resolve().parents[2] / "params.yaml").read_text())
    inbox = root / ".dvc/tmp/exps/celery/broker/in"
    inbox.mkdir(parents=True)
    (inbox / "1_a.msg").write_bytes(message)
    monkeypatch.setattr(dvc_queue, "READ_PAUSE_S", 0.0)
    with pytest.raises(dvc_queue.QueueReadError, match=r"broker/in/1_a\.msg: a message of DVC's queue does not "
                                                      r"parse \(.+\); expected JSON written by DVC's queue"):
        dvc_queue.read(root)
    if b"binary" not in message:
        return  # the command's one line, once
    done = in_process(["-m", "rnnlm_study", "status"], root)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: .dvc/tmp/exps/celery/broker/in/1_a.msg: ")


def test_status_and_the_resume_listing_start_without_pytorch_or_the_judging(repo, tmp_path):
    """`status` and `resume-files` are what a session runs first: they import neither PyTorch (the
    resume headers and the validation blocks are read without it) nor pandas, SciPy and matplotlib
    (only `report` judges), so they answer in a fraction of the seconds those take to import."""
    script = ("import sys\n"
              "from rnnlm_study import cli\n"
              f"cli.main(['resume-files', '--dir', {str(tmp_path / 'resume')!r}])\n"
              "cli.main(['status', '--models', 'astra_alpha', '--seed-list', '1', '--params', "
              f"{str(REPO_ROOT / 'params.yaml')!r}])\n"
              "print(sorted({'torch', 'pandas', 'scipy', 'matplotlib'} & set(sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=repo, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"no resume files in {tmp_path / 'resume'}"
    assert done.stdout.splitlines()[-1] == "[]"
