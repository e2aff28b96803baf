"""A scratch git repository holding study runs as `dvc repro` and `dvc exp run` leave them: what the
study's collect, report and queue tests read (no DVC, no training: the files alone)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import yaml

from rnnlm.evaluation.blocks import BlockTable, blocks_csv

MODELS = ["alpha", "beta", "gamma"]
VAL_CHARS = 3047
"""The predicted characters of a study repository's validation split: two blocks, of 2,047 and 1,000."""


FIRST_EPOCH_STATELESS = 3.8
"""The stateless score of a run's epoch-1 checkpoint, where it kept one."""


def git(repo: Path, *args: str, env: dict | None = None) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=env).stdout


def run_metrics(model: str, stateful: float, first_epoch: float | None = None) -> dict:
    """A run's evaluation metrics; `first_epoch`: its epoch-1 checkpoint's stateful score, where it kept one."""
    kept = {} if first_epoch is None else {"first_epoch": {"stateful_bpc": first_epoch, "stateless_bpc": FIRST_EPOCH_STATELESS}}
    return {**kept, "model": model, "tokens": "char", "val_chars": VAL_CHARS, "val_tokens": VAL_CHARS,
            "stateful_bpc": stateful, "stateless_bpc": 3.75, "bigram_bpc": 3.59,
            "context_horizon": 8, "context_stateful_bpc": 2.4, "context_curve_bpc": {"1": 3.6, "8": 2.41},
            "reset_curve_bpc": {"1": 3.75, "4": 3.0, "never": stateful},
            "text": {"stateless": {"known_word_share": 0.4, "repeated_4gram_share": 0.2},
                     "stateful": {"known_word_share": 0.8, "repeated_4gram_share": 0.1}}}


PARAMS = Path(__file__).resolve().parents[2] / "params.yaml"


def run_params(model: str, seed: int, scale: float) -> dict:
    """A run's params.yaml: the project's, with one small model `model` selected at `seed` and `scale`."""
    params = yaml.safe_load(PARAMS.read_text())
    entry = {**params["models"]["astra_alpha"], "embd": 8, "hidden": 16, "layers": 1, "epochs": 2}
    params.update(model=model, seed=seed, models={model: entry})  # 2,857 parameters at 65 characters
    params["train"]["steps_scale"] = scale
    return params


def write_run(repo: Path, model: str, scale: float, stateful: float, seed: int = 1337,
              first_epoch: float | None = None) -> None:
    """The workspace as a finished `dvc repro` of `model` leaves it (the files collect reads)."""
    (repo / "reports/train").mkdir(parents=True, exist_ok=True)
    (repo / "reports/plots").mkdir(parents=True, exist_ok=True)
    (repo / "params.yaml").write_text(yaml.safe_dump(run_params(model, seed, scale), sort_keys=False))
    train = {"model": model, "device": "cpu", "processor": "Test CPU", "gemm": "onednn", "parameters": 2857,
             "epochs": 2, "steps": 20, "val_loss": 1.7, "best_val_loss": 1.69, "seconds": 12.5}
    (repo / "reports/train/metrics.json").write_text(json.dumps(train))
    epochs = "step\tepoch\ttrain_loss\tval_loss\tval_batch_loss\n10\t1\t2.0\t1.69\t1.72\n20\t2\t1.8\t1.7\t1.69\n"
    (repo / "reports/train/epochs.tsv").write_text(epochs)
    (repo / "reports/train/steps.tsv").write_text("step\ttrain_loss\n1\t2.0\n")
    (repo / "reports/metrics.json").write_text(json.dumps(run_metrics(model, stateful, first_epoch)))
    for name in ("reset_curve.csv", "context_curve.csv"):
        (repo / "reports/plots" / name).write_text("k,bpc\n1,3.7\n")
    def nats(bpc: float, first_share: float) -> list[float]:  # the total the metrics imply, split unevenly
        total = bpc * math.log(2) * VAL_CHARS
        return [total * first_share, total * (1 - first_share)]

    metrics = run_metrics(model, stateful)
    blocks = BlockTable([0, 2048], [2047, 1000], [2047, 1000],
                        {"stateful": nats(stateful, 0.70), "stateless": nats(metrics["stateless_bpc"], 0.68),
                         "bigram": nats(metrics["bigram_bpc"], 0.66),
                         **({} if first_epoch is None else {"first_epoch_stateful": nats(first_epoch, 0.69),
                                                         "first_epoch_stateless": nats(FIRST_EPOCH_STATELESS, 0.67)})})
    (repo / "reports/validation_blocks.csv").write_text(blocks_csv(blocks))
    (repo / "reports/generations.json").write_text("{}")
    (repo / "reports/generations.md").write_text(f"# Generations: {model} {stateful}\n")
    (repo / "reports/timing").mkdir(exist_ok=True)
    for stage in ("train", "generate", "evaluate"):
        (repo / f"reports/timing/{stage}.json").write_text(json.dumps({"stage": stage, "wall_s": 1.0, "cpu_s": 1.5}))


