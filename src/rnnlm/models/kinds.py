"""Every kind of model, one line each, and the model a config describes.

In:  a `ModelConfig` (a params entry gives one: `ModelParams.model_config(vocab_size)`).
Out: a new model with one interface, `forward(tokens (B, T), state=None, last_only=False) ->
     (logits (B, T, V), or (B, 1, V) for the last time step alone, state)`, its `.config` and its `description()`; `summary(model, name)` describes any of them
     for people (`python -m rnnlm.describe NAME` prints it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Union

import torch
from torch import nn

from rnnlm.models.config import RECURRENT, WINDOW_MLP, ModelConfig
from rnnlm.models.language_model import RecurrentLM
from rnnlm.models.window_mlp import WindowMLP

MODELS = {RECURRENT: RecurrentLM, WINDOW_MLP: WindowMLP}
"""Each `ModelConfig.kind`'s model class."""

LanguageModel = Union[RecurrentLM, WindowMLP]
"""Every model: `forward(tokens (B, T), state=None, last_only=False) -> (logits (B, T, V), state)`
and `.config`."""


def build_model(config: ModelConfig) -> LanguageModel:
    """A new model for `config`, of the class of its kind."""
    return MODELS[config.kind](config)


@contextmanager
def on_meta() -> Iterator[None]:
    """Models built inside are built on PyTorch's meta device: shapes and counts, no memory, whatever
    the sizes say. A meta tensor holds no values, so `torch.nn.init.normal_` (the embeddings' init)
    is skipped on it: on meta tensors PyTorch runs it through Python reference code that imports
    TorchDynamo, seconds of every process that only checks a checkpoint's shapes."""
    normal = torch.nn.init.normal_

    def normal_unless_meta(tensor: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        return tensor if tensor.is_meta else normal(tensor, *args, **kwargs)

    torch.nn.init.normal_ = normal_unless_meta
    try:
        with torch.device("meta"):
            yield
    finally:
        torch.nn.init.normal_ = normal


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def described_count(config: ModelConfig) -> int:
    """The parameter count `config`'s kind of model declares for it (its `parameter_count`), built
    from no weights: what `count_parameters` of the built model must equal."""
    return MODELS[config.kind].parameter_count(config)


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
