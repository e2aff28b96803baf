"""The study across models and seeds: `collect` from runs kept in git, `report` from the folders
alone, and what `run` queues."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from rnnlm.study import cli as study_command
from rnnlm.errors import RnnlmError
from rnnlm.study import collect as study_collect, queue as study_queue, report as study_report
from tests.conftest import REPO_ROOT

MODELS = ["alpha", "beta", "gamma"]


def _git(repo: Path, *args: str, env: dict | None = None) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=env).stdout


def _metrics(model: str, stateful: float) -> dict:
    return {"model": model, "tokens": "char", "stateful_bpc": stateful, "stateless_bpc": 3.75, "bigram_bpc": 3.59,
            "context_horizon": 8, "context_carried_bpc": 2.4, "context_curve_bpc": {"1": 3.6, "8": 2.41},
            "reset_curve_bpc": {"1": 3.75, "4": 3.0, "never": stateful},
            "text": {"stateless": {"known_word_share": 0.4, "repeated_4gram_share": 0.2},
                     "stateful": {"known_word_share": 0.8, "repeated_4gram_share": 0.1}}}


def _write_run(repo: Path, model: str, scale: float, stateful: float, seed: int = 1337) -> None:
    """The workspace as a finished `dvc repro` of `model` leaves it (the files collect reads)."""
    (repo / "reports/train").mkdir(parents=True, exist_ok=True)
    (repo / "reports/plots").mkdir(parents=True, exist_ok=True)
    entry = {"tokens": "char", "cell": "gru", "embd": 8, "hidden": 16, "layers": 1, "epochs": 2}
    (repo / "params.yaml").write_text(yaml.safe_dump({"model": model, "seed": seed, "train": {"steps_scale": scale},
                                                      "models": {model: entry}}))
    train = {"model": model, "device": "cpu", "processor": "Test CPU", "gemm": "onednn", "parameters": 1000,
             "epochs": 2, "steps": 20, "val_loss": 1.7, "best_val_loss": 1.69, "seconds": 12.5}
    (repo / "reports/train/metrics.json").write_text(json.dumps(train))
    epochs = "step\tepoch\ttrain_loss\tval_loss\tval_batch_loss\n10\t1\t2.0\t1.69\t1.72\n20\t2\t1.8\t1.7\t1.69\n"
    (repo / "reports/train/epochs.tsv").write_text(epochs)
    (repo / "reports/train/steps.tsv").write_text("step\ttrain_loss\n1\t2.0\n")
    (repo / "reports/metrics.json").write_text(json.dumps(_metrics(model, stateful)))
    for name in ("reset_curve.csv", "context_curve.csv"):
        (repo / "reports/plots" / name).write_text("k,bpc\n1,3.7\n")
    (repo / "reports/generations.json").write_text("{}")
    (repo / "reports/generations.md").write_text(f"# Generations: {model} {stateful}\n")
    (repo / "reports/timing").mkdir(exist_ok=True)
    for stage in ("train", "generate", "evaluate"):
        (repo / f"reports/timing/{stage}.json").write_text(json.dumps({"stage": stage, "wall_s": 1.0, "cpu_s": 1.5}))


def _commit(repo: Path, message: str, date: str) -> str:
    env = {"GIT_COMMITTER_DATE": date, "GIT_AUTHOR_DATE": date, "HOME": str(repo), "PATH": "/usr/bin:/bin"}
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", message, env=env)
    return _git(repo, "rev-parse", "HEAD").strip()


def _experiment(repo: Path, name: str, model: str, scale: float, stateful: float, date: str, seed: int = 1337) -> str:
    """A commit on top of HEAD kept only under refs/exps/, as `dvc exp run` (or `dvc exp pull`) leaves one."""
    baseline = _git(repo, "rev-parse", "HEAD").strip()
    _write_run(repo, model, scale, stateful, seed)
    rev = _commit(repo, name, date)
    _git(repo, "update-ref", f"refs/exps/{baseline[:2]}/{baseline[2:]}/{name}", rev)
    _git(repo, "reset", "-q", "--hard", baseline)
    return rev


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    _write_run(root, "alpha", 1.0, 2.50)
    _commit(root, "alpha, committed", "2026-01-01T10:00:00+00:00")
    return root


def test_collect_keeps_every_seed_and_each_ones_newest_run_and_quick_runs_apart(repo):
    _experiment(repo, "new-alpha", "alpha", 1.0, 2.40, "2026-01-02T10:00:00+00:00")
    _experiment(repo, "old-alpha", "alpha", 1.0, 2.60, "2025-12-31T10:00:00+00:00")
    _experiment(repo, "alpha-seed1", "alpha", 1.0, 2.45, "2025-12-30T10:00:00+00:00", seed=1)  # older, but its own seed
    _experiment(repo, "quick-alpha", "alpha", 0.01, 3.90, "2026-01-03T10:00:00+00:00")
    beta = _experiment(repo, "beta-run", "beta", 1.0, 2.20, "2026-01-02T11:00:00+00:00")
    out = repo / "reports/study"
    said = study_collect.collect(repo, out)
    assert sorted(p.name for p in out.iterdir()) == ["alpha", "beta", "quick"]
    assert sorted(p.name for p in (out / "alpha").iterdir()) == ["seed-1", "seed-1337"]
    alpha = json.loads((out / "alpha/seed-1337/provenance.json").read_text())
    assert alpha["experiment"] == "new-alpha" and alpha["steps_scale"] == 1.0  # not the quick one, though newer
    assert json.loads((out / "alpha/seed-1337/metrics.json").read_text())["stateful_bpc"] == 2.40
    assert json.loads((out / "alpha/seed-1/metrics.json").read_text())["stateful_bpc"] == 2.45
    assert json.loads((out / "quick/alpha/metrics.json").read_text())["stateful_bpc"] == 3.90
    provenance = json.loads((out / "beta/seed-1337/provenance.json").read_text())
    assert provenance | {"commit": None} == {
        "model": "beta", "seed": 1337, "steps_scale": 1.0, "experiment": "beta-run", "rev": beta, "commit": None,
        "date": "2026-01-02T11:00:00+00:00", "device": "cpu", "processor": "Test CPU", "gemm": "onednn",
        "train_seconds": 12.5, "made_by": "python -m rnnlm.study collect",
        "files": sorted(study_collect.FOLDER)}
    assert provenance["commit"] == _git(repo, "rev-parse", "HEAD").strip()  # the commit it was run from
    assert {p.name for p in (out / "beta/seed-1337").iterdir()} == {*study_collect.FOLDER, "provenance.json"}
    assert any("quick" in line for line in said)
    assert not list(out.rglob(".*"))  # no temporary folder left behind
    again = study_collect.collect(repo, out)
    assert all("up to date" in line for line in again), again


def test_collect_never_replaces_a_newer_run_with_an_older_one(repo):
    out = repo / "reports/study"
    (out / "alpha/seed-1337").mkdir(parents=True)
    (out / "alpha/seed-1337/provenance.json").write_text(json.dumps({"date": "2026-06-01T00:00:00+00:00"}))
    said = study_collect.collect(repo, out)
    assert "kept the newer run" in said[0]
    assert sorted(p.name for p in (out / "alpha/seed-1337").iterdir()) == ["provenance.json"]


def _lock_for(repo: Path, trained: str = "aa", read_by_evaluate: str = "aa", metrics: bytes | None = None) -> None:
    """A dvc.lock for the run in the workspace: the checkpoint the train stage wrote and the one
    generate and evaluate read, and the md5 of reports/metrics.json (that file's own by default)."""
    import hashlib

    metrics_md5 = hashlib.md5(metrics if metrics is not None else (repo / "reports/metrics.json").read_bytes()).hexdigest()
    stages = {"train": {"outs": [{"path": "models/model.pt", "md5": trained}]},
              "generate": {"deps": [{"path": "models/model.pt", "md5": read_by_evaluate}]},
              "evaluate": {"deps": [{"path": "models/model.pt", "md5": read_by_evaluate}],
                           "outs": [{"path": "reports/metrics.json", "md5": metrics_md5}]}}
    (repo / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": stages}))


@pytest.mark.parametrize("lock, reason", [
    ({"trained": "bb"}, "its generate stage read another checkpoint than its train stage wrote"),
    ({"metrics": b"another run's metrics"}, "its reports/metrics.json is not the one its dvc.lock records"),
], ids=["train alone", "reports of another run"])
def test_an_experiment_whose_stages_disagree_is_not_collected(repo, lock, reason):
    """`dvc exp run ... train` ran the train stage alone: its commit holds its own training metrics
    beside its parent's evaluation and samples. Such a run is named and left out."""
    baseline = _git(repo, "rev-parse", "HEAD").strip()
    _write_run(repo, "beta", 1.0, 2.2)
    _lock_for(repo, **lock)
    rev = _commit(repo, "beta, train stage alone", "2026-01-02T11:00:00+00:00")
    _git(repo, "update-ref", f"refs/exps/{baseline[:2]}/{baseline[2:]}/beta-train-only", rev)
    _git(repo, "reset", "-q", "--hard", baseline)
    said = study_collect.collect(repo, repo / "reports/study")
    assert f"experiment beta-train-only: not collected: {reason}; expected a run of every stage (dvc exp run " \
           "without a stage name)" in said
    assert not (repo / "reports/study/beta").exists()


def test_an_experiment_whose_stages_agree_is_collected(repo):
    baseline = _git(repo, "rev-parse", "HEAD").strip()
    _write_run(repo, "beta", 1.0, 2.2)
    _lock_for(repo)
    rev = _commit(repo, "beta, every stage", "2026-01-02T11:00:00+00:00")
    _git(repo, "update-ref", f"refs/exps/{baseline[:2]}/{baseline[2:]}/beta-whole", rev)
    _git(repo, "reset", "-q", "--hard", baseline)
    assert any("beta seed 1337: wrote" in line for line in study_collect.collect(repo, repo / "reports/study"))


def test_a_folder_missing_some_files_is_written_again_not_called_up_to_date(repo):
    out = repo / "reports/study"
    study_collect.collect(repo, out)
    (out / "alpha/seed-1337/metrics.json").unlink()  # as two collects at once once left it
    said = study_collect.collect(repo, out)
    assert said == [f"alpha seed 1337: rewrote {out / 'alpha/seed-1337'}, which lacked some of its files, "
                    "from commit " + said[0].rsplit("commit ", 1)[1]]
    assert (out / "alpha/seed-1337/metrics.json").is_file()
    assert "up to date" in study_collect.collect(repo, out)[0]


def test_a_second_collect_waits_for_the_first(repo):
    """Two collects at once rewrote the same folders and left one half-written: the second now waits
    on the repository's lock until the first is done, and finds everything up to date."""
    import fcntl
    import threading

    out = repo / "reports/study"
    with open(repo / ".git/rnnlm-collect.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a first collect, in the middle of its work
        said: list[list[str]] = []
        second = threading.Thread(target=lambda: said.append(study_collect.collect(repo, out)))
        second.start()
        second.join(timeout=2)
        assert second.is_alive() and not out.exists()  # waiting, nothing written
        fcntl.flock(held, fcntl.LOCK_UN)
    second.join(timeout=30)
    assert not second.is_alive() and "wrote" in said[0][0]


def test_collect_refuses_an_out_that_is_a_file(repo):
    (repo / "study.txt").write_text("")
    with pytest.raises(study_collect.CollectError, match="--out .*study.txt: not a folder"):
        study_collect.collect(repo, repo / "study.txt")


def test_collect_reads_committed_runs_and_refuses_a_folder_that_is_no_repository(repo, tmp_path):
    out = tmp_path / "study"
    study_collect.collect(repo, out)
    assert json.loads((out / "alpha/seed-1337/provenance.json").read_text())["experiment"] is None  # the branch's commit
    with pytest.raises(RnnlmError, match="not a git repository"):
        study_collect.collect(tmp_path / "nowhere", out)


def _folders(repo: Path) -> Path:
    _experiment(repo, "beta-run", "beta", 1.0, 2.20, "2026-01-02T11:00:00+00:00")
    _experiment(repo, "beta-seed1", "beta", 1.0, 2.26, "2026-01-02T12:00:00+00:00", seed=1)
    _experiment(repo, "quick-gamma", "gamma", 0.01, 3.90, "2026-01-03T10:00:00+00:00")
    study_collect.collect(repo, repo / "reports/study")
    params = repo.parent / "params-all.yaml"
    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    raw["models"] = {m: raw["models"]["astra_alpha"] for m in MODELS}
    raw["model"] = "alpha"
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    return params


OUTPUTS = ("study.md", "study.png", "study/runs.csv", "study/summary.csv", "study/summary.json", "study/findings.json")


def test_report_reads_the_folders_alone(repo):
    params = _folders(repo)
    reports = repo / "reports"
    runs = study_report.report(reports / "study", reports / "study.md", reports / "study.png", str(params))
    assert sorted((r.model, r.seed, r.quick) for r in runs) == [
        ("alpha", 1337, False), ("beta", 1, False), ("beta", 1337, False), ("gamma", 1337, True)]
    text = (reports / "study.md").read_text()
    full_scale = text.split("## Findings")[0].splitlines()  # the per-model table
    rows = {line.split(" | ")[0]: line for line in full_scale if line.startswith("| [") or line.startswith("| gamma")}
    assert "**2.500**" in rows["| [alpha](study/alpha/seed-1337/generations.md)"] and "cpu: Test CPU" in text
    beta = rows["| [beta](study/beta/seed-1337/generations.md)"]  # two seeds: mean ± half-width, n = 2
    assert "| 2 |" in beta and f"**2.230 ± {12.706 * 0.03:.3f}**" in beta
    assert "gamma | —" in text  # no full-scale run: listed with dashes, not zeros
    assert "## Quick runs" in text and "[gamma](study/quick/gamma/generations.md)" in text
    assert "## Findings" in text and "### 6." in text and "## Every run" in text
    assert (reports / "study.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = pd.read_csv(reports / "study/runs.csv")
    assert list(zip(table["model"], table["seed"])) == [("alpha", 1337), ("beta", 1337), ("beta", 1)]  # pinned first
    summary = pd.read_csv(reports / "study/summary.csv").set_index(["model", "figure"])
    assert summary.loc[("beta", "stateful_bpc"), "n"] == 2 and summary.loc[("beta", "stateful_bpc"), "mean"] == 2.23
    assert json.loads((reports / "study/summary.json").read_text())["beta"]["seeds"] == 2
    first = {name: (reports / name).read_bytes() for name in OUTPUTS}
    shutil.rmtree(repo / ".git")  # nothing but the folders is read
    study_report.report(reports / "study", reports / "study.md", reports / "study.png", str(params))
    assert {name: (reports / name).read_bytes() for name in OUTPUTS} == first


def test_report_refuses_an_empty_study_and_an_incomplete_folder(tmp_path):
    with pytest.raises(RnnlmError, match="no study folders; run `python -m rnnlm.study collect` first"):
        study_report.report(tmp_path, tmp_path / "s.md", tmp_path / "s.png", str(REPO_ROOT / "params.yaml"))
    (tmp_path / "alpha").mkdir()
    with pytest.raises(RnnlmError, match="alpha: no seed-<seed> folder"):
        study_report.report(tmp_path, tmp_path / "s.md", tmp_path / "s.png", str(REPO_ROOT / "params.yaml"))
    (tmp_path / "alpha/seed-1").mkdir()
    with pytest.raises(RnnlmError, match=r"seed-1/params.yaml: missing; expected a folder written by"):
        study_report.report(tmp_path, tmp_path / "s.md", tmp_path / "s.png", str(REPO_ROOT / "params.yaml"))
    assert not (tmp_path / "s.md").exists()


def test_a_fresh_clone_rebuilds_the_committed_study_byte_for_byte(tmp_path):
    """What `python -m rnnlm.study report` gives in a fresh clone: the committed study.md, study.png,
    runs.csv, summary.csv, summary.json and the README's block, from the folders alone."""
    reports = tmp_path / "reports"
    shutil.copytree(REPO_ROOT / "reports/study", reports / "study",
                    ignore=shutil.ignore_patterns("runs.csv", "summary.csv", "summary.json"))
    shutil.copy(REPO_ROOT / "README.md", tmp_path / "README.md")
    readme = (tmp_path / "README.md").read_text()
    start, end = readme.index(study_report.README_BEGIN), readme.index(study_report.README_END)
    (tmp_path / "README.md").write_text(readme[:start + len(study_report.README_BEGIN)] + "\nstale\n" + readme[end:])
    study_report.report(reports / "study", reports / "study.md", reports / "study.png", str(REPO_ROOT / "params.yaml"),
                        tmp_path / "README.md")
    for name in OUTPUTS:
        assert (reports / name).read_bytes() == (REPO_ROOT / "reports" / name).read_bytes(), name
    assert (tmp_path / "README.md").read_text() == (REPO_ROOT / "README.md").read_text()
    assert "([figures](reports/study.md#findings))" in readme  # the verdicts link to their figures
    assert "[astra_alpha](reports/study/astra_alpha/seed-1337/generations.md)" in readme
    (tmp_path / "other.md").write_text("no markers\n")
    with pytest.raises(RnnlmError, match="no study table markers"):
        study_report.report(reports / "study", reports / "study.md", reports / "study.png",
                            str(REPO_ROOT / "params.yaml"), tmp_path / "other.md")


def test_a_models_seeds_are_the_pinned_one_then_1_2_3():
    assert study_queue.seeds_wanted(1337, 5) == [1337, 1, 2, 3, 4]
    assert study_queue.seeds_wanted(2, 4) == [2, 1, 3, 4]
    assert study_queue.seeds_wanted(1337, 1) == [1337]


def test_run_queues_each_model_and_seed_not_held_yet(repo):
    _experiment(repo, "alpha-seed1", "alpha", 1.0, 2.45, "2025-12-30T10:00:00+00:00", seed=1)  # finished, not collected
    _experiment(repo, "quick-alpha-seed2", "alpha", 0.01, 3.9, "2025-12-30T10:00:00+00:00", seed=2)  # another scale
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


def test_runs_are_queued_only_once_an_idle_worker_has_exited(monkeypatch):
    """DVC's worker exits on an empty queue, and a run queued meanwhile can be dropped: `run` waits
    for an idle worker to go (reading `dvc queue status` each second), then queues and starts one."""
    def status(workers: str) -> str:
        return ("Task     Name          Created    Status\n"
                "a38da70  alpha-seed1   09:45 AM   Failed\n\n"
                f"Worker status: {workers}\n")

    replies = [status("0 active, 1 idle"), status("0 active, 1 idle"), status("0 active, 0 idle")]
    calls = []

    def dvc(command):
        calls.append(" ".join(command[:3]))
        return replies.pop(0) if command[:3] == ["dvc", "queue", "status"] else ""

    monkeypatch.setattr(study_queue, "_dvc", dvc)
    monkeypatch.setattr(study_queue, "held_runs", lambda *args: set())
    monkeypatch.setattr(study_queue.time, "sleep", lambda seconds: None)
    started = []
    monkeypatch.setattr(study_queue.subprocess, "run", lambda command, **kw: started.append(command) or
                        subprocess.CompletedProcess(command, 0))
    parsed = study_queue.QueueStatus([("alpha-seed1", "Failed")], 0, 1)
    assert study_queue.queue_status() == parsed and not parsed.pending
    replies.insert(0, status("0 active, 1 idle"))
    assert study_queue.run(["alpha"], [1], 1.0, wait=False) == [("alpha", 1)]
    assert calls[-4:] == ["dvc queue status", "dvc queue status", "dvc queue status", "dvc exp run"]
    assert started == [["dvc", "queue", "start", "--jobs", "1"]]  # the idle worker is gone: a new one


def test_jobs_start_that_many_workers_each_on_its_share_of_the_cores(monkeypatch):
    """`run --jobs 2` starts two workers whose runs compute on half the cores each (OMP_NUM_THREADS in
    their environment): two runs each with every core wait on each other's threads. A thread count
    the user set is kept; one worker changes nothing."""
    monkeypatch.setattr(study_queue, "_dvc", lambda command: "Worker status: 0 active, 0 idle\n"
                        if command[:3] == ["dvc", "queue", "status"] else "")
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


def test_unknown_model_bad_scale_and_no_seeds_are_refused_before_anything_is_queued(monkeypatch):
    calls = []
    monkeypatch.setattr(study_queue, "_dvc", lambda command: calls.append(command) or "")
    with pytest.raises(RnnlmError, match="--models nosuch: not under models:"):
        study_command.main(["run", "--models", "astra_alpha", "nosuch", "--params", str(REPO_ROOT / "params.yaml")])
    with pytest.raises(RnnlmError, match="--steps-scale 0: expected a finite positive number"):
        study_command.main(["run", "--steps-scale", "0", "--params", str(REPO_ROOT / "params.yaml")])
    with pytest.raises(RnnlmError, match="--seeds 0: expected a positive number of seeds"):
        study_command.main(["run", "--seeds", "0", "--params", str(REPO_ROOT / "params.yaml")])
    with pytest.raises(RnnlmError, match="--jobs 0: expected at least one queue worker"):
        study_command.main(["run", "--jobs", "0", "--params", str(REPO_ROOT / "params.yaml")])
    with pytest.raises(RnnlmError, match=r"--seeds 100000 for 2 models asks for 200,000 runs, more than --max-runs "
                                         r"100; pass --max-runs 200000 to queue them \(an over-long queue: `dvc queue "
                                         r"remove --queued` empties it\)"):
        study_command.main(["run", "--models", "astra_alpha", "leviathan", "--seeds", "100000", "--params",
                            str(REPO_ROOT / "params.yaml")])
    assert calls == []


@pytest.fixture
def study_cli(in_process):
    """`study_cli(repo, *args)`: `python -m rnnlm.study ARGS` in `repo`, run in this process."""
    return lambda repo, *args: in_process(["-m", "rnnlm.study", *args], repo)


def _collected_from_an_older_run(repo: Path, out: Path) -> None:
    """alpha seed 1337's folder as if collected before its newest run existed."""
    study_collect.collect(repo, out)
    (out / "alpha/seed-1337/provenance.json").write_text(json.dumps({"model": "alpha", "rev": "0" * 40,
                                                                     "date": "2025-01-01T00:00:00+00:00"}))


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (Debian's strace package) to kill collect "
                                                          "between its two renames")
def test_collect_killed_between_its_two_renames_is_mended_and_report_refuses_until_then(repo, study_cli):
    out = repo / "reports/study"
    _experiment(repo, "newer-alpha", "alpha", 1.0, 2.30, "2026-02-01T10:00:00+00:00")
    _collected_from_an_older_run(repo, out)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    renames = "rename,renameat,renameat2"
    killed = subprocess.run(["strace", "-qq", "-o", os.devnull, "-e", f"trace={renames}", "-e",
                             f"inject={renames}:signal=KILL:when=2", sys.executable, "-m", "rnnlm.study", "collect"],
                            cwd=repo, env=env, capture_output=True, text=True)
    assert killed.returncode != 0
    alpha = out / "alpha"
    assert sorted(p.name for p in alpha.iterdir()) == [".seed-1337.old", ".seed-1337.partial"]  # the folder is gone
    refused = study_cli(repo, "report", "--readme", "", "--params", str(REPO_ROOT / "params.yaml"))
    assert refused.returncode == 1 and refused.stderr == (
        "error: reports/study/alpha/.seed-1337.old: left by an interrupted `collect`; run `python -m rnnlm.study collect` "
        "again to mend it, then report\n")
    mended = study_cli(repo, "collect")
    assert mended.returncode == 0 and "put back the run an interrupted collect had moved aside" in mended.stdout
    assert sorted(p.name for p in alpha.iterdir()) == ["seed-1337"]
    assert json.loads((alpha / "seed-1337/metrics.json").read_text())["stateful_bpc"] == 2.30


def _edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_report_refuses_a_readme_that_is_not_there(repo, study_cli):
    study_collect.collect(repo, repo / "reports/study")
    done = study_cli(repo, "report", "--readme", "NOPE.md", "--params", str(REPO_ROOT / "params.yaml"))
    assert done.returncode == 1 and done.stderr == ("error: --readme NOPE.md: cannot be read (No such file or "
                                                    "directory); expected the README whose study table to rewrite, "
                                                    "or --readme ''\n")


def test_report_refuses_a_full_scale_run_among_the_quick_ones(repo, study_cli):
    out = repo / "reports/study"
    study_collect.collect(repo, out)
    shutil.copytree(out / "alpha/seed-1337", out / "quick/alpha")
    done = study_cli(repo, "report", "--readme", "", "--params", str(REPO_ROOT / "params.yaml"))
    assert done.returncode == 1 and done.stderr.startswith(
        "error: reports/study/quick/alpha/params.yaml: has train.steps_scale 1: a full-scale run in a quick folder")


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "epochs.tsv").write_text((f / "epochs.tsv").read_text().splitlines()[0] + "\n10\t1\t2.0\t1.69\t1\n"),
     "epochs.tsv: holds epochs 1, but train_metrics.json says 2 epochs; expected the files of one run"),
    (lambda f: (f / "metrics.json").write_text('{"model": "alpha", "stateful_bpc": 2.'),
     "metrics.json: does not parse"),
    (lambda f: (f / "params.yaml").write_text(""), "params.yaml: does not parse (empty or not a table)"),
    (lambda f: (f / "params.yaml").write_text((f / "params.yaml").read_text().replace("seed: 1337", "seed: 3")),
     "params.yaml: has seed 3, not the folder's 1337"),
    (lambda f: (f / "train_metrics.json").unlink(), "train_metrics.json: missing"),
    (lambda f: _edit_json(f / "metrics.json", stateful_bpc=float("nan")),
     "metrics.json: has nan under stateful_bpc, expected a finite number in (0, inf]"),
    (lambda f: _edit_json(f / "metrics.json", stateless_bpc=-3.7),
     "metrics.json: has -3.7 under stateless_bpc, expected a finite number in (0, inf]"),
    (lambda f: _edit_json(f / "metrics.json", reset_curve_bpc={"1": float("inf"), "never": 2.5}),
     "metrics.json: has inf under reset_curve_bpc[1], expected a finite number in (0, inf]"),
    (lambda f: _edit_json(f / "metrics.json", context_horizon=float("nan")),
     "metrics.json: has nan under context_horizon"),
    (lambda f: _edit_json(f / "metrics.json", text={"stateless": {"known_word_share": 1.4}}),
     "metrics.json: has 1.4 under text.stateless.known_word_share, expected a finite number in (-1e-12, 1]"),
    (lambda f: (f / "epochs.tsv").write_text((f / "epochs.tsv").read_text().replace("\t1.69\t1.72", "\t-1.69\t1.72")),
     "epochs.tsv: has -1.69 under epoch 1 val_loss"),
    (lambda f: _edit_json(f / "train_metrics.json", best_val_loss=1.5),
     "epochs.tsv: has its lowest validation loss at 1.69, but train_metrics.json says 1.5"),
    (lambda f: _edit_json(f / "metrics.json", tokens="sentencepiece"),
     "params.yaml: says tokens 'char', but metrics.json measured a 'sentencepiece' model"),
    (lambda f: (f / "generations.md").unlink(), "generations.md: missing; expected the samples the study links to"),
    (lambda f: (f / "params.yaml").write_text((f / "params.yaml").read_text().replace("cell: gru", "layers_x: 1")),
     "params.yaml: has no cell in models.alpha"),
    (lambda f: (f / "params.yaml").write_text("- 1\n- 2\n"), "params.yaml: holds a list, not a mapping of fields"),
    (lambda f: (f / "metrics.json").write_text("[1, 2]"), "metrics.json: holds a list, not a mapping of fields"),
], ids=["epochs disagree", "metrics cut short", "empty params", "another seed", "file missing", "nan", "negative",
        "inf in a curve", "nan horizon", "share above 1", "negative loss", "best disagrees", "other tokens",
        "no samples", "no cell", "params a list", "metrics a list"])
