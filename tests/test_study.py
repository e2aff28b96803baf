"""The study across models: `collect` from runs kept in git, `report` from the folders alone, and
the commands `run` queues."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from rnnlm import study as study_command
from rnnlm.errors import RnnlmError
from rnnlm.reporting import study_collect, study_queue, study_report
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


def _write_run(repo: Path, model: str, scale: float, stateful: float) -> None:
    """The workspace as a finished `dvc repro` of `model` leaves it (the files collect reads)."""
    (repo / "reports/train").mkdir(parents=True, exist_ok=True)
    (repo / "reports/plots").mkdir(parents=True, exist_ok=True)
    entry = {"tokens": "char", "cell": "gru", "embd": 8, "hidden": 16, "layers": 1, "epochs": 1}
    (repo / "params.yaml").write_text(yaml.safe_dump({"model": model, "train": {"steps_scale": scale},
                                                      "models": {model: entry}}))
    train = {"model": model, "device": "cpu", "processor": "Test CPU", "gemm": "onednn", "parameters": 1000,
             "steps": 20, "val_loss": 1.7, "best_val_loss": 1.69, "seconds": 12.5}
    (repo / "reports/train/metrics.json").write_text(json.dumps(train))
    for name in ("epochs.tsv", "steps.tsv"):
        (repo / "reports/train" / name).write_text("step\tval_loss\n1\t1.7\n")
    (repo / "reports/metrics.json").write_text(json.dumps(_metrics(model, stateful)))
    for name in ("reset_curve.csv", "context_curve.csv"):
        (repo / "reports/plots" / name).write_text("k,bpc\n1,3.7\n")
    (repo / "reports/generations.json").write_text("{}")
    (repo / "reports/generations.md").write_text(f"# Generations: {model} {stateful}\n")


def _commit(repo: Path, message: str, date: str) -> str:
    env = {"GIT_COMMITTER_DATE": date, "GIT_AUTHOR_DATE": date, "HOME": str(repo), "PATH": "/usr/bin:/bin"}
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", message, env=env)
    return _git(repo, "rev-parse", "HEAD").strip()


def _experiment(repo: Path, name: str, model: str, scale: float, stateful: float, date: str) -> str:
    """A commit on top of HEAD kept only under refs/exps/, as `dvc exp run` (or `dvc exp pull`) leaves one."""
    baseline = _git(repo, "rev-parse", "HEAD").strip()
    _write_run(repo, model, scale, stateful)
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


def test_collect_takes_each_models_newest_run_and_keeps_quick_runs_apart(repo):
    _experiment(repo, "new-alpha", "alpha", 1.0, 2.40, "2026-01-02T10:00:00+00:00")
    _experiment(repo, "old-alpha", "alpha", 1.0, 2.60, "2025-12-31T10:00:00+00:00")
    _experiment(repo, "quick-alpha", "alpha", 0.01, 3.90, "2026-01-03T10:00:00+00:00")
    beta = _experiment(repo, "beta-run", "beta", 1.0, 2.20, "2026-01-02T11:00:00+00:00")
    out = repo / "reports/study"
    said = study_collect.collect(repo, out)
    assert sorted(p.name for p in out.iterdir()) == ["alpha", "beta", "quick"]
    alpha = json.loads((out / "alpha/provenance.json").read_text())
    assert alpha["experiment"] == "new-alpha" and alpha["steps_scale"] == 1.0  # not the quick one, though newer
    assert json.loads((out / "alpha/metrics.json").read_text())["stateful_bpc"] == 2.40
    assert json.loads((out / "quick/alpha/metrics.json").read_text())["stateful_bpc"] == 3.90
    provenance = json.loads((out / "beta/provenance.json").read_text())
    assert provenance | {"commit": None} == {
        "model": "beta", "steps_scale": 1.0, "experiment": "beta-run", "rev": beta, "commit": None,
        "date": "2026-01-02T11:00:00+00:00", "device": "cpu", "processor": "Test CPU", "gemm": "onednn",
        "train_seconds": 12.5, "made_by": "python -m rnnlm.study collect"}
    assert provenance["commit"] == _git(repo, "rev-parse", "HEAD").strip()  # the commit it was run from
    assert {p.name for p in (out / "beta").iterdir()} == {*study_collect.FOLDER, "provenance.json"}
    assert any("quick" in line for line in said)
    assert not list(out.rglob(".*"))  # no temporary folder left behind
    again = study_collect.collect(repo, out)
    assert all("up to date" in line for line in again), again


def test_collect_never_replaces_a_newer_run_with_an_older_one(repo):
    out = repo / "reports/study"
    (out / "alpha").mkdir(parents=True)
    (out / "alpha/provenance.json").write_text(json.dumps({"date": "2026-06-01T00:00:00+00:00", "device": "cuda"}))
    said = study_collect.collect(repo, out)
    assert "kept the newer run" in said[0]
    assert sorted(p.name for p in (out / "alpha").iterdir()) == ["provenance.json"]


def test_collect_reads_committed_runs_and_refuses_a_folder_that_is_no_repository(repo, tmp_path):
    out = tmp_path / "study"
    study_collect.collect(repo, out)
    assert json.loads((out / "alpha/provenance.json").read_text())["experiment"] is None  # the branch's commit
    with pytest.raises(RnnlmError, match="not a git repository"):
        study_collect.collect(tmp_path / "nowhere", out)


def _folders(repo: Path) -> Path:
    _experiment(repo, "beta-run", "beta", 1.0, 2.20, "2026-01-02T11:00:00+00:00")
    _experiment(repo, "quick-gamma", "gamma", 0.01, 3.90, "2026-01-03T10:00:00+00:00")
    study_collect.collect(repo, repo / "reports/study")
    params = repo / "params-all.yaml"
    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    raw["models"] = {m: raw["models"]["astra_alpha"] for m in MODELS}
    raw["model"] = "alpha"
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    return params


def test_report_reads_the_folders_alone(repo):
    params = _folders(repo)
    reports = repo / "reports"
    runs = study_report.report(reports / "study", reports / "study.md", reports / "study.png", str(params))
    assert sorted((r.model, r.quick) for r in runs) == [("alpha", False), ("beta", False), ("gamma", True)]
    text = (reports / "study.md").read_text()
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| [") or line.startswith("| gamma")}
    assert "**2.500**" in rows["| [alpha](study/alpha/generations.md)"] and "cpu: Test CPU" in text
    assert "1.700 / 1.690" in rows["| [beta](study/beta/generations.md)"]
    assert "not run yet" in rows["| gamma"]  # no full-scale run: listed, not zero
    assert "## Quick runs" in text and "[gamma](study/quick/gamma/generations.md)" in text
    assert "## Findings" in text and "### 6." in text
    assert (reports / "study.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    first = (reports / "study.md").read_bytes(), (reports / "study.png").read_bytes()
    shutil.rmtree(repo / ".git")  # nothing but the folders is read
    study_report.report(reports / "study", reports / "study.md", reports / "study.png", str(params))
    assert ((reports / "study.md").read_bytes(), (reports / "study.png").read_bytes()) == first


def test_report_refuses_an_empty_study_and_an_incomplete_folder(tmp_path):
    with pytest.raises(RnnlmError, match="no study folders; run `python -m rnnlm.study collect` first"):
        study_report.report(tmp_path, tmp_path / "s.md", tmp_path / "s.png", str(REPO_ROOT / "params.yaml"))
    (tmp_path / "alpha").mkdir()
    with pytest.raises(RnnlmError, match="no params.yaml; expected a folder written by `study collect`"):
        study_report.report(tmp_path, tmp_path / "s.md", tmp_path / "s.png", str(REPO_ROOT / "params.yaml"))
    (tmp_path / "alpha/params.yaml").write_text("model: alpha\n")
    with pytest.raises(RnnlmError, match="no train_metrics.json; expected a folder written by `study collect`"):
        study_report.report(tmp_path, tmp_path / "s.md", tmp_path / "s.png", str(REPO_ROOT / "params.yaml"))
    assert not (tmp_path / "s.md").exists()


def test_the_committed_study_report_rebuilds_byte_for_byte(tmp_path):
    """What a fresh clone gets from `python -m rnnlm.study report`: the committed reports/study.md."""
    markdown = tmp_path / "reports/study.md"
    markdown.parent.mkdir()
    shutil.copytree(REPO_ROOT / "reports/study", tmp_path / "reports/study")
    study_report.report(tmp_path / "reports/study", markdown, tmp_path / "reports/study.png",
                        str(REPO_ROOT / "params.yaml"))
    assert markdown.read_text() == (REPO_ROOT / "reports/study.md").read_text()


def test_the_readmes_study_table_is_the_one_report_writes(tmp_path):
    readme = tmp_path / "README.md"
    shutil.copy(REPO_ROOT / "README.md", readme)
    shutil.copytree(REPO_ROOT / "reports/study", tmp_path / "reports/study")  # the links are relative to the README
    runs = study_report.load_runs(tmp_path / "reports/study")
    study_report.update_readme(readme, runs, list(yaml.safe_load((REPO_ROOT / "params.yaml").read_text())["models"]),
                               tmp_path / "reports/study.md")
    assert readme.read_text() == (REPO_ROOT / "README.md").read_text()
    assert "([figures](reports/study.md#findings))" in readme.read_text()  # the verdicts link to their figures
    assert "[astra_alpha](reports/study/astra_alpha/generations.md)" in readme.read_text()
    (tmp_path / "other.md").write_text("no markers\n")
    with pytest.raises(RnnlmError, match="no study table markers"):
        study_report.update_readme(tmp_path / "other.md", runs, ["astra_alpha"], tmp_path / "study.md")


def test_queue_commands_set_model_and_scale():
    assert study_queue.queue_commands(["astra_beta", "leviathan"], 0.01) == [
        ["dvc", "exp", "run", "--queue", "-S", "model=astra_beta", "-S", "train.steps_scale=0.01"],
        ["dvc", "exp", "run", "--queue", "-S", "model=leviathan", "-S", "train.steps_scale=0.01"],
    ]


def test_unknown_model_and_bad_scale_are_refused_before_anything_is_queued(monkeypatch):
    calls = []
    monkeypatch.setattr(study_queue, "_dvc", lambda command: calls.append(command) or "")
    with pytest.raises(RnnlmError, match="--models nosuch: not under models:"):
        study_queue.run(["astra_alpha", "nosuch"], 1.0, wait=False, params_path=str(REPO_ROOT / "params.yaml"))
    with pytest.raises(RnnlmError, match="--steps-scale 0: expected a finite positive number"):
        study_command.main(["run", "--steps-scale", "0", "--params", str(REPO_ROOT / "params.yaml")])
    assert calls == []
