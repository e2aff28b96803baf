"""Checkpoints round-trip exactly and refuse what they are not."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest
import torch

from rnnlm.models.checkpoint import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint
from rnnlm.models.config import ModelConfig
from rnnlm.models.language_model import RecurrentLM
from rnnlm.data.tokenizers import CharTokenizer
from tests.conftest import REPO_ROOT

CONFIG = ModelConfig("lstm", vocab_size=13, embd=6, hidden=8, layers=2, dropout=0.1, layer_norm=True)
TOKENIZER = CharTokenizer(list("abcdefghijklm"))


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    model = RecurrentLM(CONFIG)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 13, (2, 5))
    model(tokens)[0].sum().backward()
    optimizer.step()
    path = tmp_path / "model.pt"
    save_checkpoint(path, Checkpoint(
        model_name="tiny", model_config=CONFIG, model_state=model.state_dict(), tokenizer_state=TOKENIZER.state(),
        params={"lr": 1e-3}, step=7, epoch=1, optimizer_state=optimizer.state_dict()))
    return path, model.eval(), optimizer


def test_round_trip_gives_identical_logits(saved):
    path, model, optimizer = saved
    loaded = load_checkpoint(path, tokenizer=TOKENIZER.identity, model_name="tiny")
    assert loaded.tokenizer().decode([0, 12]) == "am"
    tokens = torch.randint(0, 13, (3, 9))
    with torch.no_grad():
        assert torch.equal(loaded.build_model()(tokens)[0], model(tokens)[0])
    assert (loaded.step, loaded.epoch, loaded.params, loaded.model_config) == (7, 1, {"lr": 1e-3}, CONFIG)
    restored = torch.optim.AdamW(loaded.build_model().parameters(), lr=1e-3)
    restored.load_state_dict(loaded.optimizer_state)
    assert restored.state_dict()["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]
    assert [p.name for p in path.parent.iterdir()] == ["model.pt"]  # no temporary file left


def test_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="no such checkpoint file"):
        load_checkpoint(tmp_path / "absent.pt")


def test_truncated_file(saved):
    path = saved[0]
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="not an rnnlm checkpoint"):
        load_checkpoint(path)


def test_a_flipped_bit_in_a_weight_is_refused_in_one_line(saved, tmp_path, in_process):
    """One bit of a stored weight flipped (a finite value still, as a disk or a copy may leave it):
    PyTorch loads it without a word; the archive's CRC-32 refuses it."""
    import zipfile

    path = saved[0]
    with zipfile.ZipFile(path) as archive:
        entry = next(i for i in archive.infolist() if "/data/" in i.filename and i.file_size >= 4)
    data = bytearray(path.read_bytes())
    name_length, extra_length = int.from_bytes(data[entry.header_offset + 26:entry.header_offset + 28], "little"), \
        int.from_bytes(data[entry.header_offset + 28:entry.header_offset + 30], "little")
    start = entry.header_offset + 30 + name_length + extra_length  # the entry's stored bytes (torch.save stores)
    data[start + 3] ^= 0x20  # an exponent bit of the first float32: finite still, by a factor of 2**64 off
    (tmp_path / "flipped.pt").write_bytes(bytes(data))
    raw, kept = (torch.load(p, weights_only=True)["model_state"] for p in (tmp_path / "flipped.pt", path))
    assert all(torch.isfinite(v).all() for v in raw.values())  # PyTorch's reader: no word
    assert sum(int((raw[k] != kept[k]).sum()) for k in kept) == 1  # one weight changed
    with pytest.raises(CheckpointError, match=rf"flipped.pt: its archive entry {entry.filename} fails its CRC-32 check"):
        load_checkpoint(tmp_path / "flipped.pt")
    done = in_process(["-m", "rnnlm.sample", str(tmp_path / "flipped.pt"), "--prompt", "a"], tmp_path)
    assert done.returncode == 1 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert "fails its CRC-32 check" in done.stderr


def test_text_file(tmp_path):
    (tmp_path / "notes.pt").write_text("hello")
    with pytest.raises(CheckpointError, match="not an rnnlm checkpoint"):
        load_checkpoint(tmp_path / "notes.pt")


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_pickled_module_is_refused_not_executed(tmp_path):
    torch.save(RecurrentLM(CONFIG), tmp_path / "module.pt")  # the thing we never do
    with pytest.raises(CheckpointError, match="not an rnnlm checkpoint"):
        load_checkpoint(tmp_path / "module.pt")
    (tmp_path / "plain.pkl").write_bytes(pickle.dumps({"format": "rnnlm-checkpoint"}))
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path / "plain.pkl")


def test_foreign_torch_file(tmp_path):
    torch.save({"state_dict": {"w": torch.zeros(2)}}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not an rnnlm checkpoint"):
        load_checkpoint(tmp_path / "other.pt")


def test_other_tokenizer(saved):
    other = CharTokenizer(list("abcdefghijklz")).identity
    with pytest.raises(CheckpointError, match=r"trained with tokenizer char/13/sha256:\w{12}, but the tokenizer at hand is char/13/sha256:\w{12}$"):
        load_checkpoint(saved[0], tokenizer=other)


def test_other_model(saved):
    with pytest.raises(CheckpointError, match="a checkpoint of model 'tiny', expected 'astra_beta'"):
        load_checkpoint(saved[0], model_name="astra_beta")


def test_weights_that_do_not_fit_the_config(saved, tmp_path):
    checkpoint = load_checkpoint(saved[0])
    wrong = Checkpoint(**{**checkpoint.__dict__, "model_config": ModelConfig("gru", 13, 6, 8, 2)})
    save_checkpoint(tmp_path / "wrong.pt", wrong)
    with pytest.raises(CheckpointError, match="its weights are not of the shapes its model config gives"):
        load_checkpoint(tmp_path / "wrong.pt")  # refused at load, before anything is built


def test_a_checkpoint_from_another_tokenizer_kind(tmp_path, sentencepiece_checkpoint):
    with pytest.raises(CheckpointError, match="trained with tokenizer sentencepiece/100/.*at hand is char/13/"):
        load_checkpoint(sentencepiece_checkpoint, tokenizer=TOKENIZER.identity)


def test_same_contents_same_bytes_whatever_the_file_name(saved, tmp_path):
    checkpoint = load_checkpoint(saved[0])
    save_checkpoint(tmp_path / "a.pt", checkpoint)
    save_checkpoint(tmp_path / "b.pt", checkpoint)
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "b.pt").read_bytes()


