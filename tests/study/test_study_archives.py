"""`python -m rnnlm_study collect --archives`: runs trained on a machine without DVC (a lent GPU),
packed by `benchmarks/gpu_check.py --study`, taken into reports/study/ like any other run."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from rnnlm_study.campaign import collect as study_collect
from rnnlm_study import folders as study_folders
from tests.conftest import REPO_ROOT
from tests.study.study_repo import write_run

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import gpu_study  # noqa: E402
import pipeline_runs  # noqa: E402

GPU_RECORD = {"date": "2026-01-05T10:00:00+00:00", "gpu": "NVIDIA H200", "torch": "2.11.0+cu130",
              "sentencepiece": "0.2.3", "runs_sharing_the_gpu": 5, "checkpoint": "left on the GPU machine",
              "commit": "a" * 40, "made_by": "benchmarks/gpu_check.py --study"}


def _archive(tmp_path: Path, model: str = "beta", seed: int = 2, stateful: float = 2.2,
             record: dict | None = None) -> Path:
    """What gpu_check.py --study sends back for one run: its workspace packed by `gpu_study.pack`."""
    work = tmp_path / f"work-{model}-{seed}-{stateful}"
    work.mkdir()
    write_run(work, model, 1.0, stateful, seed)
    train = json.loads((work / "reports/train/metrics.json").read_text())
    (work / "reports/train/metrics.json").write_text(json.dumps({**train, "device": "cuda",
                                                                 "processor": "NVIDIA H200", "gemm": "cublas"}))
    out = tmp_path / "archives"
    out.mkdir(exist_ok=True)
    path = out / f"{model}-seed-{seed}.tar.gz"
    gpu_study.pack(work, path, f"{model}/seed-{seed}", {**GPU_RECORD, "model": model, "seed": seed, **(record or {})})
    return path


def test_an_archive_becomes_a_study_folder_with_provenance_naming_the_gpu(tmp_path):
    path = _archive(tmp_path)
    out = tmp_path / "study"
    assert study_collect.collect_archive(path, out) == study_collect.Outcome(
        "beta seed 2", f"wrote {out / 'beta/seed-2'} from archive beta-seed-2.tar.gz", new=True)
    folder = out / "beta/seed-2"
    assert sorted(p.name for p in folder.iterdir()) == sorted([*study_collect.FOLDER, "provenance.json"])
    record = json.loads((folder / "provenance.json").read_text())
    assert record["device"] == "cuda" and record["processor"] == "NVIDIA H200" and record["gemm"] == "cublas"
    assert record["checkpoint"] == "left on the GPU machine" and record["runs_sharing_the_gpu"] == 5
    assert record["archive"] == "beta-seed-2.tar.gz" and len(record["archive_sha256"]) == 64
    assert record["run_by"] == "benchmarks/gpu_check.py --study"
    assert record["made_by"] == "python -m rnnlm_study collect --archives"
    run = study_folders.load_run(folder, "beta", 2, quick=False)  # what report reads
    assert run.where() == "cuda: NVIDIA H200"
    assert run.source() == f"archive beta-seed-2.tar.gz (benchmarks/gpu_check.py --study at {'a' * 7})"
    assert study_collect.collect_archive(path, out) == study_collect.Outcome(
        "beta seed 2", "up to date (archive beta-seed-2.tar.gz)", new=False)


def test_an_archive_never_replaces_a_newer_run_and_a_newer_archive_replaces_an_older_one(tmp_path):
    out = tmp_path / "study"
    old = _archive(tmp_path, stateful=2.3, record={"date": "2026-01-01T00:00:00+00:00"})
    study_collect.collect_archive(old, out)
    (tmp_path / "later").mkdir()
    new = _archive(tmp_path / "later", stateful=2.1)
    assert study_collect.collect_archive(new, out).new
    assert json.loads((out / "beta/seed-2/metrics.json").read_text())["stateful_bpc"] == 2.1
    kept = study_collect.collect_archive(old, out)
    assert "kept the newer run" in kept.line and not kept.new
    assert json.loads((out / "beta/seed-2/metrics.json").read_text())["stateful_bpc"] == 2.1


def test_collect_takes_a_folder_of_archives_beside_the_repositorys_runs(tmp_path, in_process):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    _archive(tmp_path, "beta", 1)
    _archive(tmp_path, "beta", 2)
    done = in_process(["-m", "rnnlm_study", "collect", "--archives", str(tmp_path / "archives")], repo)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"beta seed {s}: wrote reports/study/beta/seed-{s} from archive "
                                        f"beta-seed-{s}.tar.gz" for s in (1, 2)]


def test_collect_adds_a_runs_tokenizer_note_only_when_it_takes_the_run_in(tmp_path, monkeypatch):
    """The note on a run of another tokenizer (`tokenizer_notes`) is said once, by the collect that
    writes the run into its folder, not by every later collect that finds it up to date."""
    repo, out = tmp_path / "repo", tmp_path / "study"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    first, second = _archive(tmp_path, "beta", 1), _archive(tmp_path, "beta", 2)
    study_collect.collect(repo, out, [first])
    monkeypatch.setattr(study_collect, "tokenizer_notes", lambda _: {"beta seed 1": "note 1", "beta seed 2": "note 2"})
    said = study_collect.collect(repo, out, [first, second])
    assert said == ["beta seed 1: up to date (archive beta-seed-1.tar.gz)",
                    f"beta seed 2: wrote {out / 'beta/seed-2'} from archive beta-seed-2.tar.gz", "note 2"]


def _tar(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


@pytest.mark.parametrize("damage, message", [
    (lambda p: p.write_bytes(b"not a tar archive"), "not a readable gzip'd tar archive"),
    (lambda p: _tar(p, {**_members(p), "gamma/seed-1/metrics.json": b"{}"}),
     "does not hold exactly one <model>/seed-<seed>/ folder of files"),
    (lambda p: _tar(p, {"../../evil/seed-2/metrics.json": b"{}"}),
     "does not hold exactly one <model>/seed-<seed>/ folder of files"),
    (lambda p: _tar(p, {k: v for k, v in _members(p).items() if not k.endswith("/metrics.json")}),
     "lacks metrics.json"),
    (lambda p: _tar(p, {**_members(p), "beta/seed-2/model.pt": b"weights"}), "holds model.pt"),
    (lambda p: _tar(p, {**_members(p), "beta/seed-2/params.yaml":
                        _members(p)["beta/seed-2/params.yaml"].replace(b"seed: 2", b"seed: 3")}),
     "its folder beta/seed-2, params (model beta, seed 3), training metrics and provenance do not name one run"),
    (lambda p: _tar(p, {**_members(p), "beta/seed-2/provenance.json": b"{"}), "a file does not parse"),
], ids=["not gzip", "two folders", "path outside", "file missing", "a checkpoint", "another seed", "provenance cut"])
def test_a_damaged_archive_is_refused_in_one_line_and_writes_nothing(tmp_path, damage, message, in_process):
    path = _archive(tmp_path)
    damage(path)
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    done = in_process(["-m", "rnnlm_study", "collect", "--archives", str(path)], repo)
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"error: {path}: {message}"), done.stderr
    assert not (repo / "reports/study/beta").exists()


def test_a_missing_archive_is_named():
    with pytest.raises(study_collect.CollectError, match="nowhere.tar.gz: no such file"):
        study_collect.read_archive(Path("nowhere.tar.gz"))


def test_gpu_check_names_runs_as_model_or_model_and_seed():
    assert gpu_study.study_runs(["astra_gamma:2", "leviathan"], [1, 3]) == [
        ("astra_gamma", 2), ("leviathan", 1), ("leviathan", 3)]
    assert gpu_study.study_runs(["leviathan"], None) == [("leviathan", None)]
    with pytest.raises(SystemExit, match="expected MODEL or MODEL:SEED"):
        gpu_study.study_runs(["leviathan:two"], None)


def test_gpu_check_names_a_run_listed_twice_as_copies_and_a_run_listed_once_plainly():
    runs = [("leviathan", 5), ("leviathan", 5), ("astra_gamma", None), ("leviathan", 6), ("leviathan", 5)]
    assert gpu_study.copy_suffixes(runs) == ["-copy-1", "-copy-2", "", "", "-copy-3"]


def test_gpu_check_stages_keep_the_carried_packages_on_their_path(monkeypatch):
    """The stages must import the carried (pinned) packages the checking process imports: the GPU
    image's own SentencePiece trains another tokenizer."""
    monkeypatch.setenv("PYTHONPATH", "/tmp/site")
    assert pipeline_runs.stage_pythonpath().split(":") == ["src", "/tmp/site"]
    monkeypatch.delenv("PYTHONPATH")
    assert pipeline_runs.stage_pythonpath() == "src"


