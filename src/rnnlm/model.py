"""The recurrent language model: embedding, stacked recurrent layers, optional LayerNorm, output.

One interface for every model: `forward(tokens (B, T), state=None) -> (logits (B, T, V), state)`.
The state is a tuple with one entry per layer (h, or (h, c) for the LSTM); None means zeros.
Stateless sampling calls it with `state=None` on the last token; stateful sampling feeds the prompt
once and then one token at a time, passing the returned state back in.

`python -m rnnlm.model NAME` prints the layers and parameter breakdown of the entry NAME of
params.yaml.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from rnnlm.cells import LAYERS, State
from rnnlm.corpus import read_vocabulary
from rnnlm.errors import ParamsError, RnnlmError, run_main
from rnnlm.params import ModelParams, load_params, select_model

ModelState = tuple[State, ...]


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

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, object]) -> ModelConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(raw, dict) or set(raw) != names:
            raise RnnlmError(f"model config {raw!r}: expected exactly the keys {sorted(names)}")
        return cls(**raw)  # type: ignore[arg-type]


class RecurrentLM(nn.Module):
    """Embedding -> recurrent layers -> (LayerNorm) -> Linear, at every time step."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        if config.cell not in LAYERS:
            raise ParamsError(f"cell: expected one of {', '.join(LAYERS)}, got {config.cell!r}")
        self.config = config
        layer_class = LAYERS[config.cell]
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
        """tokens (B, T) int64, state per layer or None -> logits (B, T, V), new state per layer."""
        if state is not None and len(state) != len(self.layers):
            raise ValueError(f"state has {len(state)} layers, the model {len(self.layers)}")
        x = self.embedding(tokens)  # (B, T, E)
        new_state = []
        for i, layer in enumerate(self.layers):
            x, layer_state = layer(x, None if state is None else state[i])  # (B, T, H)
            new_state.append(layer_state)
            if self.between is not None and i < len(self.layers) - 1:
                x = self.between(x)
        if self.norm is not None:
            x = self.norm(x)
        return self.head(x), tuple(new_state)  # (B, T, V)


def build_model(model: ModelParams, vocab_size: int) -> RecurrentLM:
    """The model that the params entry `model` describes, for a vocabulary of `vocab_size`."""
    return RecurrentLM(config_from_params(model, vocab_size))


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
    )


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def summary(model: RecurrentLM, name: str) -> str:
    """A printable description: architecture, every parameter tensor, total and size as float32."""
    c = model.config
    total = count_parameters(model)
    lines = [
        f"{name}: {c.cell.upper()} language model, {c.layers} layer(s), embedding {c.embd}, "
        f"hidden {c.hidden}, vocabulary {c.vocab_size}",
        f"dropout {c.dropout} ({'on the carried state' if c.dropout_mode == 'state' else 'between layers'})"
        + (", LayerNorm before the output" if c.layer_norm else ""),
        "",
        "architecture: Embedding -> "
        + " -> ".join(type(layer).__name__ for layer in model.layers)
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


TINY_SHAKESPEARE_CHARS = 65
"""The character vocabulary of Tiny Shakespeare, used when no prepared vocabulary is at hand."""


def _vocab_size(model: ModelParams, params_tokenizer_size: int, prepared: Path) -> tuple[int, str]:
    if model.tokens == "sentencepiece":
        return params_tokenizer_size, "tokenizer.vocab_size"
    vocab_file = prepared / "vocab.json"
    if vocab_file.exists():
        return len(read_vocabulary(prepared)), str(vocab_file)
    return TINY_SHAKESPEARE_CHARS, "Tiny Shakespeare's 65 characters (no prepared vocabulary found)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rnnlm.model", description="Print a model's summary.")
    parser.add_argument("name", help="an entry of models: in params.yaml, e.g. astra_beta")
    parser.add_argument("--params", default="params.yaml", help="path to params.yaml")
    parser.add_argument("--prepared", default="data/prepared", help="prepared data folder (character vocabulary)")
    args = parser.parse_args(argv)
    params = load_params(args.params)
    entry = select_model(params, args.name)
    vocab_size, source = _vocab_size(entry, params.tokenizer.vocab_size, Path(args.prepared))
    print(summary(build_model(entry, vocab_size), args.name))
    print(f"vocabulary size from: {source}")


if __name__ == "__main__":
    run_main(main)
