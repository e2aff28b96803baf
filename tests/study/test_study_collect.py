"""The study's `collect`: each model's and seed's newest run from the runs git holds, into folders
that are complete or absent, safe from a second collect, a kill and a full disk."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rnnlm.errors import RnnlmError
from rnnlm_study.campaign import collect as study_collect
from rnnlm_study.campaign.experiments import CommitFiles
from tests.conftest import REPO_ROOT
from tests.study.study_repo import commit, experiment, git, new_repo, write_run


@pytest.fixture
def repo(tmp_path) -> Path:
    return new_repo(tmp_path)


def test_collect_keeps_every_seed_and_each_ones_newest_run_and_quick_runs_apart(repo):
    experiment(repo, "new-alpha", "alpha", 1.0, 2.40, "2026-01-02T10:00:00+00:00")
    experiment(repo, "old-alpha", "alpha", 1.0, 2.60, "2025-12-31T10:00:00+00:00")
    experiment(repo, "alpha-seed1", "alpha", 1.0, 2.45, "2025-12-30T10:00:00+00:00", seed=1)  # older, but its own seed
    experiment(repo, "quick-alpha", "alpha", 0.01, 3.90, "2026-01-03T10:00:00+00:00")
    beta = experiment(repo, "beta-run", "beta", 1.0, 2.20, "2026-01-02T11:00:00+00:00")
    out = repo / "reports/study"
    said = study_collect.collect(repo, out)
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["alpha", "beta", "quick"]
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
        "train_seconds": 12.5, "made_by": "python -m rnnlm_study collect",
        "files": sorted(study_collect.FOLDER)}
    assert provenance["commit"] == git(repo, "rev-parse", "HEAD").strip()  # the commit it was run from
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
    baseline = git(repo, "rev-parse", "HEAD").strip()
    write_run(repo, "beta", 1.0, 2.2)
    _lock_for(repo, **lock)
    rev = commit(repo, "beta, train stage alone", "2026-01-02T11:00:00+00:00")
    git(repo, "update-ref", f"refs/exps/{baseline[:2]}/{baseline[2:]}/beta-train-only", rev)
    git(repo, "reset", "-q", "--hard", baseline)
    said = study_collect.collect(repo, repo / "reports/study")
    assert f"experiment beta-train-only: not collected: {reason}; expected a run of every stage (dvc exp run " \
           "without a stage name)" in said
    assert not (repo / "reports/study/beta").exists()


def test_an_experiment_whose_stages_agree_is_collected(repo):
    baseline = git(repo, "rev-parse", "HEAD").strip()
    write_run(repo, "beta", 1.0, 2.2)
    _lock_for(repo)
    rev = commit(repo, "beta, every stage", "2026-01-02T11:00:00+00:00")
    git(repo, "update-ref", f"refs/exps/{baseline[:2]}/{baseline[2:]}/beta-whole", rev)
    git(repo, "reset", "-q", "--hard", baseline)
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
        assert second.is_alive() and not (out / "alpha").exists()  # waiting, nothing written
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


def _collected_from_an_older_run(repo: Path, out: Path) -> None:
    """alpha seed 1337's folder as if collected before its newest run existed."""
    study_collect.collect(repo, out)
    (out / "alpha/seed-1337/provenance.json").write_text(json.dumps({"model": "alpha", "rev": "0" * 40,
                                                                     "date": "2025-01-01T00:00:00+00:00"}))


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (Debian's strace package) to kill collect "
                                                          "between its two renames")
def test_collect_killed_between_its_two_renames_is_mended_and_report_refuses_until_then(repo, study_cli):
    out = repo / "reports/study"
    experiment(repo, "newer-alpha", "alpha", 1.0, 2.30, "2026-02-01T10:00:00+00:00")
    _collected_from_an_older_run(repo, out)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    renames = "rename,renameat,renameat2"
    killed = subprocess.run(["strace", "-qq", "-o", os.devnull, "-e", f"trace={renames}", "-e",
                             f"inject={renames}:signal=KILL:when=2", sys.executable, "-m", "rnnlm_study", "collect"],
                            cwd=repo, env=env, capture_output=True, text=True)
    assert killed.returncode != 0
    alpha = out / "alpha"
    assert sorted(p.name for p in alpha.iterdir()) == [".seed-1337.old", ".seed-1337.partial"]  # the folder is gone
    refused = study_cli(repo, "report", "--params", str(REPO_ROOT / "params.yaml"))
    assert refused.returncode == 1 and refused.stderr == (
        "error: reports/study/alpha/.seed-1337.old: left by an interrupted `collect`; run `python -m rnnlm_study collect` "
        "again to mend it, then report\n")
    mended = study_cli(repo, "collect")
    assert mended.returncode == 0 and "put back the run an interrupted collect had moved aside" in mended.stdout
    assert sorted(p.name for p in alpha.iterdir()) == ["seed-1337"]
    assert json.loads((alpha / "seed-1337/metrics.json").read_text())["stateful_bpc"] == 2.30


