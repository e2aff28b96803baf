"""Save and load checkpoints: plain dicts of tensors and primitives, loaded with weights_only=True.

A checkpoint holds the weights, the model config, the model's name, the tokenizer itself (its
characters or its SentencePiece model, so a checkpoint is all that sampling needs), the params it
was trained with, the step and epoch, the optimizer state, and the weights after the first epoch
(what the evaluation compares the final weights with). Never a pickled module.
Loading checks that the file is an rnnlm checkpoint, its bytes as written (each archive entry's CRC-32,
which PyTorch's own reader skips), whose weights are finite and of the shapes its
config gives, whose embedded tokenizer is the one recorded at training (its identity: kind, size,
sha256; a checkpoint that records none is refused, not trusted) and has the model's vocabulary
size, and (when asked) that it was trained with the given tokenizer and is the given model; each
failure is one clear `CheckpointError`.
"""

from __future__ import annotations

import io
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rnnlm.atomic import write_bytes_atomic
from rnnlm.errors import RnnlmError
from rnnlm.models.config import ModelConfig
from rnnlm.models.kinds import LanguageModel, build_model, on_meta
from rnnlm.data.tokenizers import Tokenizer, tokenizer_from_state

FORMAT = "rnnlm-checkpoint"
VERSION = 1


class CheckpointError(RnnlmError):
    """A checkpoint that is missing, unreadable, foreign, or does not fit what it is loaded for."""


@dataclass(frozen=True)
class Checkpoint:
    """The contents of a checkpoint file."""

    model_name: str
    model_config: ModelConfig
    model_state: dict[str, torch.Tensor]
    tokenizer_state: dict[str, Any]
    params: dict[str, Any]
    step: int
    epoch: int
    optimizer_state: dict[str, Any] | None = None
    # the weights after epoch 1 (None in checkpoints written before they were kept)
    first_epoch_state: dict[str, torch.Tensor] | None = None

    def tokenizer(self) -> Tokenizer:
        """The tokenizer the model was trained with."""
        return tokenizer_from_state(self.tokenizer_state)

    def build_model(self, device: str | torch.device = "cpu", first_epoch: bool = False) -> LanguageModel:
        """A model with this checkpoint's architecture and weights (the final ones, or with
        `first_epoch` those after epoch 1), in eval mode, on `device`."""
        weights = self.first_epoch_state if first_epoch else self.model_state
        if weights is None:
            raise CheckpointError(f"this checkpoint of {self.model_name} does not keep the weights after epoch 1; "
                                  f"expected one written by the current train stage")
        model = build_model(self.model_config)
        try:
            model.load_state_dict(weights)
        except RuntimeError as error:
            first = str(error).splitlines()[0]
            raise CheckpointError(f"weights do not fit the recorded model config: {first}") from error
        return model.to(device).eval()


def save_checkpoint(path: str | Path, checkpoint: Checkpoint) -> None:
    """Write `checkpoint` to `path` atomically; the same contents always give the same bytes."""
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "model_name": checkpoint.model_name,
        "model_config": checkpoint.model_config.to_dict(),
        "model_state": checkpoint.model_state,
        "tokenizer_state": dict(checkpoint.tokenizer_state),
        "params": checkpoint.params,
        "step": checkpoint.step,
        "epoch": checkpoint.epoch,
        "optimizer_state": checkpoint.optimizer_state,
        # kind, size and sha256 of the tokenizer embedded above: loading rebuilds it and compares
        "tokenizer_identity": checkpoint.tokenizer().identity,
        "first_epoch_state": checkpoint.first_epoch_state,
    }
    # torch.save names the archive inside the file after the file, and the temporary file has a
    # random name: serialising to memory first keeps equal checkpoints byte-identical.
    buffer = io.BytesIO()
    torch.save(_interned(payload), buffer)
    write_bytes_atomic(path, buffer.getvalue())


