"""Every bad input through the real stage scripts (in the test's process where a stage allows it): one clear
line, a non-zero exit, no partial output."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch
import yaml

from tests.conftest import REPO_ROOT, sha256_of, synthetic_play, tiny_models

CORPUS = synthetic_play(30_000)


def _error_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in (done.stderr + done.stdout).splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, done.stderr + done.stdout
    return lines[0]


@pytest.fixture
def stage_dir(tmp_path, raw_params):
    """A folder with a valid params.yaml selecting astra_alpha, to run stage scripts in."""
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw_params))
    return tmp_path


def _stage(name: str, cwd, *args: str) -> subprocess.CompletedProcess:
    """The stage script itself, as `dvc repro` runs it (tests/test_pipeline.py runs one error through
    dvc repro, which passes the stage's exit status and message on)."""
    return subprocess.run([sys.executable, str(REPO_ROOT / "stages" / f"{name}.py"), *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")})


IN_PROCESS = {"download", "prepare", "tokenizer", "generate", "report"}
"""The stages whose checks run inside the test's process (conftest's `in_process`): all but train and
evaluate, which set the process's allocator."""


@pytest.fixture
def stage(in_process):
    """`stage(name, cwd, *args)`: what `_stage` returns, in this process where the stage allows it."""
    def call(name: str, cwd, *args) -> subprocess.CompletedProcess:
        if name not in IN_PROCESS:
            return _stage(name, cwd, *args)
        return in_process([REPO_ROOT / "stages" / f"{name}.py", *args], cwd)

    return call


def _write_params(folder, raw_params, edit=None) -> None:
    tiny_models(raw_params)
    if edit is not None:
        edit(raw_params)
    (folder / "params.yaml").write_text(yaml.safe_dump(raw_params, sort_keys=False))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda p: p.update(model="astra_delta"), "error: model: 'astra_delta' is not under models:; expected one of"),
        (lambda p: p["train"].update(momentum=0.9), "error: train.momentum: unknown key; expected one of batch_size"),
        (lambda p: p["models"]["astra_alpha"].update(hidden="big"), "error: models.astra_alpha.hidden: expected a positive integer, got 'big'"),
        (lambda p: p["models"]["astra_alpha"].update(lr=-0.1), "error: models.astra_alpha.lr: expected a finite positive number, got -0.1"),
        (lambda p: p["evaluate"].update(reset_every=[]), "error: evaluate.reset_every: expected a non-empty list of positive integers, got []"),
        (lambda p: p["generate"].update(prompts=[""]), "error: generate.prompts: expected a non-empty list of non-empty strings, got ['']"),
    ],
)
def test_params_errors_stop_the_first_stage_that_reads_them(tmp_path, raw_params, edit, message, stage):
    """A mistake outside the data sections stops the model stages, which check the whole file (generate
    here, in this process; train does the same first), not the data stages, which read only their own
    sections (prepare runs)."""
    _write_params(tmp_path, raw_params, edit)
    outputs = [tmp_path / "reports/generations.json", tmp_path / "reports/timing/generate.json"]
    done = stage("generate", tmp_path, tmp_path / "models/model.pt", *outputs)
    assert done.returncode == 2
    assert _error_line(done).startswith(message)
    assert not any(path.exists() for path in outputs)
    (tmp_path / "corpus.txt").write_text(CORPUS)
    assert stage("prepare", tmp_path, tmp_path / "corpus.txt", tmp_path / "prepared").returncode == 0


def test_a_data_section_error_stops_the_download(tmp_path, raw_params, stage):
    _write_params(tmp_path, raw_params, lambda p: p["data"].update(train_fraction=1.5))
    done = stage("download", tmp_path, tmp_path / "data/raw/tinyshakespeare.txt")
    assert done.returncode == 2
    assert _error_line(done) == "error: data.train_fraction: expected a number strictly between 0 and 1, got 1.5"
    assert not (tmp_path / "data/raw/tinyshakespeare.txt").exists()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A folder whose data stages have run (tiny models), the stage scripts called directly: the train
    stage's refusals start here, each with its own params.yaml."""
    root = tmp_path_factory.mktemp("prepared")
    corpus = root / "corpus.txt"
    corpus.write_text(CORPUS)
    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    _write_params(root, raw, lambda p: p["data"].update(url=corpus.as_uri(), sha256=sha256_of(CORPUS.encode())))
    for name, args in (("download", ["data/raw/tinyshakespeare.txt"]),
                       ("prepare", ["data/raw/tinyshakespeare.txt", "data/prepared"]),
                       ("tokenizer", ["data/prepared/train.txt", "models/tokenizer"])):
        done = _stage(name, root, *args)
        assert done.returncode == 0, done.stderr
    return root


def _train_with(root, edit_train: dict) -> subprocess.CompletedProcess:
    params = root / "params.yaml"
    original = params.read_text()
    edited = yaml.safe_load(original)
    edited["train"].update(edit_train)
    params.write_text(yaml.safe_dump(edited, sort_keys=False))
    try:
        return _stage("train", root, "data/prepared", "models/tokenizer", "models/model.pt",
                      "reports/train", ".resume", "reports/timing/train.json")
    finally:
        params.write_text(original)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"batch_size": 10**12}, "error: training astra_alpha (train.batch_size 1000000000000, train.seq_len 16) does "
                                 "not fit in memory: one allocation asked for"),
        ({"seq_len": 200_000}, "error: train.seq_len 200000 is longer than the validation split (3000 tokens) can "
                               "fill once; expected at most 2999"),
    ],
    ids=["batch too large for memory", "window longer than the validation split"],
)
def test_training_requests_refused_by_the_train_stage(prepared, edit, message):
    done = _train_with(prepared, edit)
    assert done.returncode != 0
    assert _error_line(done).startswith(message)
    assert not (prepared / "models/model.pt").exists()
    assert not (prepared / "reports/train/metrics.json").exists()


