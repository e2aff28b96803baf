"""What one training run reads of params.yaml, read once: `RunSettings`.

In:  the validated params, the name of the model to train, the size of its tokenizer's vocabulary
     and (optionally) the device; the stage gives the device that `device_for` chose.
Out: a frozen `RunSettings`: the model's name, its `ModelConfig`, its schedule (epochs, steps per
     epoch at the run's scale, learning rate), its training settings (the shared `train:` block with
     the entry's own over it, `rnnlm.params.training_settings`, computed here and nowhere else for
     the run), the seed, the device, and the params as a checkpoint records them. Everything the
     training loop and its record read comes from this value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rnnlm.compute.device import device_for
from rnnlm.models.config import ModelConfig
from rnnlm.params import ModelParams, Params, TrainParams, as_dict, training_settings


def steps_per_epoch(steps: int, scale: float) -> int:
    """The entry's steps per epoch times `train.steps_scale`, rounded, at least 1."""
    return max(1, round(steps * scale))


@dataclass(frozen=True)
class RunSettings:
    """One run's settings (module docstring)."""

    name: str
    entry: ModelParams  # the entry of `models:`: its schedule (epochs, steps_per_epoch, lr) and sizes
    config: ModelConfig  # the architecture, for the run's vocabulary
    train: TrainParams  # the shared `train:` settings with the entry's own over them
    seed: int
    device: torch.device
    params: dict[str, Any]  # params.yaml as the checkpoint records it (`as_dict`)
    epochs: int  # the entry's
    steps_per_epoch: int  # the entry's at the run's scale (`train.steps_scale`)
    carried: bool  # the state goes from window to window (`train.state: carried`; never for the fixed-window model)

    def identity(self) -> dict[str, Any]:
        """What names the run among others in its resume key, with its tokenizer and data: the model,
        its entry, its training settings and the seed (as written before this value existed, so
        resume files keep their keys)."""
        return {"model": self.name, "entry": as_dict(self.entry), "train": as_dict(self.train), "seed": self.seed}


def run_settings(params: Params, name: str, vocab_size: int, device: torch.device | None = None) -> RunSettings:
    """The settings of a run of the entry `name` of `params.models` with a vocabulary of `vocab_size`,
    on `device` (None: the one `device_for` gives for its training settings)."""
    entry, train = params.models[name], training_settings(params, name)
    return RunSettings(name, entry, entry.model_config(vocab_size), train, params.seed,
                       device if device is not None else device_for(train), as_dict(params), entry.epochs,
                       steps_per_epoch(entry.steps_per_epoch, train.steps_scale), train.state == "carried")