def _interned(value: Any) -> Any:
    """`value` with every string interned. Pickle writes a string once per distinct object, so a
    state loaded back from a resume file (its strings each a fresh object) would otherwise give
    other bytes than the same state built in one run."""
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, dict):
        return {_interned(k): _interned(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_interned(v) for v in value)
    return value


def load_checkpoint(
    path: str | Path,
    *,
    tokenizer: dict[str, Any] | None = None,
    model_name: str | None = None,
    map_location: str | torch.device = "cpu",
) -> Checkpoint:
    """Read the checkpoint at `path` (weights_only=True).

    `tokenizer`: an identity (`Tokenizer.identity`) the checkpoint's tokenizer must have.
    `model_name`: the name of the model it must be a checkpoint of.
    """
    path = Path(path)
    raw = _read_archive(path, map_location)
    try:
        checkpoint = Checkpoint(
            model_name=raw["model_name"],
            model_config=ModelConfig.from_dict(raw["model_config"]),
            model_state=raw["model_state"],
            tokenizer_state=raw["tokenizer_state"],
            params=raw["params"],
            step=raw["step"],
            epoch=raw["epoch"],
            optimizer_state=raw["optimizer_state"],
            first_epoch_state=raw.get("first_epoch_state"),
        )
    except (KeyError, RnnlmError) as error:
        raise CheckpointError(f"{path}: incomplete checkpoint ({error})") from error
    if model_name is not None and checkpoint.model_name != model_name:
        raise CheckpointError(
            f"{path}: a checkpoint of model {checkpoint.model_name!r}, expected {model_name!r}"
        )
    _check_weights(path, checkpoint)
    _check_tokenizer(path, checkpoint, raw.get("tokenizer_identity"), tokenizer)
    return checkpoint


def _read_archive(path: Path, map_location: str | torch.device) -> dict[str, Any]:
    """The dictionary a train stage saved at `path`, read as plain tensors, of this code's format and
    version; else a CheckpointError naming what the file is instead."""
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive; anything else is another format
        raise CheckpointError(f"{path}: not an rnnlm checkpoint (not a complete PyTorch archive: truncated, or another "
                              f"format; expected a file that the train stage wrote)")
    damaged = _damaged_entry(path)
    if damaged is not None:
        raise CheckpointError(f"{path}: its archive entry {damaged} fails its CRC-32 check (damaged on disk or in "
                              f"transit); expected the bytes the train stage wrote (`dvc checkout` restores them)")
    try:
        raw = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # noqa: BLE001 - torch.load fails on damaged or foreign archives in many ways
        # PyTorch's own message may advise loading with weights_only=False, which can run arbitrary
        # code: it is not repeated here.
        raise CheckpointError(f"{path}: not an rnnlm checkpoint (a PyTorch archive that cannot be read as plain "
                              f"tensors: damaged, or written by other code)") from error
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an rnnlm checkpoint (no '{FORMAT}' marker)")
    if raw.get("version") != VERSION:
        raise CheckpointError(f"{path}: checkpoint version {raw.get('version')!r}; this code reads version {VERSION}")
    return raw


def _damaged_entry(path: Path) -> str | None:
    """The first entry of the zip archive at `path` whose bytes fail the CRC-32 that torch.save wrote
    beside them, or None. PyTorch's reader does not check them: a weight with one bit flipped loads as
    any other number (-6.9e36 samples as well as 0.1)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        return f"(the archive cannot be read: {error})"


def _check_tokenizer(path: Path, checkpoint: Checkpoint, trained_with: object,
                     at_hand: dict[str, Any] | None) -> None:
    """The checkpoint's embedded tokenizer rebuilds, is the one its model was trained with
    (`trained_with`: the identity the train stage recorded beside it), has the model's vocabulary,
    and, when `at_hand` is given, is that one."""
    try:
        recorded = checkpoint.tokenizer().identity
    except RnnlmError as error:
        raise CheckpointError(f"{path}: its tokenizer cannot be rebuilt ({error})") from error
    if not isinstance(trained_with, dict):  # every train stage since the identity was recorded writes it
        raise CheckpointError(f"{path}: it does not record which tokenizer the model was trained with, so the one "
                              "it embeds cannot be checked; expected a checkpoint the train stage wrote (retrain "
                              "with `dvc repro`)")
    if recorded != dict(trained_with):
        raise CheckpointError(f"{path}: its embedded tokenizer ({_describe(recorded)}) is not the one the model was "
                              f"trained with ({_describe(trained_with)}); expected the checkpoint as the train stage "
                              f"wrote it")
    if recorded["vocab_size"] != checkpoint.model_config.vocab_size:
        raise CheckpointError(f"{path}: its tokenizer has {recorded['vocab_size']:,} tokens but the model "
                              f"{checkpoint.model_config.vocab_size:,}; expected the checkpoint as the train stage "
                              f"wrote it")
    if at_hand is not None and recorded != dict(at_hand):
        raise CheckpointError(
            f"{path}: trained with tokenizer {_describe(recorded)}, but the tokenizer at hand is {_describe(at_hand)}"
        )


def _check_weights(path: Path, checkpoint: Checkpoint) -> None:
    """The weights are the recorded config's (names and shapes, the model built on PyTorch's meta
    device, which costs no memory whatever the config says) and finite; else one CheckpointError."""
    try:
        with on_meta():
            expected = {k: tuple(v.shape) for k, v in build_model(checkpoint.model_config).state_dict().items()}
    except (RnnlmError, ValueError, RuntimeError, TypeError, OverflowError) as error:
        raise CheckpointError(f"{path}: its model config cannot be built ({str(error).splitlines()[0]})") from None
    for name, state in (("weights", checkpoint.model_state), ("weights after epoch 1", checkpoint.first_epoch_state)):
        if state is None:
            continue
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()) or \
                {k: tuple(v.shape) for k, v in state.items()} != expected:
            raise CheckpointError(f"{path}: its {name} are not of the shapes its model config gives; expected the "
                                  "checkpoint as the train stage wrote it")
        bad = next((k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())), None)
        if bad is not None:
            raise CheckpointError(f"{path}: its {name} hold NaN or infinite values ({bad}); expected the weights of a "
                                  "training that ended well")


def _describe(identity: dict[str, Any]) -> str:
    return f"{identity.get('kind')}/{identity.get('vocab_size')}/sha256:{str(identity.get('sha256'))[:12]}"
