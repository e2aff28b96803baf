"""`python -m rnnlm.study status`: what a new session sees first of the long runs — which were cut off
when the last session ended, how far each got and where, and the commands that continue them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rnnlm.study.campaign import status as study_status
from rnnlm.training.resume import ResumeStore


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
    monkeypatch.setattr(study_status, "_local_queue", lambda repo: ({"leviathan-seed1": "running",
                                                                     "leviathan-seed2": "queued"}, 0))
    lines = study_status.status_lines(repo, repo / "reports/study", ["astra_gamma", "leviathan"], [1337, 1, 2, 3],
                                      1.0, resume_dir=resume)
    rows = {tuple(line.split()[:2]): line for line in lines[1:] if line and not line.startswith(" ")}
    assert rows[("astra_gamma", "1337")].endswith("collected")
    assert rows[("astra_gamma", "2")].endswith(f"interrupted; reached epoch 7/20, last on AMD EPYC, resume file {gamma}, "
                                               "saved just now")
    assert rows[("astra_gamma", "3")].endswith("missing")
    assert rows[("leviathan", "1")].endswith(
        "cut off: DVC's queue lists it running, but no worker is alive (its session ended); reached epoch 3/20 "
        f"+ 120 steps, last on Intel Xeon (family 6 model 207 stepping 2), resume file {levi}, saved just now")
    assert [study_status._age(s) for s in (59, 600, 5400, 36_000)] == ["just now", "10 min ago", "1.5 h ago", "10.0 h ago"]
    assert lines[0].startswith("model        ") and rows[("astra_gamma", "1337")].startswith("astra_gamma   1337")
    assert rows[("leviathan", "2")].endswith("queued (DVC queue)")
    assert lines[-3:] == ["to continue the runs cut off (each resumes from its file, on this or another CPU):",
                          "  dvc queue kill leviathan-seed1",
                          f"  RNNLM_RESUME_DIR={resume} python -m rnnlm.study run --models astra_gamma leviathan --seed-list 1 2"]


def test_a_running_entry_with_a_live_worker_is_running_and_nothing_needs_continuing(repo, tmp_path, monkeypatch):
    resume = tmp_path / "resume"
    _save(resume, "leviathan", 1, 3)
    monkeypatch.setattr(study_status, "_local_queue", lambda repo: ({"leviathan-seed1": "running"}, 1))
    lines = study_status.status_lines(repo, repo / "reports/study", ["leviathan"], [1], 1.0, resume_dir=resume)
    assert lines[1].split("  ")[-1].startswith("running (DVC queue); reached epoch 3/20")
    assert len(lines) == 2


def test_the_queues_worker_count_is_read_from_dvc(monkeypatch, tmp_path):
    table = ("Task     Name             Created    Status\n"
             "8cb310c  astra_beta-seed3 03:38 PM   Running\n"
             "a1b2c3d  astra_beta-seed4 03:39 PM   Queued\n"
             "1d074cf  astra_beta-seed3 01:12 PM   Failed\n\n"  # its earlier, killed attempt
             "Worker status: 0 active, 0 idle\n")
    monkeypatch.setattr(study_status.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=table, stderr=""))
    assert study_status._local_queue(tmp_path) == ({"astra_beta-seed3": "running", "astra_beta-seed4": "queued"}, 0)


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
    monkeypatch.setattr(study_status, "_local_queue", lambda repo: ({"astra_alpha-seed1": "running"}, 1))
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
        assert f"running (DVC queue); live: epoch 1/3, validation loss {val:.4f} (best {val:.4f})" in line, line
        assert " s an epoch, about " in line and line.endswith(" min to go")
    finally:
        checked.set()
        runner.join()
    (workspace / "reports/train/metrics.json").write_text('{"model": "astra_alpha", "epochs": 3}')  # finished
    assert "live:" not in study_status.status_lines(repo, repo / "reports/study", ["astra_alpha"], [1], 1.0)[1]