def test_report_refuses_a_damaged_run_in_one_line_naming_the_file(repo, damage, message, study_cli):
    out = repo / "reports/study"
    study_collect.collect(repo, out)
    damage(out / "alpha/seed-1337")
    done = study_cli(repo, "report", "--readme", "", "--params", str(REPO_ROOT / "params.yaml"))
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"error: reports/study/alpha/seed-1337/{message}")
    assert not (repo / "reports/study.md").exists()


def test_report_failing_part_way_leaves_every_previous_output(repo, monkeypatch):
    params = _folders(repo)
    reports = repo / "reports"
    readme = repo / "README.md"
    readme.write_text(f"# r\n{study_report.README_BEGIN}\nold\n{study_report.README_END}\n")
    study_report.report(reports / "study", reports / "study.md", reports / "study.png", str(params), readme)
    before = {p: p.read_bytes() for p in (readme, *(reports / name for name in OUTPUTS))}
    shutil.rmtree(reports / "study/beta/seed-1")  # the study changes: every output would change with it
    import matplotlib.figure

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full)  # study.md is written before the figure
    with pytest.raises(RnnlmError, match=r"cannot write .*study.png: No space left on device"):
        study_report.report(reports / "study", reports / "study.md", reports / "study.png", str(params), readme)
    assert {p: p.read_bytes() for p in before} == before  # study.md, the figure and the README still agree
    assert not [p for p in repo.rglob(".*.tmp")]
    monkeypatch.undo()
    study_report.report(reports / "study", reports / "study.md", reports / "study.png", str(params), readme)
    assert (reports / "study.md").read_bytes() != before[reports / "study.md"]