def _symlinked_samples(path: Path) -> None:
    members = _members(path)
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            if name.endswith("generations.md"):
                info = tarfile.TarInfo(name)
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(info)
                continue
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _renamed(path: Path, old: str, new: str) -> None:
    _tar(path, {k.replace(old, new): v.replace(old.encode(), new.encode()) for k, v in _members(path).items()})


@pytest.mark.parametrize("damage, message", [
    (lambda p: _tar(p, {**_members(p), "beta/seed-2/metrics.json": _members(p)["beta/seed-2/metrics.json"].replace(
        b'"stateful_bpc": 2.0', b'"stateful_bpc": NaN')}),
     "beta seed 2 (archive beta-seed-2.tar.gz): not collected, its metrics.json: has nan under stateful_bpc"),
    (_symlinked_samples, "holds beta/seed-2/generations.md, a link or special file, where only plain files belong"),
    (lambda p: _renamed(p, "beta", "quick"), "not collected, its params.yaml: models.quick: not a model name"),
    (lambda p: _tar(p, {**_members(p), "beta/seed-2/provenance.json": json.dumps(
        {**json.loads(_members(p)["beta/seed-2/provenance.json"]), "date": "yesterday"}).encode()}),
     "its params' seed 2 or train.steps_scale 1.0, or its provenance's date 'yesterday', is not a run's"),
    (lambda p: _tar(p, {**_members(p), "beta/seed-2/params.yaml": b"- 1\n- 2\n"}),
     "its params.yaml holds list, not a mapping of fields"),
    (lambda p: _tar(p, {**_members(p), "beta/seed-2/provenance.json": b"[1]"}),
     "its provenance.json holds list, not a mapping of fields"),
    (lambda p: _tar(p, {**_members(p), "beta/seed-2/params.yaml":
                        _members(p)["beta/seed-2/params.yaml"].replace(b"seed: 2", b"seed: three")}),
     "its params' seed 'three'"),
    (lambda p: _tar(p, {**_members(p), "beta/seed-2/params.yaml":
                        _members(p)["beta/seed-2/params.yaml"].replace(b"steps_scale: 1.0", b"steps_scale: fast")}),
     "train.steps_scale 'fast'"),
], ids=["nan figure", "a symlinked member", "a model named quick", "a date that is no date", "params a list",
        "provenance a list", "a seed as text", "a scale as text"])
def test_an_archive_that_the_report_would_refuse_never_replaces_a_good_run(tmp_path, damage, message, in_process):
    """The archive is checked before its run replaces anything: the good seed-2 run stays as it was,
    the refusal is one line, the exit is non-zero, and another good archive in the same call is
    collected all the same."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (tmp_path / "good").mkdir()
    good = _archive(tmp_path / "good", stateful=2.1)
    assert in_process(["-m", "rnnlm_study", "collect", "--archives", str(good)], repo).returncode == 0
    folder = repo / "reports/study/beta/seed-2"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    (tmp_path / "bad").mkdir()
    bad = _archive(tmp_path / "bad", stateful=2.0, record={"date": "2026-02-01T00:00:00+00:00"})
    damage(bad)
    (tmp_path / "other").mkdir()
    other = _archive(tmp_path / "other", seed=4)
    done = in_process(["-m", "rnnlm_study", "collect", "--archives", str(bad), str(other)], repo)
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr
    assert message in done.stderr, done.stderr
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert "beta seed 4: wrote" in done.stdout and (repo / "reports/study/beta/seed-4/metrics.json").is_file()
    assert not list((repo / "reports/study").rglob(".*.partial"))
