"""A resume file binds its header to its archive, and its archive to the run that resumes it: a file
re-keyed for another run, or forged with a checksum to match, is refused with a note and the run
starts afresh, as is a file of the previous format (its header was not bound)."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest
import torch

from rnnlm.training.resume import MAGIC, MAGIC_1, read_resume_file, write_resume_file
from tests.test_train import Interrupted, _losses, _same_weights, _train, tiny_params


def _stop_after_first(epoch: int) -> None:
    if epoch == 1:
        raise Interrupted


def _interrupted(params, folder: Path) -> Path:
    """The resume file of `params`' run, stopped after its first epoch."""
    folder.mkdir(exist_ok=True)
    with pytest.raises(Interrupted):
        _train(params, resume_dir=folder, on_epoch_end=_stop_after_first)
    (path,) = folder.glob("astra_alpha-*.pt")
    return path


def _header(path: Path) -> dict:
    data = path.read_bytes()
    return json.loads(data[len(MAGIC):data.index(b"\n")])


def test_a_file_re_keyed_for_another_seed_is_refused_and_the_run_starts_afresh(raw_params, tmp_path, capsys):
    theirs = _interrupted(tiny_params(raw_params, dropout=0.2), tmp_path / "a")
    raw_params["seed"] = 7
    ours = tiny_params(raw_params, dropout=0.2)
    wanted = _interrupted(ours, tmp_path / "b")  # where and under which key a seed-7 run keeps its file
    data = theirs.read_bytes()
    line_end = data.index(b"\n")
    fields = {**json.loads(data[len(MAGIC):line_end]), "key": _header(wanted)["key"], "seed": 7}
    forged = tmp_path / "c" / wanted.name
    forged.parent.mkdir()
    forged.write_bytes(MAGIC + json.dumps(fields, sort_keys=True).encode() + data[line_end:])
    capsys.readouterr()
    resumed = _train(ours, resume_dir=forged.parent)
    out = capsys.readouterr().out
    assert "checksum does not match its header and contents" in out and "resuming" not in out
    fresh = _train(ours)
    assert _losses(resumed) == _losses(fresh) and _same_weights(resumed, fresh)


def _wrong_shape(state: dict) -> None:
    name = next(iter(state["model"]))
    state["model"][name] = torch.zeros(3, 5)


def _no_optimizer_entry(state: dict) -> None:
    state["optimizer"]["state"].pop(0)


def _epoch_50(state: dict) -> None:
    state["epoch"] = 50


def _history_short(state: dict) -> None:
    state["epoch"] = 2
    state["scheduler"]["last_epoch"] = 2


@pytest.mark.parametrize("forge, why", [
    (_wrong_shape, "its weights are not of this model's names and shapes"),
    (_no_optimizer_entry, "its optimizer holds state for"),
    (_epoch_50, "it stands after epoch 50, and the run has 3 epochs"),
    (_history_short, "its history holds 1 epochs, not 2"),
], ids=["a weight of another shape", "an optimizer entry missing", "epoch 50", "an epoch it never trained"])
def test_an_archive_forged_with_a_matching_checksum_is_held_to_the_run(raw_params, tmp_path, capsys, forge, why):
    params = tiny_params(raw_params, dropout=0.2)
    path = _interrupted(params, tmp_path)
    fields, state = read_resume_file(path)
    forge(state)
    write_resume_file(path, state, {k: v for k, v in fields.items() if k not in ("sha256", "bytes", "written")})
    read_resume_file(path)  # its checksum is right: only the run can tell
    capsys.readouterr()
    resumed = _train(params, resume_dir=tmp_path)
    out = capsys.readouterr().out
    assert f"note: ignoring {path}: {why}" in out and "starting afresh" in out and "resuming" not in out
    fresh = _train(params)
    assert _losses(resumed) == _losses(fresh) and _same_weights(resumed, fresh)


@pytest.mark.parametrize("seed", [None, 7], ids=["its own run", "re-keyed to another seed"])
def test_a_file_of_format_1_is_refused_and_the_run_starts_afresh(raw_params, tmp_path, capsys, seed):
    """Format 1's checksum covered the archive alone, so a header re-keyed to another run passed it:
    such a file is refused (the runs that wrote them have ended), with a note, and the run starts afresh."""
    params = tiny_params(raw_params, dropout=0.2)
    path = _interrupted(params, tmp_path)
    fields, state = read_resume_file(path)
    if seed is not None:
        raw_params["seed"] = seed
        params = tiny_params(raw_params, dropout=0.2)
        wanted = _interrupted(params, tmp_path / "other")
        fields, path = {**fields, "key": _header(wanted)["key"], "seed": seed}, tmp_path / wanted.name
    buffer = io.BytesIO()
    torch.save({k: v for k, v in state.items() if k != "run_key"}, buffer)
    payload = buffer.getvalue()
    old = {**fields, "sha256": hashlib.sha256(payload).hexdigest(), "bytes": len(payload)}
    path.write_bytes(MAGIC_1 + json.dumps(old, sort_keys=True).encode() + b"\n" + payload)
    capsys.readouterr()
    resumed = _train(params, resume_dir=tmp_path)
    out = capsys.readouterr().out
    assert f"note: ignoring {path}: a resume file of format 1, written by older code" in out and "resuming" not in out
    fresh = _train(params)
    assert _losses(resumed) == _losses(fresh) and _same_weights(resumed, fresh)
