"""The recurrent language model: embedding, stacked recurrent layers, optional LayerNorm, output.

One interface for every model: `forward(tokens (B, T), state=None) -> (logits (B, T, V), state)`.
The state is a tuple with one entry per layer (`rnnlm.models.state`); None means zeros.
Stateless sampling calls it with `state=None` on the last token; stateful sampling feeds the prompt
once and then one token at a time, passing the returned state back in.

`summary(model, name)` describes a model for people (`python -m rnnlm.model NAME` prints it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Union

import torch.nn.functional as F
from torch import Tensor, nn

from rnnlm.models.products import linear
from rnnlm.models.cells import CELLS
from rnnlm.errors import ParamsError, RnnlmError
from rnnlm.params import ModelParams
from rnnlm.models.state import ModelState
from rnnlm.models.window_mlp import WindowMLP



@dataclass(frozen=True)
class ModelConfig:
    """Everything needed to rebuild a model's architecture (a checkpoint stores it as a dict)."""

    cell: str
    vocab_size: int
    embd: int
    hidden: int
    layers: int
    dropout: float = 0.0
    dropout_mode: str = "state"
    layer_norm: bool = False
    window: int = 0  # cell "mlp" only: how many tokens the fixed-window model sees

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, object]) -> ModelConfig:
        fields = dataclasses.fields(cls)
        required = {f.name for f in fields if f.default is dataclasses.MISSING}
        names = {f.name for f in fields}
        if not isinstance(raw, dict) or not required <= set(raw) <= names:
            raise RnnlmError(f"model config {raw!r}: expected the keys {sorted(names)}")
        return cls(**raw)  # type: ignore[arg-type]


class RecurrentLM(nn.Module):
    """Embedding -> recurrent layers -> (LayerNorm) -> Linear, at every time step."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        if config.cell not in CELLS:
            raise ParamsError(f"cell: expected one of {', '.join(CELLS)}, got {config.cell!r}")
        self.config = config
        layer_class = CELLS[config.cell].layer
        drop_state = config.dropout_mode == "state"
        self.embedding = nn.Embedding(config.vocab_size, config.embd)
        self.layers = nn.ModuleList(
            layer_class(config.embd if i == 0 else config.hidden, config.hidden, config.dropout, drop_state)
            for i in range(config.layers)
        )
        # In "between" mode only the outputs handed from one layer to the next are dropped.
        self.between = nn.Dropout(config.dropout) if not drop_state and config.dropout > 0 else None
        self.norm = nn.LayerNorm(config.hidden) if config.layer_norm else None
        self.head = nn.Linear(config.hidden, config.vocab_size)

    def forward(self, tokens: Tensor, state: ModelState | None = None) -> tuple[Tensor, ModelState]:
        """tokens (B, T) int64, state per layer or None -> logits (B, T, V), new state per layer.

        Runs time-major inside (the logits are a (B, T, V) view of (T, B, V) memory). The embedding
        and the first layer's input matrix are applied as one table of V rows, `first_layer_table`:
        the same function as embedding then product, without a product over all B*T tokens.
        """
        if state is not None and len(state) != len(self.layers):
            raise ValueError(f"state has {len(state)} layers, the model {len(self.layers)}")
        x = None
        new_state = []
        for i, layer in enumerate(self.layers):
            if i == 0:
                products = F.embedding(tokens.T, self.first_layer_table())  # (T, B, G*H)
            else:
                products = layer.input_products(x)
            x, layer_state = layer.scan(products, None if state is None else state[i])  # (T, B, H)
            new_state.append(layer_state)
            if self.between is not None and i < len(self.layers) - 1:
                x = self.between(x)
        if self.norm is not None:
            x = self.norm(x)
        return linear(x, self.head.weight, self.head.bias).transpose(0, 1), tuple(new_state)  # (B, T, V)

    def first_layer_table(self) -> Tensor:
        """(V, G*H): row v is token v's embedding times the first layer's input matrix."""
        return linear(self.embedding.weight, self.layers[0].cell.weight_ih)


LanguageModel = Union[RecurrentLM, WindowMLP]
"""Every model: `forward(tokens (B, T), state=None) -> (logits (B, T, V), state)` and `.config`."""


def model_from_config(config: ModelConfig) -> LanguageModel:
    """A new model for `config`: the fixed-window MLP for cell "mlp", else a recurrent model."""
    return WindowMLP(config) if config.cell == "mlp" else RecurrentLM(config)


def build_model(model: ModelParams, vocab_size: int) -> LanguageModel:
    """The model that the params entry `model` describes, for a vocabulary of `vocab_size`."""
    return model_from_config(config_from_params(model, vocab_size))


def config_from_params(model: ModelParams, vocab_size: int) -> ModelConfig:
    return ModelConfig(
        cell=model.cell,
        vocab_size=vocab_size,
        embd=model.embd,
        hidden=model.hidden,
        layers=model.layers,
        dropout=model.dropout,
        dropout_mode=model.dropout_mode,
        layer_norm=model.layer_norm,
        window=model.window,
    )


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def summary(model: LanguageModel, name: str) -> str:
    """A printable description: architecture, every parameter tensor, total and size as float32."""
    c = model.config
    total = count_parameters(model)
    mlp = c.cell == "mlp"
    dropout_where = "between layers" if mlp or c.dropout_mode == "between" else "on the carried state"
    lines = [
        f"{name}: {c.cell.upper()} language model, {c.layers} layer(s), embedding {c.embd}, "
        f"hidden {c.hidden}, vocabulary {c.vocab_size}" + (f", window {c.window} tokens" if mlp else ""),
        f"dropout {c.dropout} ({dropout_where})" + (", LayerNorm before the output" if c.layer_norm else ""),
        "",
        f"architecture: Embedding{f' of {c.window} tokens, concatenated' if mlp else ''} -> "
        + " -> ".join(type(layer).__name__ + (" + tanh" if mlp else "") for layer in model.layers)
        + (" -> LayerNorm" if c.layer_norm else "")
        + " -> Linear",
        "",
        f"{'parameter':<32} {'shape':>14} {'count':>12}",
        "-" * 60,
    ]
    for pname, p in model.named_parameters():
        lines.append(f"{pname:<32} {str(tuple(p.shape)):>14} {p.numel():>12,}")
    lines += ["-" * 60, f"total parameters: {total:,}", f"size: {total * 4 / 2**20:.2f} MB as float32"]
    return "\n".join(lines)