def collected_pieces(repo: Path, model: str, seed: int, val_tokens: int) -> None:
    """A collected SentencePiece run's folder under reports/study, as far as the piece counts read it
    (`rnnlm_study.piece_counts`): its metrics' `tokens` and `val_tokens`."""
    folder = repo / "reports/study" / model / f"seed-{seed}"
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"tokens": "sentencepiece", "val_tokens": val_tokens}))


def commit(repo: Path, message: str, date: str) -> str:
    env = {"GIT_COMMITTER_DATE": date, "GIT_AUTHOR_DATE": date, "HOME": str(repo), "PATH": "/usr/bin:/bin"}
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", message, env=env)
    return git(repo, "rev-parse", "HEAD").strip()


def experiment(repo: Path, name: str, model: str, scale: float, stateful: float, date: str, seed: int = 1337,
               first_epoch: float | None = None) -> str:
    """A commit on top of HEAD kept only under refs/exps/, as `dvc exp run` (or `dvc exp pull`) leaves one."""
    baseline = git(repo, "rev-parse", "HEAD").strip()
    write_run(repo, model, scale, stateful, seed, first_epoch)
    rev = commit(repo, name, date)
    git(repo, "update-ref", f"refs/exps/{baseline[:2]}/{baseline[2:]}/{name}", rev)
    git(repo, "reset", "-q", "--hard", baseline)
    return rev


REGISTRATION = Path(__file__).resolve().parents[2] / "reports/study/registration-1.yaml"


def new_repo(tmp_path: Path, rules: bool = True) -> Path:
    """A repository whose branch holds the study's registered rules, sealed (unless not `rules`), and
    one committed run: alpha, seed 1337, full scale."""
    root = tmp_path / "repo"
    (root / "reports/study").mkdir(parents=True)
    if rules:
        shutil.copy(REGISTRATION, root / "reports/study" / REGISTRATION.name)
    git(root, "init", "-q")
    write_run(root, "alpha", 1.0, 2.50)
    commit(root, "alpha, committed", "2026-01-01T10:00:00+00:00")
    if rules:
        seal_rules(root)
    return root


def seal_rules(root: Path, study: str = "reports/study", date: str = "2026-01-01T10:30:00+00:00") -> str:
    """Seal the registration the repository `root` holds committed in `study` (`register --seal`) and
    commit sealed.tsv; returns the commit that added the registration."""
    from rnnlm_study.registration_git import seal

    registered = seal(root, root / study / REGISTRATION.name)
    commit(root, "sealed", date)
    return registered


def study_in_git(root: Path, study: str = "reports/study") -> None:
    """Make `root` (holding the study folder `study` with the registration) a repository with
    everything committed and the registration sealed: what `report` reads the registration from."""
    git(root, "init", "-q")
    commit(root, "the study", "2026-01-01T10:00:00+00:00")
    seal_rules(root, study)


def study_params(repo: Path) -> Path:
    """A params.yaml beside `repo` whose models are the study repositories' (alpha, beta, gamma), each
    astra_alpha's entry: what `report` reads for the models' order."""
    params = repo.parent / "params-all.yaml"
    raw = yaml.safe_load(PARAMS.read_text())
    raw["models"] = {m: raw["models"]["astra_alpha"] for m in MODELS}
    raw["model"] = "alpha"
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    return params