def test_cuda_without_gpu_stops_the_stage(prepared):
    if torch.cuda.is_available():
        pytest.skip("needs a machine without a GPU")
    done = _train_with(prepared, {"device": "cuda"})
    assert done.returncode != 0
    assert "error: train.device is 'cuda' but no CUDA GPU is available; use 'auto' or 'cpu'" in done.stderr + done.stdout
    assert not (prepared / "models/model.pt").exists()


def test_corpus_checksum_mismatch(tmp_path, raw_params, stage):
    source = tmp_path / "corpus.txt"
    source.write_text(CORPUS)
    _write_params(tmp_path, raw_params, lambda p: p["data"].update(url=source.as_uri(), sha256="0" * 64))
    done = stage("download", tmp_path, tmp_path / "data/raw/tinyshakespeare.txt")
    assert done.returncode != 0
    line = _error_line(done)
    assert "sha256 mismatch: expected " + "0" * 64 + ", got " + sha256_of(CORPUS.encode()) in line
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(("body", "message"), [
    (b"", "the corpus is empty; expected UTF-8 text"),
    ("caf\u00e9 ".encode("latin-1") * 100, "not UTF-8 text (invalid byte 0xe9 at offset 3)"),
])
def test_empty_or_non_utf8_corpus(tmp_path, raw_params, body, message, stage):
    source = tmp_path / "corpus.bin"
    source.write_bytes(body)
    _write_params(tmp_path, raw_params, lambda p: p["data"].update(url=source.as_uri(), sha256=sha256_of(body)))
    raw = tmp_path / "data/raw/tinyshakespeare.txt"
    done = stage("download", tmp_path, raw)
    if done.returncode == 0:  # the download checks the checksum only; the split reads the text
        done = stage("prepare", tmp_path, raw, tmp_path / "data/prepared")
    assert done.returncode != 0
    assert message in _error_line(done)
    assert not (tmp_path / "data/prepared").exists()


def test_truncated_checkpoint(stage_dir, char_checkpoint, stage):
    cut = stage_dir / "model.pt"
    cut.write_bytes(char_checkpoint.read_bytes()[:500])
    done = stage("generate", stage_dir, cut, stage_dir / "out.json", stage_dir / "timing.json")
    assert done.returncode == 1 and "not an rnnlm checkpoint" in _error_line(done)
    assert not (stage_dir / "out.json").exists()


def test_not_a_checkpoint(stage_dir, stage):
    (stage_dir / "model.pt").write_text("weights, honest")
    done = stage("generate", stage_dir, stage_dir / "model.pt", stage_dir / "out.json", stage_dir / "timing.json")
    assert done.returncode == 1 and "not an rnnlm checkpoint" in _error_line(done)


@pytest.mark.parametrize("content", [b"\x0a\x05hello" * 40, None], ids=["foreign bytes", "another archive"])
def test_a_foreign_file_is_named_without_pytorchs_advice_to_unpickle_it(stage_dir, content, stage):
    """A SentencePiece model, random bytes, or a PyTorch archive of a pickled module: one line, and
    never PyTorch's suggestion to retry with weights_only=False (that runs the file's code)."""
    path = stage_dir / "model.pt"
    if content is None:
        torch.save(torch.nn.Linear(2, 2), path)
    else:
        path.write_bytes(content)
    done = stage("generate", stage_dir, path, stage_dir / "out.json", stage_dir / "timing.json")
    assert done.returncode == 1 and "not an rnnlm checkpoint" in _error_line(done)
    assert "weights_only" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["download", "prepare", "tokenizer", "cell", "train", "generate", "evaluate", "report"])
def test_a_stage_with_the_wrong_number_of_arguments_prints_its_usage(name, stage_dir, stage):
    done = stage(name, stage_dir, "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
    assert done.returncode == 2
    assert _error_line(done).startswith(f"error: usage: python stages/{name}.py ")
    assert "got 9)" in _error_line(done) and "Traceback" not in done.stderr


def test_checkpoint_of_another_model_than_the_selected_one(stage_dir, char_checkpoint, raw_params, stage):
    raw_params["model"] = "astra_beta"
    (stage_dir / "params.yaml").write_text(yaml.safe_dump(raw_params))
    done = stage("generate", stage_dir, char_checkpoint, stage_dir / "out.json", stage_dir / "timing.json")
    assert done.returncode == 1
    assert re.search(r"a checkpoint of model 'astra_alpha', expected 'astra_beta'$", _error_line(done))
    assert not (stage_dir / "out.json").exists()


def test_output_folder_that_cannot_be_written(stage_dir, stage):
    corpus = stage_dir / "corpus.txt"
    corpus.write_text(CORPUS)
    (stage_dir / "blocker").write_text("a file where a folder should be")
    done = stage("prepare", stage_dir, corpus, stage_dir / "blocker" / "prepared")
    assert done.returncode == 1
    assert re.match(r"error: cannot write .*blocker/prepared: .*blocker is a file, not a folder$", _error_line(done))


def test_checkpoints_are_only_ever_loaded_weights_only():
    calls = [(path, line) for path in (REPO_ROOT / "src").rglob("*.py")
             for line in path.read_text().splitlines() if "torch.load(" in line]
    assert calls and all("weights_only=True" in line for _, line in calls), calls
