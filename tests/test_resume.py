"""Resume files: keyed per run, checksummed, found by a queued experiment's rerun, listed and pruned."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from rnnlm.training.resume import (MAGIC, ResumeFileError, ResumeStore, list_resume_files, main_repository,
                                   read_header, read_resume_file, resume_folder, write_resume_file)


def _store(folder: Path, seed: int = 1, device: str = "cpu", gemm: str = "mkl") -> ResumeStore:
    fingerprint = f"params and inputs of seed {seed}"  # `run_fingerprint` covers the seed, params and data
    return ResumeStore(folder, "astra_alpha", seed, fingerprint, device, gemm)


def test_a_resume_file_round_trips_and_says_what_it_holds(tmp_path):
    store = _store(tmp_path)
    state = {"epoch": 3, "partial": {"steps": 40}, "weights": torch.arange(6.0)}
    store.save(state, epochs=10)
    header = read_header(store.path)
    assert (header["model"], header["seed"], header["epoch"], header["epochs"], header["step_in_epoch"]) == (
        "astra_alpha", 1, 3, 10, 40)
    assert 0 <= header.age_s() < 60
    loaded = store.load()
    assert loaded["epoch"] == 3 and torch.equal(loaded["weights"], state["weights"])


def test_runs_with_other_params_or_on_another_kind_of_device_have_files_of_their_own(tmp_path):
    paths = {_store(tmp_path).path, _store(tmp_path, seed=2).path, _store(tmp_path, device="cuda").path}
    assert len(paths) == 3 and all(p.name.startswith("astra_alpha-") for p in paths)


def test_a_run_finds_its_file_on_another_cpu_or_gemm_library(tmp_path):
    """The key leaves out the processor and the GEMM: a long run goes on wherever the next session
    lands; the header says which machine wrote the file."""
    first = ResumeStore(tmp_path, "leviathan", 1, "params and inputs", "cpu", "mkl", "AMD EPYC (family 25 model 1)")
    first.save({"epoch": 2}, epochs=6)
    other = ResumeStore(tmp_path, "leviathan", 1, "params and inputs", "cpu", "onednn", "Intel Xeon (family 6 model 207)")
    assert other.path == first.path and other.load()["epoch"] == 2
    assert (read_header(first.path)["processor"], read_header(first.path)["gemm"]) == ("AMD EPYC (family 25 model 1)", "mkl")


def test_a_file_whose_key_is_not_the_runs_is_refused(tmp_path, capsys):
    store = _store(tmp_path)
    store.save({"epoch": 1}, epochs=2)
    other = _store(tmp_path, seed=2)
    store.path.rename(other.path)  # someone renamed it by hand
    assert other.load() is None
    assert "belongs to another run" in capsys.readouterr().out


@pytest.mark.parametrize("damage", ["flip", "truncate", "header"])
def test_a_damaged_resume_file_is_refused_with_a_note(tmp_path, capsys, damage):
    store = _store(tmp_path)
    store.save({"epoch": 1, "weights": torch.randn(1000)}, epochs=2)
    data = bytearray(store.path.read_bytes())
    if damage == "flip":
        data[-2000:-1992] = bytes(b ^ 0xFF for b in data[-2000:-1992])  # eight bytes inside the tensor's data
    elif damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[len(MAGIC) + 1] = ord("!")
    store.path.write_bytes(bytes(data))
    with pytest.raises(ResumeFileError):
        read_resume_file(store.path)
    assert store.load() is None
    assert "note: ignoring" in capsys.readouterr().out


def test_a_file_that_is_no_resume_file_is_refused(tmp_path):
    path = tmp_path / "x.pt"
    torch.save({"epoch": 1}, path)  # the old, unchecked format
    with pytest.raises(ResumeFileError, match="not an rnnlm resume file"):
        read_resume_file(path)
    assert isinstance(list_resume_files(tmp_path)[0], ResumeFileError)


def test_the_folder_of_a_queued_experiment_is_the_main_repositorys(tmp_path):
    repo = tmp_path / "repo"
    workspace = repo / ".dvc/tmp/exps/tmpabc123"
    workspace.mkdir(parents=True)
    assert main_repository(workspace) == repo.resolve()
    assert main_repository(repo) == repo.resolve()
    assert resume_folder(".resume", environ={}, cwd=workspace) == repo.resolve() / ".resume"
    assert resume_folder(".resume", environ={"RNNLM_RESUME_DIR": str(tmp_path / "keep")}, cwd=workspace) == (
        tmp_path / "keep")
    assert resume_folder(".resume", environ={"RNNLM_RESUME_DIR": ""}, cwd=repo) == repo.resolve() / ".resume"


def _fields(model: str, epoch: int) -> dict:
    return {"model": model, "seed": 1, "key": f"key of {model}", "epoch": epoch, "epochs": 10}


def test_listing_gives_newest_first(tmp_path):
    write_resume_file(tmp_path / "a.pt", {"epoch": 1}, _fields("a", 1))
    time.sleep(1.1)
    write_resume_file(tmp_path / "b.pt", {"epoch": 2}, _fields("b", 2))
    assert [h["model"] for h in list_resume_files(tmp_path)] == ["b", "a"]


def test_listing_puts_unreadable_files_after_the_readable_and_a_missing_folder_has_none(tmp_path):
    (tmp_path / "0-broken.pt").write_bytes(b"not a resume file")
    write_resume_file(tmp_path / "a.pt", {"epoch": 1}, _fields("a", 1))
    time.sleep(1.1)
    write_resume_file(tmp_path / "b.pt", {"epoch": 2}, _fields("b", 2))
    (tmp_path / "c-broken.pt").write_bytes(b"not one either")
    found = list_resume_files(tmp_path)
    assert [h["model"] for h in found[:2]] == ["b", "a"]
    assert [str(e).split(":")[0] for e in found[2:]] == [str(tmp_path / "0-broken.pt"), str(tmp_path / "c-broken.pt")]
    assert all(isinstance(e, ResumeFileError) for e in found[2:])
    assert list_resume_files(tmp_path / "not yet made") == []


@pytest.mark.parametrize("header, why", [
    (b"[1, 2]", "its header is not a mapping of fields"),
    (b'{"model": "a", "seed": 1, "key": "k", "epoch": 1, "epochs": 2, "sha256": "x", "bytes": 0}',
     "its header has no str under 'written'"),
    (b'{"model": "a", "seed": 1, "key": "k", "epoch": 1, "epochs": 2, "sha256": "x", "bytes": 0, "written": "soon"}',
     "its header's time 'soon' does not parse"),
    (b'{"model": "a", "seed": "one", "key": "k", "epoch": 1, "epochs": 2, "sha256": "x", "bytes": 0, '
     b'"written": "2026-01-01T00:00:00+00:00"}', "its header has no int under 'seed'"),
], ids=["a list", "no time", "a bad time", "a seed that is text"])
def test_a_header_of_the_wrong_shape_is_refused_and_the_healthy_files_still_listed(tmp_path, capsys, header, why):
    write_resume_file(tmp_path / "good.pt", {"epoch": 1}, _fields("good", 1))
    (tmp_path / "bad.pt").write_bytes(MAGIC + header + b"\n" + b"archive")
    found = list_resume_files(tmp_path)
    assert [h["model"] for h in found if not isinstance(h, ResumeFileError)] == ["good"]
    assert [str(e) for e in found if isinstance(e, ResumeFileError)] == [f"{tmp_path / 'bad.pt'}: {why}"]
    store = _store(tmp_path)
    (tmp_path / "bad.pt").rename(store.path)  # what the train stage would read
    assert store.load() is None and why in capsys.readouterr().out


def test_resume_files_of_a_folder_that_is_a_file_is_one_line(tmp_path, in_process):
    (tmp_path / "resume").write_text("")
    done = in_process(["-m", "rnnlm_study", "resume-files", "--dir", str(tmp_path / "resume")], tmp_path)
    assert done.returncode == 1
    assert done.stderr == f"error: {tmp_path / 'resume'}: not a folder; expected the folder of resume files\n"


def test_a_header_edited_to_show_other_progress_is_never_listed_as_it_says(tmp_path):
    """The listing checks the checksum (in chunks, no tensor loaded): a header edited to say epoch 9
    of another model is listed as unreadable, as resuming would refuse it."""
    write_resume_file(tmp_path / "a.pt", {"epoch": torch.zeros(1000)}, _fields("a", 1))
    data = (tmp_path / "a.pt").read_bytes()
    line_end = data.index(b"\n")
    fields = {**json.loads(data[len(MAGIC):line_end]), "epoch": 9, "model": "leviathan"}
    (tmp_path / "a.pt").write_bytes(MAGIC + json.dumps(fields, sort_keys=True).encode() + data[line_end:])
    (found,) = list_resume_files(tmp_path)
    assert isinstance(found, ResumeFileError) and "checksum does not match" in str(found)


def test_a_file_of_the_same_run_under_other_code_or_settings_is_refused_saying_which(tmp_path, capsys):
    """The key holds the code that wrote the file and the arithmetic settings the environment chose:
    the same run's file (the same name) from other code, or under RNNLM_NATIVE=0, MKL_CBWR or
    RNNLM_GEMM set otherwise, is refused with one note naming what differs."""
    by_hand = {"loops": "cpp", "MKL_CBWR": "unset", "RNNLM_GEMM": ""}

    def store(code: str = "a" * 64, **settings) -> ResumeStore:
        return ResumeStore(tmp_path, "astra_alpha", 1, "params and inputs", "cpu", "onednn", code=code,
                           by_hand={**by_hand, **settings})

    store().save({"epoch": 2}, epochs=5)
    kinds = {"other code": store(code="b" * 64), "Python loops": store(loops="python"),
             "MKL_CBWR by hand": store(MKL_CBWR="COMPATIBLE"), "RNNLM_GEMM": store(RNNLM_GEMM="mkl")}
    assert len({s.fields["key"] for s in kinds.values()} | {store().fields["key"]}) == 5
    assert {s.path for s in kinds.values()} == {store().path}  # found, and refused, not left beside it
    notes = {}
    for kind, other in kinds.items():
        assert other.load() is None
        notes[kind] = capsys.readouterr().out.strip()
    assert notes["other code"] == (f"note: ignoring {store().path}: it was written by other code (library sha256 "
                                   f"{'a' * 12}, here {'b' * 12}); starting afresh")
    assert notes["Python loops"].endswith("it was written under other arithmetic settings (loops cpp there, python "
                                          "here); starting afresh")
    assert "(MKL_CBWR unset there, COMPATIBLE here)" in notes["MKL_CBWR by hand"]
    assert "(RNNLM_GEMM  there, mkl here)" in notes["RNNLM_GEMM"]
    assert store().load()["epoch"] == 2


def test_the_code_fingerprint_follows_every_library_file_but_the_studys(tmp_path):
    from rnnlm.training.resume import code_fingerprint

    root = tmp_path / "rnnlm"
    (root / "compute/cpp").mkdir(parents=True)
    (root / "study").mkdir()
    (root / "training.py").write_text("x = 1\n")
    (root / "compute/cpp/kernels.cpp").write_text("int x;\n")
    first = code_fingerprint(root)
    (root / "study/report.py").write_text("y = 2\n")
    (root / "notes.md").write_text("words\n")
    assert code_fingerprint.__wrapped__(root) == first
    (root / "compute/cpp/kernels.cpp").write_text("int y;\n")
    assert code_fingerprint.__wrapped__(root) != first
