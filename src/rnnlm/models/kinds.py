"""Every kind of model, one line each, and the model a config or a params entry describes.

In:  a `ModelConfig` (or a params entry and a vocabulary size).
Out: a new model with one interface, `forward(tokens (B, T), state=None, last_only=False) ->
     (logits (B, T, V), or (B, 1, V) for the last step alone, state)`, its `.config` and its `description()`; `summary(model, name)` describes any of them
     for people (`python -m rnnlm.describe NAME` prints it).
"""

from __future__ import annotations

from typing import Union

from torch import nn

from rnnlm.models.config import RECURRENT, WINDOW_MLP, ModelConfig, config_from_params
from rnnlm.models.language_model import RecurrentLM
from rnnlm.models.window_mlp import WindowMLP
from rnnlm.params import ModelParams

MODELS = {RECURRENT: RecurrentLM, WINDOW_MLP: WindowMLP}
"""Each `ModelConfig.kind`'s model class."""

LanguageModel = Union[RecurrentLM, WindowMLP]
"""Every model: `forward(tokens (B, T), state=None, last_only=False) -> (logits (B, T, V), state)`
and `.config`."""


def model_from_config(config: ModelConfig) -> LanguageModel:
    """A new model for `config`, of the class of its kind."""
    return MODELS[config.kind](config)


def build_model(model: ModelParams, vocab_size: int) -> LanguageModel:
    """The model that the params entry `model` describes, for a vocabulary of `vocab_size`."""
    return model_from_config(config_from_params(model, vocab_size))


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def summary(model: LanguageModel, name: str) -> str:
    """A printable description: architecture, every parameter tensor, total and size as float32."""
    total = count_parameters(model)
    headline, dropout, architecture = model.description()
    lines = [f"{name}: {headline}", dropout, "", architecture, "", f"{'parameter':<32} {'shape':>14} {'count':>12}",
             "-" * 60]
    for pname, p in model.named_parameters():
        lines.append(f"{pname:<32} {str(tuple(p.shape)):>14} {p.numel():>12,}")
    lines += ["-" * 60, f"total parameters: {total:,}", f"size: {total * 4 / 2**20:.2f} MB as float32"]
    return "\n".join(lines)