def test_collect_on_a_full_disk_says_so_and_keeps_the_folder_it_had(repo, monkeypatch):
    out = repo / "reports/study"
    _experiment(repo, "newer-alpha", "alpha", 1.0, 2.30, "2026-02-01T10:00:00+00:00")
    _collected_from_an_older_run(repo, out)
    before = {p: p.read_bytes() for p in (out / "alpha/seed-1337").iterdir()}
    real_write = Path.write_text

    def full(self, *args, **kwargs):
        if self.name == "metrics.json" and ".partial" in str(self):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(RnnlmError, match=r"cannot write .*alpha/seed-1337: No space left on device"):
        study_collect.collect(repo, out)
    assert {p: p.read_bytes() for p in (out / "alpha/seed-1337").iterdir()} == before
    assert sorted(p.name for p in (out / "alpha").iterdir()) == ["seed-1337"]  # no .partial to commit by mistake


def test_a_params_entry_that_cannot_be_the_trained_model_is_refused(tmp_path):
    """A run folder's params.yaml edited by hand (its GRU called an LSTM) would change runs.csv and
    the claims that pick models by cell: the entry must be able to have the parameters the training
    counted."""
    from rnnlm.study.folders import StudyFolderError, load_run

    folder = tmp_path / "astra_alpha/seed-1"
    shutil.copytree(REPO_ROOT / "reports/study/astra_alpha/seed-1", folder)
    assert load_run(folder, "astra_alpha", 1, quick=False).cell == "gru"
    params = folder / "params.yaml"
    params.write_text(params.read_text().replace("cell: gru", "cell: lstm", 1))
    with pytest.raises(StudyFolderError, match="params.yaml: describes models.astra_alpha as lstm 64/128/1, which "
                                               "cannot have the 86,913 parameters train_metrics.json counted"):
        load_run(folder, "astra_alpha", 1, quick=False)