def test_collect_on_a_full_disk_says_so_and_keeps_the_folder_it_had(repo, monkeypatch):
    out = repo / "reports/study"
    experiment(repo, "newer-alpha", "alpha", 1.0, 2.30, "2026-02-01T10:00:00+00:00")
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


def test_a_run_the_report_would_refuse_is_named_and_leaves_its_folder_while_the_others_are_collected(repo, study_cli):
    """Each run is all or nothing: a newer experiment of alpha whose metrics hold a NaN is refused in
    one line (exit 1), alpha's folder keeps the run it held, and beta is collected beside it."""
    out = repo / "reports/study"
    study_collect.collect(repo, out)
    before = {p.name: p.read_bytes() for p in (out / "alpha/seed-1337").iterdir()}
    with open(repo / ".git/info/exclude", "a") as exclude:  # the runs below are committed without the study
        exclude.write("reports/study/*/\n")
    baseline = git(repo, "rev-parse", "HEAD").strip()
    write_run(repo, "alpha", 1.0, 2.40)
    metrics = json.loads((repo / "reports/metrics.json").read_text())
    (repo / "reports/metrics.json").write_text(json.dumps({**metrics, "stateful_bpc": float("nan")}))
    rev = commit(repo, "a broken alpha run", "2026-01-05T10:00:00+00:00")
    git(repo, "update-ref", f"refs/exps/{baseline[:2]}/{baseline[2:]}/alpha-broken", rev)
    git(repo, "reset", "-q", "--hard", baseline)
    experiment(repo, "beta-run", "beta", 1.0, 2.20, "2026-01-05T11:00:00+00:00")
    done = study_cli(repo, "collect")
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("error: alpha seed 1337: not collected, its metrics.json: has nan under stateful_bpc")
    assert "beta seed 1337: wrote" in done.stdout
    assert {p.name: p.read_bytes() for p in (out / "alpha/seed-1337").iterdir()} == before
    assert not list(out.rglob(".*.partial"))


@pytest.mark.parametrize("damage", [b"{", b"[1, 2]", b'{"model": "alpha", "date": "yesterday"}'],
                         ids=["not JSON", "a list", "a date that is no date"])
def test_a_folder_with_a_damaged_provenance_is_collected_again(repo, damage):
    out = repo / "reports/study"
    study_collect.collect(repo, out)
    (out / "alpha/seed-1337/provenance.json").write_bytes(damage)
    said = study_collect.collect(repo, out)
    assert any(line.startswith("alpha seed 1337: wrote") for line in said), said
    assert json.loads((out / "alpha/seed-1337/provenance.json").read_text())["model"] == "alpha"


def test_a_study_folder_this_user_cannot_write_is_one_line(repo, study_cli, monkeypatch):
    """A read-only --out (simulated: root writes anywhere): one line naming the folder, nothing half-written."""
    from rnnlm_study.campaign import swap

    def refused(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(swap.Path, "mkdir", refused)
    done = study_cli(repo, "collect")
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "alpha seed 1337: cannot write" in done.stderr or "cannot write" in done.stderr, done.stderr
    assert "Permission denied; expected a folder this user may write" in done.stderr


def test_commit_files_reads_a_files_exact_bytes_and_none_for_what_is_no_file(tmp_path):
    """One `git cat-file --batch` answers every read: a file's bytes exactly (a NUL, a carriage
    return), None for a path the commit lacks or a folder, and it keeps answering after those."""
    repo = tmp_path / "repo"
    (repo / "folder").mkdir(parents=True)
    data = b"\x00a\r\nb\xff\n"
    (repo / "a.bin").write_bytes(data)
    (repo / "folder" / "b.txt").write_text("x\n")
    for command in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a"]):
        subprocess.run(["git", *command], cwd=repo, check=True)
    with CommitFiles(repo) as files:
        assert files.bytes("HEAD", "a.bin") == data
        assert files.bytes("HEAD", "missing.txt") is None and files.bytes("HEAD", "folder") is None
        assert files.text("HEAD", "folder/b.txt") == "x\n" and files.bytes("HEAD", "a.bin") == data
