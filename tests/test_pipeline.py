"""The DVC pipeline end to end in a scratch git repository, on a small synthetic corpus."""

from __future__ import annotations

import json

import pytest

from tests.conftest import make_dvc_repo, run, synthetic_play


def _small(params: dict) -> None:
    params["tokenizer"]["vocab_size"] = 100


@pytest.fixture(scope="module")
def data_repo(tmp_path_factory):
    root = make_dvc_repo(tmp_path_factory.mktemp("pipeline") / "repo", synthetic_play(30_000), _small)
    run(["dvc", "repro", "tokenizer"], root)
    return root


def test_data_stages_write_their_outputs(data_repo):
    raw = (data_repo / "data/raw/tinyshakespeare.txt").read_text()
    assert raw == synthetic_play(30_000)
    summary = json.loads((data_repo / "data/prepared/vocab.json").read_text())
    assert (summary["train_chars"], summary["val_chars"]) == (27_000, 3_000)
    assert (data_repo / "models/tokenizer/spm.model").stat().st_size > 0


def test_second_repro_does_nothing(data_repo):
    again = run(["dvc", "repro", "tokenizer"], data_repo)
    assert "Running stage" not in again.stdout
    assert "up to date" in again.stdout
    assert "up to date" in run(["dvc", "status"], data_repo).stdout


def test_mirror_variable_feeds_the_download(tmp_path):
    corpus = synthetic_play(30_000, seed=1)
    root = make_dvc_repo(tmp_path / "repo", corpus, _small)
    mirror = tmp_path / "mirror.txt"
    mirror.write_text(corpus)
    (tmp_path / "repo-corpus.txt").unlink()  # data.url now points nowhere: only the mirror can serve
    run(["dvc", "repro", "download"], root, env={"RNNLM_CORPUS_MIRROR": str(mirror)})
    assert (root / "data/raw/tinyshakespeare.txt").read_text() == corpus


def test_bad_params_stop_dvc_repro_with_the_key(tmp_path):
    def broken(params):
        _small(params)
        params["data"]["train_fraction"] = 1.5

    root = make_dvc_repo(tmp_path / "repo", synthetic_play(30_000), broken)
    done = run(["dvc", "repro", "prepare"], root, check=False)
    assert done.returncode != 0
    assert "error: data.train_fraction: expected a number strictly between 0 and 1, got 1.5" in done.stderr + done.stdout
    assert not (root / "data/prepared").exists()
