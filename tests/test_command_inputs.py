"""Malformed or unwritable input to the command lines that are not stages: each case one line naming
what was wrong and what was expected, a non-zero exit, and nothing half-written (#54, the cases
found by trying it a second time). The study's folders, archives and checkpoints have tables of
their own (study/test_study.py, study/test_study_archives.py, test_checkpoint.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from rnnlm.training.resume import MAGIC, write_resume_file
from tests.conftest import REPO_ROOT

PARAMS = (REPO_ROOT / "params.yaml").read_text()


def _params_with(tmp_path: Path, old: str, new: str) -> Path:
    assert old in PARAMS
    (tmp_path / "p.yaml").write_text(PARAMS.replace(old, new, 1))
    return tmp_path / "p.yaml"


CASES = [
    (lambda t: ["-m", "rnnlm.describe", "astra_alpha", "--params", str(t)],
     "error: {t}: cannot be read (Is a directory); expected params.yaml, a YAML file"),
    (lambda t: ["-m", "rnnlm.describe", "astra_alpha", "--params", str(_params_with(t, "hidden: 128", "hidden: 100000000000"))],
     "error: models.astra_alpha: a model of these sizes cannot be built (Storage size calculation overflowed"),
    (lambda t: ["-m", "rnnlm.describe", "astra_alpha", "--prepared", str(REPO_ROOT / "README.md"), "--params",
                str(REPO_ROOT / "params.yaml")],
     "error: --prepared {root}/README.md: not a folder; expected the prepare stage's output"),
    (lambda t: ["-m", "rnnlm_study", "status", "--study", str(REPO_ROOT / "README.md"), "--params",
                str(REPO_ROOT / "params.yaml")],
     "error: --study {root}/README.md: not a folder; expected the study's folder (reports/study)"),
    (lambda t: ["-m", "rnnlm_study", "run", "--models", "astra_alpha", "--seeds", "1000000000000", "--params",
                str(REPO_ROOT / "params.yaml")],
     "error: --seeds 1000000000000 for 1 model asks for 1,000,000,000,000 runs, more than --max-runs 100"),
]


@pytest.mark.parametrize("command, line", CASES, ids=["params a folder", "hidden 1e11", "prepared a file",
                                                      "study a file", "a trillion seeds"])
def test_a_malformed_input_is_one_line(tmp_path, in_process, command, line):
    done = in_process(command(tmp_path), tmp_path)
    assert done.returncode != 0 and done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(line.format(t=tmp_path, root=REPO_ROOT)), done.stderr


def test_describe_counts_a_huge_model_without_its_memory(tmp_path, in_process):
    params = _params_with(tmp_path, "hidden: 128", "hidden: 100000")
    done = in_process(["-m", "rnnlm.describe", "astra_alpha", "--params", str(params)], tmp_path)
    assert done.returncode == 0 and "hidden 100000" in done.stdout and "MB as float32" in done.stdout  # 120 GB, not allocated


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_sample_names_its_own_option_for_a_device_that_is_not_there(tmp_path, in_process, char_checkpoint):
    done = in_process(["-m", "rnnlm.sample", str(char_checkpoint), "--prompt", "a", "--device", "cuda"], tmp_path)
    assert done.returncode == 1
    assert done.stderr == "error: --device is 'cuda' but no CUDA GPU is available; use 'auto' or 'cpu'\n"


def _header(**fields) -> dict:
    return {"model": "astra_alpha", "seed": 1, "key": "k", "epoch": 1, "epochs": 10, "steps_scale": 1.0, **fields}


def test_an_edited_resume_header_is_listed_as_unreadable_and_status_goes_on(tmp_path, in_process):
    """A header whose steps_scale is text, or dated in the future: refused in the listing (never a
    traceback in `status`, never a negative age), the healthy file beside it listed."""
    folder = tmp_path / "resume"
    write_resume_file(folder / "good.pt", {"epoch": 1}, _header(seed=2))
    data = (folder / "good.pt").read_bytes()
    line_end = data.index(b"\n")
    fields = json.loads(data[len(MAGIC):line_end])
    for name, change in (("fast.pt", {"steps_scale": "fast"}), ("future.pt", {"written": "2099-01-01T00:00:00+00:00"})):
        (folder / name).write_bytes(MAGIC + json.dumps({**fields, **change}).encode() + data[line_end:])
    listed = in_process(["-m", "rnnlm_study", "resume-files", "--dir", str(folder)], tmp_path)
    assert listed.returncode == 0 and listed.stdout.count("unreadable: ") == 2, listed.stdout
    assert "steps_scale 'fast' is not of the kind a run writes" in listed.stdout
    assert "is not a past time with a zone" in listed.stdout and "-" not in listed.stdout.split("good.pt")[0][-12:]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    shown = in_process(["-m", "rnnlm_study", "status", "--models", "astra_alpha", "--seed-list", "1", "2",
                        "--resume-dir", str(folder), "--params", str(REPO_ROOT / "params.yaml")], tmp_path)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr


def test_pruning_a_folder_this_user_cannot_write_is_one_line(tmp_path, in_process, monkeypatch):
    folder = tmp_path / "resume"
    write_resume_file(folder / "old.pt", {"epoch": 1}, _header())

    def refused(self, missing_ok=False):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "unlink", refused)
    done = in_process(["-m", "rnnlm_study", "resume-files", "--dir", str(folder), "--prune-older-than", "0"], tmp_path)
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1
    assert done.stderr == (f"error: {folder / 'old.pt'}: cannot be removed (Permission denied); expected a resume folder "
                           "this user may write\n")