def test_the_first_epoch_weights_round_trip_and_their_absence_is_one_clear_error(saved, tmp_path):
    path, model, _ = saved
    without = load_checkpoint(path)
    with pytest.raises(CheckpointError, match="does not keep the weights after epoch 1"):
        without.build_model(first_epoch=True)
    first = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    save_checkpoint(tmp_path / "with.pt", Checkpoint(**{**without.__dict__, "first_epoch_state": first}))
    loaded = load_checkpoint(tmp_path / "with.pt")
    assert all(torch.equal(p, torch.zeros_like(p)) for p in loaded.build_model(first_epoch=True).state_dict().values())
    tokens = torch.randint(0, 13, (3, 9))
    with torch.no_grad():
        assert torch.equal(loaded.build_model()(tokens)[0], model(tokens)[0])  # the final weights untouched


def _swap_tokenizer(path, into, tokenizer_state, keep_identity=True):
    """The checkpoint at `path` with its embedded tokenizer replaced (as a hand edit would), saved to `into`."""
    raw = torch.load(path, weights_only=True)
    raw["tokenizer_state"] = tokenizer_state
    if not keep_identity:
        del raw["tokenizer_identity"]  # as a checkpoint written before the identity was recorded
    torch.save(raw, into)
    return into


@pytest.mark.parametrize("other, message", [
    (list("abcdefghijklz"), r"its embedded tokenizer \(char/13/sha256:\w{12}\) is not the one the model was trained "
                            r"with \(char/13/sha256:\w{12}\)"),  # same size, other characters
    (list("abcdefgh"), r"its embedded tokenizer \(char/8/"),
], ids=["same size", "fewer tokens"])
def test_a_checkpoint_whose_tokenizer_was_replaced_is_refused(saved, tmp_path, other, message):
    path = _swap_tokenizer(saved[0], tmp_path / "swapped.pt", CharTokenizer(other).state())
    with pytest.raises(CheckpointError, match=f"^{tmp_path / 'swapped.pt'}: {message}"):
        load_checkpoint(path)


def test_a_checkpoint_that_does_not_record_its_tokenizer_is_refused_not_trusted(saved, tmp_path, in_process):
    """With the identity deleted, a swapped tokenizer of the same size sampled garbage: nothing in the
    checkpoint can vouch for the one it embeds, so it is refused, whatever it embeds."""
    swapped = _swap_tokenizer(saved[0], tmp_path / "swapped.pt", CharTokenizer(list("abcdefghijklz")).state(),
                              keep_identity=False)
    done = in_process(["-m", "rnnlm.sample", str(swapped), "--prompt", "a"], tmp_path)
    assert done.returncode == 1 and done.stdout == "" and done.stderr.count("\n") == 1
    assert "does not record which tokenizer the model was trained with" in done.stderr
    with pytest.raises(CheckpointError, match="does not record which tokenizer"):
        load_checkpoint(_swap_tokenizer(saved[0], tmp_path / "own.pt", TOKENIZER.state(), keep_identity=False))


@pytest.mark.parametrize("edit, message", [
    (lambda raw: raw["model_state"].__setitem__(next(iter(raw["model_state"])),
                                                torch.full_like(next(iter(raw["model_state"].values())), float("nan"))),
     "its weights hold NaN or infinite values"),
    (lambda raw: raw["model_config"].update(hidden=-5), "model config hidden -5: expected a positive whole number"),
    (lambda raw: raw["model_config"].update(hidden=10**12), "its model config cannot be built (Storage size"),
], ids=["nan weights", "a negative size", "a size of 10**12"])
def test_a_doctored_checkpoint_is_refused_at_load_in_one_line(saved, tmp_path, in_process, edit, message):
    raw = torch.load(saved[0], weights_only=True)
    edit(raw)
    torch.save(raw, tmp_path / "doctored.pt")
    done = in_process(["-m", "rnnlm.sample", str(tmp_path / "doctored.pt"), "--prompt", "a"], tmp_path)
    assert done.returncode == 1 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr, done.stderr


def test_sample_refuses_a_checkpoint_with_another_tokenizer_in_one_line(saved, tmp_path, in_process):
    path = _swap_tokenizer(saved[0], tmp_path / "swapped.pt", CharTokenizer(list("abcdefghijklz")).state())
    done = in_process(["-m", "rnnlm.sample", str(path), "--prompt", "a", "--max-new-tokens", "500"], tmp_path)
    assert done.returncode == 1 and done.stdout == "" and done.stderr.count("\n") == 1
    assert "is not the one the model was trained with" in done.stderr


def test_checking_a_checkpoint_imports_no_torchdynamo(saved):
    """The shape check builds the model on the meta device, where the embeddings' normal_ init would
    import TorchDynamo (seconds of every generate and evaluate stage); it is skipped there."""
    path = saved[0]
    code = f"import sys; from rnnlm.models.checkpoint import load_checkpoint; load_checkpoint({str(path)!r}); " \
           "print('torch._dynamo' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")})
    assert done.stdout.strip() == "False", done.stderr
